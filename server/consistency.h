// Stale synchronous parallel (SSP) bookkeeping for one server shard.
//
// A worker's clock is the number of steps whose gradients this shard has
// received in full. With bound s, a read (pull) at clock c may be answered
// once every live worker has finished clock c - s; s = 0 is BSP. Only live
// workers count: when the coordinator reports a worker's lease expired, it
// leaves the minimum, so a dead worker never blocks the others. Not
// synchronized; owned by the shard's loop thread.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace geodesic::server {

class ClockTable {
 public:
  static constexpr int64_t kNoWorkers = std::numeric_limits<int64_t>::max();

  explicit ClockTable(int64_t staleness_bound) : bound_(staleness_bound) {}

  // Replaces the live set. `known_clocks` (parallel to `live`, from the
  // coordinator) seeds workers this shard has not heard from yet, such as a
  // worker that joins mid-job at the current minimum clock.
  void SetLive(const std::vector<int>& live, const std::vector<int64_t>& known_clocks);
  // Records that `worker` finished `clock` here (its clock becomes clock + 1).
  void Finished(int worker, int64_t clock);

  // Smallest finished clock over live workers; kNoWorkers if none is live.
  int64_t MinClock() const;
  // The highest MinClock this table has had (kNoWorkers before any worker
  // was live). It never falls: a worker that rejoins at the coordinator's
  // view of the live clock, which lags, lowers MinClock for a while but not
  // this, so the live window (server::CheckPushWindow) still admits the
  // pushes of the workers it lags behind.
  int64_t Frontier() const { return frontier_; }
  bool CanRead(int64_t clock) const;
  // The slowest live worker (-1 if none), for "blocked by" reports.
  int SlowestWorker() const;
  int64_t ClockOf(int worker) const;
  bool IsLive(int worker) const;
  const std::vector<int>& live() const { return live_; }
  int64_t bound() const { return bound_; }

 private:
  int64_t bound_;
  std::vector<int> live_;
  std::map<int, int64_t> clock_;  // finished clocks of every worker ever seen
  int64_t frontier_ = kNoWorkers;
  void Advance();
};

}  // namespace geodesic::server
