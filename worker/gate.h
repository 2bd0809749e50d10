// StepGate: what the Worker's loop (worker/worker.h) consults around each
// clock besides its strategy: whether this worker may train another clock
// and on which data, and whether it must stop at a barrier. A job has one
// gate: ElasticUnits (worker/steps/elastic_units.h: membership.elastic,
// data units handed out by the coordinator, leaving when stopped),
// MigrationGate (worker/steps/migration_gate.h: wan.replan, a migration's
// barrier clock), or OpenGate for every other job (config/validate.cc
// refuses elastic jobs that re-plan).
//
// The Worker owns its gate, which outlives the membership client: an
// elastic gate's unit queue is filled and fed by the heartbeat thread
// (FillHeartbeat, the `on_reply` it sets); everything else is called on the
// loop's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>

#include "common/status.h"
#include "proto/geodesic.pb.h"
#include "proto/stats.pb.h"

namespace geodesic::cluster {
struct MemberOptions;
}  // namespace geodesic::cluster

namespace geodesic::worker {

inline constexpr int64_t kNoBarrier = std::numeric_limits<int64_t>::max();

class StepGate {
 public:
  virtual ~StepGate() = default;

  // Joining: what the gate asks of the membership client's heartbeats.
  virtual void BeforeJoin(cluster::MemberOptions& mo) {}
  // Heartbeat thread: adds the gate's report to a heartbeat.
  virtual void FillHeartbeat(wire::Heartbeat* hb) {}
  // Minibatch steps in the job for this worker, when the gate decides them
  // (elastic: every unit's); `steps` otherwise.
  virtual int64_t TotalSteps(int64_t steps) const { return steps; }

  // Before clock `clock`: false when this worker has nothing more to train
  // (no data units left). May block.
  virtual StatusOr<bool> Admit(int64_t clock) { return true; }
  // Before clock `clock`'s pulls: waits at a migration's barrier.
  virtual Status BeforeStep(int64_t clock) { return Status::Ok(); }
  // Whether a clock may follow this one (pulls ahead stop otherwise).
  virtual bool MayHaveMore() const { return true; }
  // The barrier clock in force (kNoBarrier: none): no pull goes beyond it.
  virtual StatusOr<int64_t> Barrier() { return kNoBarrier; }
  // The data unit this clock's push was computed on (-1: none), and that
  // it was pushed.
  virtual int64_t unit() const { return -1; }
  virtual void Pushed(int64_t clock) {}
  // Every push of a clock below `oldest_unacked` is acknowledged.
  virtual void Acked(int64_t oldest_unacked) {}
  // Whether the coordinator confirmed everything the gate reported (the
  // end of training waits for it, for at most two leases).
  virtual bool Settled() const { return true; }

  // Stopped (SIGTERM): whether this worker leaves the job (Depart) instead
  // of stopping where it is.
  virtual bool departs_when_stopped() const { return false; }
  // Leaves the job at clock `clock`: `final_stats` is called before the
  // coordinator hears that we leave.
  virtual Status Depart(int64_t clock, const std::function<void()>& final_stats) { return Status::Ok(); }

  virtual void AddStats(stats::WorkerStats* s) const {}
};

// The gate of a job that is neither elastic nor re-planned: always open.
class OpenGate final : public StepGate {};

}  // namespace geodesic::worker
