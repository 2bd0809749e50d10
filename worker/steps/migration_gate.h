// MigrationGate: a re-planned job's gate (wan.replan; docs/planner.md "In a
// running job"). A migration announces a barrier clock M: the worker pushes
// no clock >= M and pulls none beyond M until it holds the migration's new
// shard map. Barrier() first switches the PsClient to a newer published
// map; BeforeStep waits at the barrier with every push below it
// acknowledged. Loop thread only.
#pragma once

#include "worker/gate.h"
#include "worker/step.h"

namespace geodesic::worker {

class MigrationGate final : public StepGate {
 public:
  explicit MigrationGate(StepEnv& env) : env_(env) {}

  Status BeforeStep(int64_t clock) override;
  StatusOr<int64_t> Barrier() override;
  void AddStats(stats::WorkerStats* s) const override;

 private:
  Status WaitAtBarrier(int64_t clock);

  StepEnv& env_;
};

}  // namespace geodesic::worker
