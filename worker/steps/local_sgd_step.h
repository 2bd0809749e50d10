// LocalSgdStep: a round of local SGD a clock (training.local_steps > 1;
// worker/local_sgd.h, docs/wan.md): local_steps minibatch steps of the inner
// optimizer on the worker's own model, then the round's progress is pushed
// and the shards average it (DiLoCo with AdamW inside and Nesterov
// outside). Pulls land in LocalRounds::global(). With overlap_rounds the
// next round starts at once and the average of the last one is folded in
// when the round ends, or mid-round once it arrived (overlap_steps). With
// training.fragments a clock synchronizes one fragment of the model's
// chunks (streaming DiLoCo). Not synchronized: the loop's thread only.
#pragma once

#include <memory>
#include <optional>

#include "cluster/chunking.h"
#include "worker/local_sgd.h"
#include "worker/minibatches.h"
#include "worker/steps/model_step.h"

namespace geodesic::worker {

class LocalSgdStep final : public ModelStep {
 public:
  LocalSgdStep(StepEnv& env, std::unique_ptr<FlatModel> model, std::shared_ptr<Minibatches> batches);

  std::string ClockName() const override;
  // InvalidArgument for more fragments than the model has chunks.
  Status Start(int64_t clock) override;
  StatusOr<double> Jump(int64_t from, int64_t to) override;
  StatusOr<Update> Compute(int64_t clock) override;
  Status AfterPush(int64_t clock, bool more) override;
  Status AwaitNext(int64_t clock) override;
  int64_t Steps(int64_t) const override { return env_.n.batches; }
  // The shards' model as last pulled (the average), not this worker's own
  // progress since, named by the rounds it holds and dated when it was
  // taken in: with overlapped rounds that is up to a round after the clock
  // that pulled it began. Steps count minibatches; a model already
  // recorded is not recorded again.
  std::optional<SnapshotView> Snapshot(int64_t clock, bool last) const override;
  void AddStats(stats::WorkerStats* s) const override;

 private:
  float* global() const { return rounds_->global().data_ptr<float>(); }
  void SkipClocks(int64_t from, int64_t to);
  // The round's local steps into the model; false if none was usable.
  bool LocalSteps(int64_t clock, torch::Tensor& grad);
  // training.overlap_steps > 0, after `taken` steps of round `clock`: folds
  // the previous round's average in once it has arrived, or waits for it
  // from the overlap_steps-th step on; an error is kept in merge_error_.
  void MergeIfArrived(int64_t clock, int64_t taken);
  // Ends the round, folding in the previous round's average first when it
  // travelled under this round's compute (overlap_rounds); `u.resumed` is
  // when a wait for it ended.
  Status FinishRound(int64_t clock, torch::Tensor& grad, bool* usable, Update* u);
  // training.fragments: the chunks clock `clock` synchronizes (none set:
  // all of them, as without fragments and at the job's last clock).
  std::optional<cluster::ChunkRange> FragmentOf(int64_t clock) const;
  LocalRounds::Span SpanOf(const std::optional<cluster::ChunkRange>& chunks) const;
  // global() now holds the shards' model of clock `clock` (its rounds
  // before that clock), taken in now.
  void TookGlobal(int64_t clock);

  std::shared_ptr<Minibatches> batches_;
  const int local_steps_;
  const int fragments_;
  std::unique_ptr<LocalRounds> rounds_;
  int64_t pending_pull_ = -1;                          // overlap_rounds: the round whose average is in flight
  std::optional<cluster::ChunkRange> pending_chunks_;  // with fragments: the chunks that average covers
  Status merge_error_;
  int64_t global_clock_ = 0;             // global() holds the shards' model of this clock
  TimePoint global_at_{};                // since this time
  mutable int64_t snapshot_clock_ = -1;  // the global clock of the last snapshot
};

}  // namespace geodesic::worker
