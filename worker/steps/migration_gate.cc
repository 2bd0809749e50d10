#include "worker/steps/migration_gate.h"

#include <chrono>
#include <thread>

#include "cluster/member_client.h"
#include "common/log.h"
#include "common/wait.h"
#include "worker/progress.h"
#include "worker/ps_client.h"

namespace geodesic::worker {

Status MigrationGate::BeforeStep(int64_t clock) {
  GD_ASSIGN_OR_RETURN(int64_t m, Barrier());
  if (clock >= m) GD_RETURN_IF_ERROR(WaitAtBarrier(clock));
  return Status::Ok();
}

StatusOr<int64_t> MigrationGate::Barrier() {
  cluster::MembershipView v = env_.member->view();
  PsClient& ps = *env_.ps;
  if (v.shard_map.version() > ps.shard_map().version) GD_RETURN_IF_ERROR(ps.SwitchMap(v.shard_map));
  if (v.migration.id() == 0 || v.migration.new_map().version() <= ps.shard_map().version) return kNoBarrier;
  return v.migration.barrier_clock();
}

// At the barrier: every push below it acknowledged, then wait for the new
// map (or for the coordinator to drop the migration).
Status MigrationGate::WaitAtBarrier(int64_t clock) {
  GD_ASSIGN_OR_RETURN(double drained, env_.ps->WaitAcks(0, env_.stop));
  env_.n.comm_s += drained;
  const uint64_t id = env_.member->view().migration.id();
  GD_LOG(INFO) << "migration " << id << ": waiting at the barrier, clock " << clock;
  env_.progress->set_at_barrier(id);
  env_.member->Nudge();
  const TimePoint b0 = env_.clock->Now();
  WaitReporter report(env_.clock, std::chrono::seconds(env_.job.membership.report_after_s));
  while (!env_.stop->load()) {
    GD_ASSIGN_OR_RETURN(int64_t m, Barrier());
    if (clock < m) break;
    if (env_.clock->Now() - b0 > std::chrono::minutes(10))
      return DeadlineExceeded("migration " + std::to_string(id) + ": no new shard map after 10 minutes");
    if (report.Due()) GD_LOG(INFO) << "migration " << id << ": still waiting at the barrier, clock " << clock;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  env_.progress->set_at_barrier(0);
  env_.n.barrier_s += Seconds(env_.clock->Now() - b0);
  ++env_.n.barriers;
  GD_LOG(INFO) << "migration " << id << ": through the barrier after "
               << static_cast<int>(1e3 * Seconds(env_.clock->Now() - b0)) << " ms (shard map version "
               << env_.ps->shard_map().version << ")";
  return Status::Ok();
}

void MigrationGate::AddStats(stats::WorkerStats* s) const {
  const PsClientStats ps = env_.ps->Stats();
  s->set_migration_barriers(env_.n.barriers);
  s->set_migration_barrier_seconds(env_.n.barrier_s);
  s->set_chunks_rerouted(ps.chunks_rerouted);
  s->set_moved_refusals(ps.moved_refusals);
}

}  // namespace geodesic::worker
