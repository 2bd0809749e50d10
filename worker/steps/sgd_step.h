// SgdStep: one minibatch gradient a clock, for synchronous (BSP) and
// bounded-staleness SGD (training.staleness_bound; docs/architecture.md
// "One training step"). Pulls land in the model itself. The next clock's
// pull goes out before the compute (training.prefetch, held by the shards
// until our own push is in), or after the push; with pipeline_depth d the
// pulls of the next d clocks stay in flight, none beyond a migration's
// barrier. Not synchronized: the loop's thread only.
#pragma once

#include <memory>

#include "worker/minibatches.h"
#include "worker/steps/model_step.h"

namespace geodesic::worker {

class SgdStep final : public ModelStep {
 public:
  SgdStep(StepEnv& env, std::unique_ptr<FlatModel> model, std::shared_ptr<Minibatches> batches);

  std::string ClockName() const override { return " steps"; }
  Status Start(int64_t clock) override;
  StatusOr<double> Jump(int64_t from, int64_t to) override;
  Status BeforeCompute(int64_t clock, bool more) override;
  StatusOr<Update> Compute(int64_t clock) override;
  Status AfterPush(int64_t clock, bool more) override;
  Status AwaitNext(int64_t clock) override { return env_.WaitPull(clock + 1, params()); }
  size_t unacked_clocks() const override;
  int64_t Steps(int64_t clocks) const override { return clocks; }
  std::optional<SnapshotView> Snapshot(int64_t clock, bool last) const override;
  void AddStats(stats::WorkerStats* s) const override { AddMinibatchStats(*batches_, s); }

 private:
  float* params() const { return model_->params().data_ptr<float>(); }
  // Skips the minibatches of clocks [from, to).
  void SkipClocks(int64_t from, int64_t to);
  // Requests the pulls through `through` not requested yet, none beyond a barrier.
  Status PullThrough(int64_t through);

  std::shared_ptr<Minibatches> batches_;
  const int depth_;      // training.pipeline_depth: pulls of the next `depth_` clocks in flight
  const bool prefetch_;  // training.prefetch
};

}  // namespace geodesic::worker
