// ElasticUnits: an elastic job's gate and data (membership.elastic;
// docs/deploy.md "Elastic workers"). The coordinator hands out data units
// (worker/units.h); each clock trains on one: Admit takes the next unit (or
// says none is left), the clock's minibatches are the unit's batches over
// the whole training set (converted a batch at a time), and once every
// shard acknowledged a clock's push its unit is reported finished in the
// heartbeats. A stopped worker (a pod deleted, a scale-down) leaves the job
// after its pushes are acknowledged and its finished units confirmed.
//
// Threading: the unit queue is shared with the heartbeat thread (it fills
// heartbeats and takes replies; UnitQueue is thread-safe); everything else
// is the loop's thread's.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <vector>

#include "common/status.h"
#include "worker/dataset.h"
#include "worker/gate.h"
#include "worker/minibatches.h"
#include "worker/step.h"
#include "worker/units.h"

namespace geodesic::worker {

class ElasticUnits final : public StepGate, public Minibatches {
 public:
  // Loads and checks the whole training set.
  static StatusOr<std::shared_ptr<ElasticUnits>> Create(StepEnv& env);
  const ImageSet& train() const { return full_; }

  // StepGate.
  void BeforeJoin(cluster::MemberOptions& mo) override;
  void FillHeartbeat(wire::Heartbeat* hb) override { queue_.Fill(hb); }
  int64_t TotalSteps(int64_t steps) const override;
  StatusOr<bool> Admit(int64_t clock) override;
  bool MayHaveMore() const override { return queue_.MayHaveMore(); }
  int64_t unit() const override { return unit_; }
  void Pushed(int64_t clock) override { unit_of_clock_[clock] = unit_; }
  void Acked(int64_t oldest_unacked) override;
  bool Settled() const override { return queue_.AllConfirmed(); }
  bool departs_when_stopped() const override { return true; }
  Status Depart(int64_t clock, const std::function<void()>& final_stats) override;
  void AddStats(stats::WorkerStats* s) const override { s->set_units_finished(queue_.finished()); }

  // Minibatches: the current unit's batches, in order.
  bool Gradient(FlatModel& model, int64_t step, torch::Tensor& grad) override;
  void AddDataStats(stats::WorkerStats* s) const override;

 private:
  ElasticUnits(StepEnv& env, ImageSet full);
  void WaitUnitsConfirmed();

  StepEnv& env_;
  ImageSet full_;  // the whole training set
  UnitData data_;  // the units' permutations
  UnitQueue queue_;
  int64_t unit_ = -1;  // the unit being computed, and its batches
  std::vector<std::vector<int64_t>> batches_;
  size_t next_batch_ = 0;
  std::map<int64_t, int64_t> unit_of_clock_;  // clocks whose push is not acknowledged yet
};

}  // namespace geodesic::worker
