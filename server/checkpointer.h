// Checkpointer: when a shard writes its checkpoints (server/checkpoint.h
// holds the file format) and how it starts from them. A checkpoint is
// written when the slowest live worker's clock passes the next multiple of
// checkpoint.every_clocks, when one is requested (SIGUSR1), once as soon as
// every chunk has a value (unless the shard started from a checkpoint), and
// at a stop or the job's end when checkpoint.on_stop. A failed write is
// logged and counted; training goes on and older checkpoints stay.
//
// Owns the schedule and the counters for the stats file; reads and
// restores the ShardState and ClockTable it is given (the server owns
// them). Not synchronized: the server loop's thread owns it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "config/job.h"
#include "proto/stats.pb.h"
#include "server/consistency.h"
#include "server/shard.h"

namespace geodesic::server {

class Checkpointer {
 public:
  // `dir` empty: no checkpoints. `requests`, if set, is bumped to ask for one.
  Checkpointer(const JobSpec& job, int server_id, std::string dir, const std::atomic<uint64_t>* requests,
               const Clock* clock);

  // The first periodic checkpoint after a fresh start.
  void Start();
  // Loads the resume plan's checkpoints into `shard` and seeds `clocks` with
  // the plan's worker clocks.
  Status Resume(const std::string& plan_file, ShardState* shard, ClockTable* clocks);
  // Loads this shard's newest valid checkpoint; the workers' clocks come
  // from the coordinator afterwards (updates acknowledged after it are lost).
  Status Recover(ShardState* shard);
  // Writes a checkpoint if one is due, or for `reason` ("stop", "final").
  void Maybe(const ShardState& shard, const ClockTable& clocks, const char* reason = nullptr);
  void AddStats(stats::ShardStats* j) const;

 private:
  // Why a checkpoint is due now, or null.
  const char* Due(int64_t clock, const char* reason);
  void Write(const ShardState& shard, int64_t clock, const char* reason);

  const JobSpec& job_;
  const int server_id_;
  const std::string dir_;
  const std::atomic<uint64_t>* requests_;
  const Clock* clock_;
  int64_t next_clock_ = 0;
  bool restored_ = false;       // started from a checkpoint (no initial checkpoint then)
  int64_t last_min_clock_ = 0;  // the slowest live worker's clock when one was last live
  uint64_t seen_requests_ = 0;
  uint64_t written_ = 0;
  int64_t last_clock_ = -1;
  double last_ms_ = 0;
  std::string last_error_;
};

}  // namespace geodesic::server
