// PushLedger: a worker process's count of the gradient chunks it pushed and
// what became of them, kept where its death cannot take it.
//
// The counters live in a small file mapped shared into the process, so every
// increment is in the kernel's page cache the moment it is made: a process
// killed with SIGKILL leaves its exact counts behind (a machine crash is
// another matter; nothing here is fsynced). The launcher reads every
// process's ledger after the job to account acknowledged updates against the
// ones the shards took, killed processes included (docs/reliability.md,
// "Acknowledged vs. taken").
//
// Order of increments, relied on by that accounting: `pushed` before the
// push leaves the process, `acknowledged`/`dropped`/`refused` once its answer
// arrived. So at any instant, and in a killed process's file,
//   acknowledged + dropped + refused <= pushed,
// and the difference is what was in flight. One writer (the training
// thread); readers read after the writer exited.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace geodesic {

struct PushCounts {
  uint64_t pushed = 0;        // chunks sent in pushes (first sends; resends are not counted again)
  uint64_t acknowledged = 0;  // chunks a shard answered APPLIED or DUPLICATE
  uint64_t dropped = 0;       // chunks answered STALE_DROPPED (their round had closed)
  uint64_t refused = 0;       // chunks of pushes a shard refused whole (an error reply)
  uint64_t InFlight() const { return pushed - acknowledged - dropped - refused; }
};

// Where a process whose stats go to `stats_file` keeps its ledger:
// "dir/worker-3.json" -> "dir/worker-3.<pid>.ledger", one per process, so a
// restarted worker does not overwrite its dead predecessor's; where that
// file exists already (a container restarted with the same pid),
// "dir/worker-3.<pid>-2.ledger" and so on.
std::string PushLedgerPath(const std::string& stats_file);

class PushLedger {
 public:
  // Creates `path` (replacing any file there) and maps it; all counts 0.
  static StatusOr<PushLedger> Create(const std::string& path);
  // A ledger written by another process (running or dead). Refuses a file
  // that is not one (wrong size or magic) with the reason.
  static StatusOr<PushCounts> Read(const std::string& path);

  PushLedger(PushLedger&& other) noexcept;
  PushLedger& operator=(PushLedger&& other) noexcept;
  PushLedger(const PushLedger&) = delete;
  PushLedger& operator=(const PushLedger&) = delete;
  ~PushLedger();

  void AddPushed(uint64_t n) { Add(kPushed, n); }
  void AddAcknowledged(uint64_t n) { Add(kAcknowledged, n); }
  void AddDropped(uint64_t n) { Add(kDropped, n); }
  void AddRefused(uint64_t n) { Add(kRefused, n); }
  PushCounts counts() const;
  const std::string& path() const { return path_; }

 private:
  enum Slot { kPushed = 0, kAcknowledged, kDropped, kRefused, kSlots };
  PushLedger(std::string path, uint64_t* slots) : path_(std::move(path)), slots_(slots) {}
  void Add(Slot s, uint64_t n);

  std::string path_;
  uint64_t* slots_ = nullptr;  // kSlots counters after the magic, in the mapping
};

}  // namespace geodesic
