#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace geodesic {

namespace {
constexpr const char* kAtomicWriteTemporary = ".tmp.";
}  // namespace

bool IsAtomicWriteTemporary(const std::string& path) {
  const size_t slash = path.rfind('/');
  return path.find(kAtomicWriteTemporary, slash == std::string::npos ? 0 : slash) != std::string::npos;
}

Status WriteFileAtomic(const std::string& path, const std::string& contents, bool durable, int mode) {
  std::string tmp = path + kAtomicWriteTemporary + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Unavailable("cannot create " + tmp + ": " + std::strerror(errno));
  size_t off = 0;
  while (off < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + off, contents.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string err = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return Unavailable("cannot write " + tmp + ": " + err);
    }
    off += static_cast<size_t>(n);
  }
  if ((durable && ::fsync(fd) != 0) || ::close(fd) != 0) {
    std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Unavailable("cannot flush " + tmp + ": " + err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Unavailable("cannot rename " + tmp + " to " + path + ": " + err);
  }
  if (durable) {
    // The rename itself is durable only once the directory is.
    std::string dir = std::filesystem::path(path).parent_path().string();
    int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || ::fsync(dfd) != 0) {
      std::string err = std::strerror(errno);
      if (dfd >= 0) ::close(dfd);
      return Unavailable("cannot flush directory of " + path + ": " + err);
    }
    ::close(dfd);
  }
  return Status::Ok();
}

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

StatusOr<std::string> ReadRegularFile(const std::string& path, uint64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return NotFound("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + " is not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    ::close(fd);
    return InvalidArgument(path + " is " + std::to_string(size) + " bytes, more than the " + std::to_string(max_bytes) +
                           " it may hold");
  }
  std::string out(size, '\0');
  size_t off = 0;
  while (off < size) {
    ssize_t n = ::read(fd, out.data() + off, size - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // shrank while we read: what is left is checked by the caller's format
    off += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(off);
  return out;
}

Status MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return Unavailable("cannot create directory " + path + ": " + ec.message());
  return Status::Ok();
}

}  // namespace geodesic
