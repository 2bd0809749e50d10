#include "common/push_ledger.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

namespace geodesic {
namespace {

// File layout: 8 bytes of magic, then the counters as native uint64 (the
// file never leaves the machine that wrote it).
constexpr char kMagic[8] = {'G', 'D', 'L', 'E', 'D', 'G', 'R', '1'};
constexpr size_t kCounters = 4;
constexpr size_t kFileBytes = sizeof(kMagic) + kCounters * sizeof(uint64_t);

std::string Errno() { return std::strerror(errno); }

}  // namespace

std::string PushLedgerPath(const std::string& stats_file) {
  std::string base = stats_file;
  if (base.size() > 5 && base.ends_with(".json")) base.resize(base.size() - 5);
  base += "." + std::to_string(::getpid());
  // A container's processes all have small pids: a restarted worker may
  // have its predecessor's. Its ledger must not replace the dead one's.
  std::string path = base + ".ledger";
  for (int k = 2; std::filesystem::exists(path) && k < 10000; ++k) path = base + "-" + std::to_string(k) + ".ledger";
  return path;
}

StatusOr<PushLedger> PushLedger::Create(const std::string& path) {
  static_assert(kSlots == kCounters);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Unavailable("cannot create push ledger " + path + ": " + Errno());
  if (::ftruncate(fd, kFileBytes) != 0) {
    std::string err = Errno();
    ::close(fd);
    return Unavailable("cannot size push ledger " + path + ": " + err);
  }
  void* p = ::mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  std::string err = p == MAP_FAILED ? Errno() : "";
  ::close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED) return Unavailable("cannot map push ledger " + path + ": " + err);
  std::memcpy(p, kMagic, sizeof(kMagic));
  return PushLedger(path, reinterpret_cast<uint64_t*>(static_cast<char*>(p) + sizeof(kMagic)));
}

StatusOr<PushCounts> PushLedger::Read(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound("cannot open push ledger " + path + ": " + Errno());
  char buf[kFileBytes + 1];
  ssize_t n = ::pread(fd, buf, sizeof(buf), 0);
  ::close(fd);
  if (n != static_cast<ssize_t>(kFileBytes) || std::memcmp(buf, kMagic, sizeof(kMagic)) != 0)
    return DataLoss(path + " is not a push ledger (" + std::to_string(n) + " bytes, expected " +
                    std::to_string(kFileBytes) + " starting with GDLEDGR1)");
  uint64_t v[kCounters];
  std::memcpy(v, buf + sizeof(kMagic), sizeof(v));
  return PushCounts{
      .pushed = v[kPushed], .acknowledged = v[kAcknowledged], .dropped = v[kDropped], .refused = v[kRefused]};
}

PushLedger::PushLedger(PushLedger&& other) noexcept
    : path_(std::move(other.path_)), slots_(std::exchange(other.slots_, nullptr)) {}

PushLedger& PushLedger::operator=(PushLedger&& other) noexcept {
  if (this != &other) {
    if (slots_) ::munmap(reinterpret_cast<char*>(slots_) - sizeof(kMagic), kFileBytes);
    path_ = std::move(other.path_);
    slots_ = std::exchange(other.slots_, nullptr);
  }
  return *this;
}

PushLedger::~PushLedger() {
  if (slots_) ::munmap(reinterpret_cast<char*>(slots_) - sizeof(kMagic), kFileBytes);
}

void PushLedger::Add(Slot s, uint64_t n) {
  // A store to the shared mapping is in the page cache once made; the
  // atomic keeps the compiler from holding the count in a register.
  std::atomic_ref<uint64_t>(slots_[s]).fetch_add(n, std::memory_order_relaxed);
}

PushCounts PushLedger::counts() const {
  auto at = [&](Slot s) { return std::atomic_ref<uint64_t>(slots_[s]).load(std::memory_order_relaxed); };
  return PushCounts{
      .pushed = at(kPushed), .acknowledged = at(kAcknowledged), .dropped = at(kDropped), .refused = at(kRefused)};
}

}  // namespace geodesic
