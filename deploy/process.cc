#include "deploy/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>

#include "deploy/spawner.h"

namespace geodesic::deploy {

std::string SelfBinary() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "geodesic" : p.string();
}

std::string ExitInfo::Describe() const {
  if (signal) {
    const char* name = sigabbrev_np(signal);
    return std::string("killed by SIG") + (name ? name : std::to_string(signal).c_str());
  }
  return "exited " + std::to_string(code);
}

ExitInfo ExitFromWait(int status, const struct rusage& usage) {
  ExitInfo info;
  info.cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                     static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
  info.max_rss_mb = static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
  if (WIFEXITED(status)) info.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) info.signal = WTERMSIG(status);
  return info;
}

bool EnterChild(pid_t parent, int log_fd) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) return false;
  ::dup2(log_fd, STDOUT_FILENO);
  ::dup2(log_fd, STDERR_FILENO);
  // Nothing else of the parent's crosses into the child: an inherited
  // socket (the link emulator's accepted connections, its listeners)
  // would stay open in the child after the launcher closed it, and the
  // peer would never see the close. A restarted shard's clients then
  // wrote into a connection nobody read.
  ::close_range(3, ~0U, 0);
  return true;
}

Status Child::Start() {
  std::vector<char*> args;
  for (auto& a : argv_) args.push_back(a.data());
  args.push_back(nullptr);
  int fd = ::open(log_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Unavailable("cannot create " + log_file_ + ": " + std::strerror(errno));
  if (!argv_.empty() && SpawnerRunning() && argv_[0] == SelfBinary()) {
    // This binary, already loaded: fork it from the spawner (deploy/spawner.h).
    StatusOr<pid_t> pid = SpawnChild(argv_, fd);
    if (pid.ok()) {
      ::close(fd);
      pid_ = *pid;
      spawned_ = true;
      return Status::Ok();
    }
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd);
    return Unavailable(std::string("fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    if (!EnterChild(parent, fd)) ::_exit(127);  // the launcher died before prctl
    ::execv(args[0], args.data());
    const char msg[] = "exec failed\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)ignored;
    ::_exit(127);
  }
  ::close(fd);
  pid_ = pid;
  return Status::Ok();
}

bool Child::Poll() {
  if (exit_) return true;
  if (pid_ <= 0) return false;
  if (spawned_) {
    exit_ = SpawnedExit(pid_);
    return exit_.has_value();
  }
  int status = 0;
  struct rusage usage {};
  pid_t r = ::wait4(pid_, &status, WNOHANG, &usage);
  if (r != pid_) return false;
  exit_ = ExitFromWait(status, usage);
  return true;
}

void Child::Signal(int sig) const {
  if (running()) ::kill(pid_, sig);
}

std::string Child::LogTail(int lines) const {
  std::ifstream in(log_file_);
  std::deque<std::string> tail;
  for (std::string line; std::getline(in, line);) {
    tail.push_back(line);
    if (static_cast<int>(tail.size()) > lines) tail.pop_front();
  }
  std::string out;
  for (const auto& l : tail) out += "    | " + l + "\n";
  return out;
}

}  // namespace geodesic::deploy
