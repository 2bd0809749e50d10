#include "worker/progress.h"

namespace geodesic::worker {

void Progress::Start(int64_t clock, int64_t target_steps) {
  MutexLock lock(mu_);
  clock_ = clock;
  p_.set_target_steps(target_steps);
}

void Progress::Fill(wire::Heartbeat* hb) const {
  MutexLock lock(mu_);
  hb->set_clock(clock_);
  hb->set_done(done_);
  hb->set_barrier_floor(barrier_floor_);
  hb->set_at_barrier(at_barrier_);
  *hb->mutable_worker() = p_;
}

int64_t Progress::clock() const {
  MutexLock lock(mu_);
  return clock_;
}

void Progress::set_clock(int64_t clock) {
  MutexLock lock(mu_);
  clock_ = clock;
}

void Progress::set_barrier_floor(int64_t floor) {
  MutexLock lock(mu_);
  barrier_floor_ = floor;
}

void Progress::set_at_barrier(uint64_t migration) {
  MutexLock lock(mu_);
  at_barrier_ = migration;
}

void Progress::Update(int64_t clock, const std::function<void(wire::WorkerProgress*)>& fill) {
  MutexLock lock(mu_);
  clock_ = clock;
  fill(&p_);
}

void Progress::Finish(double comm_seconds) {
  MutexLock lock(mu_);
  done_ = true;
  p_.set_comm_seconds(comm_seconds);
}

}  // namespace geodesic::worker
