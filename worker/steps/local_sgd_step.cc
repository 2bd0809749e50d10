#include "worker/steps/local_sgd_step.h"

#include <algorithm>

#include "common/log.h"
#include "worker/ps_client.h"

namespace geodesic::worker {

LocalSgdStep::LocalSgdStep(StepEnv& env, std::unique_ptr<FlatModel> model, std::shared_ptr<Minibatches> batches)
    : ModelStep(env, std::move(model)),
      batches_(std::move(batches)),
      local_steps_(env.job.training.local_steps),
      fragments_(env.job.training.fragments) {}

std::string LocalSgdStep::ClockName() const {
  return " rounds of " + std::to_string(local_steps_) + " local steps" +
         (fragments_ > 1 ? " (one of " + std::to_string(fragments_) + " fragments synchronized per round)" : "");
}

void LocalSgdStep::SkipClocks(int64_t from, int64_t to) {
  batches_->Skip(from * local_steps_, std::min(env_.total_steps, to * local_steps_));
}

Status LocalSgdStep::Start(int64_t clock) {
  if (const uint32_t chunks = env_.ps->shard_map().layout.num_chunks(); fragments_ > static_cast<int>(chunks))
    return InvalidArgument("training.fragments " + std::to_string(fragments_) + " is more than the model's " +
                           std::to_string(chunks) + " chunks (wire.chunk_bytes " +
                           std::to_string(env_.job.wire.chunk_bytes) + "); lower it or cut smaller chunks");
  SkipClocks(0, clock);
  // Pulls land in `global`, our copy of the shards' model (pulls of changes
  // add into it); the model trains on its own values, and `base` is where
  // this round's progress started.
  rounds_ = std::make_unique<LocalRounds>(env_.job, model_->params());
  GD_ASSIGN_OR_RETURN(bool pulled, env_.PullStart(clock, global()));
  if (!pulled) rounds_->AdoptOwn();  // the shards' initial model is ours
  TookGlobal(clock);
  rounds_->Restart();
  env_.pulled_through = clock;
  env_.pushed_through = clock - 1;
  return Status::Ok();
}

StatusOr<double> LocalSgdStep::Jump(int64_t from, int64_t to) {
  pending_pull_ = -1;
  SkipClocks(from, to);
  GD_ASSIGN_OR_RETURN(double waited, env_.PullFull(to, global()));
  TookGlobal(to);
  rounds_->Restart();
  env_.pulled_through = std::min<int64_t>(to, env_.clocks - 1);
  return waited;
}

StatusOr<Update> LocalSgdStep::Compute(int64_t clock) {
  torch::Tensor grad = model_->NewGradBuffer();
  const double merge_wait0 = env_.n.merge_wait_s;
  bool usable = LocalSteps(clock, grad);
  GD_RETURN_IF_ERROR(merge_error_);
  Update u;
  u.computed = u.resumed = env_.clock->Now();
  u.waited_s = env_.n.merge_wait_s - merge_wait0;  // a mid-round wait is communication
  GD_RETURN_IF_ERROR(FinishRound(clock, grad, &usable, &u));
  if (!usable) {
    GD_LOG(ERROR) << "round " << clock << ": loss or gradient is not finite; skipping this round's push";
    return u;
  }
  // With fragments only this clock's span is pushed, and only it was written.
  const LocalRounds::Span pushed = fragments_ > 1 ? SpanOf(FragmentOf(clock)) : LocalRounds::Span{0, grad.numel()};
  GD_RETURN_IF_ERROR(CheckPushable(grad.data_ptr<float>() + pushed.begin, pushed.size, clock));
  u.only = FragmentOf(clock);
  Hand(std::move(grad), &u);
  return u;
}

// A round: local steps on our own model, then its progress is pushed. The
// inner schedule runs over the minibatch steps.
bool LocalSgdStep::LocalSteps(int64_t clock, torch::Tensor& grad) {
  int took = 0;
  for (int64_t k = clock * local_steps_; k < std::min(env_.total_steps, (clock + 1) * local_steps_); ++k) {
    grad.zero_();
    ++env_.n.batches;
    if (!batches_->Gradient(*model_, k, grad)) {
      ++env_.n.skipped;
      GD_LOG(ERROR) << "step " << k << ": loss or gradient is not finite; skipping this local step";
      continue;
    }
    rounds_->Step(grad, LearningRateFactor(env_.job.optimizer, k, env_.total_steps));
    ++took;
    MergeIfArrived(clock, k + 1 - clock * local_steps_);
  }
  return took > 0;
}

void LocalSgdStep::MergeIfArrived(int64_t clock, int64_t taken) {
  const int64_t bound = env_.job.training.overlap_steps;
  if (bound == 0 || pending_pull_ != clock || !merge_error_.ok()) return;
  if (taken < bound && !env_.ps->PullArrived(clock)) return;
  TimePoint t0 = env_.clock->Now();
  merge_error_ = env_.WaitPull(clock, global());  // at once if it has arrived; counted as communication
  env_.n.merge_wait_s += Seconds(env_.clock->Now() - t0);
  if (!merge_error_.ok()) return;
  TookGlobal(clock);
  if (fragments_ > 1)
    rounds_->MergeNow(SpanOf(pending_chunks_));
  else
    rounds_->MergeNow();
  pending_pull_ = -1;
  ++env_.n.early_merges;
}

Status LocalSgdStep::FinishRound(int64_t clock, torch::Tensor& grad, bool* usable, Update* u) {
  // With overlap, the previous round's average was requested when that
  // round was pushed and has had this round's compute to arrive.
  const bool merge = pending_pull_ == clock;
  if (merge) {
    GD_RETURN_IF_ERROR(env_.WaitPull(clock, global()));  // counted as communication there
    TookGlobal(clock);
    pending_pull_ = -1;
    u->resumed = env_.clock->Now();
  }
  if (fragments_ > 1) {
    // The previous clock's fragment is folded in; this clock's fragment
    // pushes its progress over its whole outer round (P clocks), which is
    // finite even when none of this clock's steps was usable.
    if (merge) rounds_->MergeNow(SpanOf(pending_chunks_));
    rounds_->Finish(SpanOf(FragmentOf(clock)), grad);
    *usable = true;
  } else if (*usable) {
    grad = rounds_->Finish(merge);
  } else if (merge) {
    rounds_->Restart();
  }
  return Status::Ok();
}

Status LocalSgdStep::AfterPush(int64_t clock, bool more) {
  if (!more) return Status::Ok();
  GD_RETURN_IF_ERROR(env_.ps->Pull(clock + 1, {.only = FragmentOf(clock)}));
  env_.pulled_through = clock + 1;
  if (env_.job.training.overlap_rounds) {
    pending_pull_ = clock + 1;
    pending_chunks_ = FragmentOf(clock);
  }
  return Status::Ok();
}

// Starts the next round from the pulled average of clock `clock + 1`'s
// chunks, unless it travels under that round (overlap_rounds).
Status LocalSgdStep::AwaitNext(int64_t clock) {
  if (pending_pull_ >= 0) return Status::Ok();
  GD_RETURN_IF_ERROR(env_.WaitPull(clock + 1, global()));
  TookGlobal(clock + 1);
  if (fragments_ > 1)
    rounds_->Restart(SpanOf(FragmentOf(clock)));
  else
    rounds_->Restart();
  return Status::Ok();
}

std::optional<cluster::ChunkRange> LocalSgdStep::FragmentOf(int64_t clock) const {
  return cluster::ClockFragment(env_.ps->shard_map().layout, fragments_, clock, env_.clocks);
}

// The values of `chunks` in the flat parameter vector (all of them if unset).
LocalRounds::Span LocalSgdStep::SpanOf(const std::optional<cluster::ChunkRange>& chunks) const {
  const int64_t n = model_->num_params();
  if (!chunks) return {0, n};
  const cluster::ChunkLayout& layout = env_.ps->shard_map().layout;
  const int64_t begin = static_cast<int64_t>(layout.Begin(chunks->begin));
  const int64_t end = static_cast<int64_t>(layout.Begin(chunks->end - 1) + layout.Size(chunks->end - 1));
  return {begin, end - begin};
}

void LocalSgdStep::TookGlobal(int64_t clock) {
  global_clock_ = clock;
  global_at_ = env_.clock->Now();
}

// The last snapshot is of the last round's start (the last model pulled):
// the shards' final model is the evaluator's test_accuracy. With fragments
// a snapshot mixes fragments of the last few clocks; it is named by the
// latest.
std::optional<SnapshotView> LocalSgdStep::Snapshot(int64_t, bool) const {
  if (!model_->has_network() || global_clock_ == snapshot_clock_) return std::nullopt;
  snapshot_clock_ = global_clock_;
  return SnapshotView{
      .values = global(), .count = model_->num_params(), .step = global_clock_ * local_steps_, .at = global_at_};
}

void LocalSgdStep::AddStats(stats::WorkerStats* s) const {
  AddMinibatchStats(*batches_, s);
  if (env_.job.training.overlap_steps > 0) {
    s->set_early_merges(env_.n.early_merges);
    s->set_merge_wait_seconds(env_.n.merge_wait_s);
  }
}

}  // namespace geodesic::worker
