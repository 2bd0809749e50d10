// Progress: what a worker's training thread reports and its MemberClient's
// heartbeat thread sends (clock, done, the re-planning barrier state, the
// WorkerProgress numbers). Every member is guarded by one mutex, which clang
// checks (-Wthread-safety); this file is Torch-free so that the check can
// compile it. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>

#include "common/thread_annotations.h"
#include "proto/geodesic.pb.h"

namespace geodesic::worker {

class Progress {
 public:
  // Training starts (again) at `clock`, of `target_steps` minibatch steps.
  void Start(int64_t clock, int64_t target_steps) GD_EXCLUDES(mu_);
  // The heartbeat's view of it.
  void Fill(wire::Heartbeat* hb) const GD_EXCLUDES(mu_);
  int64_t clock() const GD_EXCLUDES(mu_);
  void set_clock(int64_t clock) GD_EXCLUDES(mu_);
  // Re-planning: the lowest barrier clock we can still honor.
  void set_barrier_floor(int64_t floor) GD_EXCLUDES(mu_);
  // Re-planning: the migration whose barrier we wait at (0: none).
  void set_at_barrier(uint64_t migration) GD_EXCLUDES(mu_);
  // Sets the clock and lets `fill` update the numbers, under the mutex.
  void Update(int64_t clock, const std::function<void(wire::WorkerProgress*)>& fill) GD_EXCLUDES(mu_);
  // Training is over; `comm_seconds` is the final network time.
  void Finish(double comm_seconds) GD_EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  int64_t clock_ GD_GUARDED_BY(mu_) = 0;  // steps pushed
  bool done_ GD_GUARDED_BY(mu_) = false;
  int64_t barrier_floor_ GD_GUARDED_BY(mu_) = 0;
  uint64_t at_barrier_ GD_GUARDED_BY(mu_) = 0;
  wire::WorkerProgress p_ GD_GUARDED_BY(mu_);
};

}  // namespace geodesic::worker
