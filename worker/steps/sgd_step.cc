#include "worker/steps/sgd_step.h"

#include <algorithm>

#include "common/log.h"
#include "worker/gate.h"
#include "worker/ps_client.h"

namespace geodesic::worker {

SgdStep::SgdStep(StepEnv& env, std::unique_ptr<FlatModel> model, std::shared_ptr<Minibatches> batches)
    : ModelStep(env, std::move(model)),
      batches_(std::move(batches)),
      depth_(env.job.training.pipeline_depth),
      prefetch_(env.job.training.prefetch) {}

void SgdStep::SkipClocks(int64_t from, int64_t to) { batches_->Skip(from, std::min(env_.total_steps, to)); }

Status SgdStep::Start(int64_t clock) {
  // A worker that starts later than clock 0 (a resumed job, a rejoin) takes
  // up its data order where step c would have it, as an uninterrupted run.
  SkipClocks(0, clock);
  GD_RETURN_IF_ERROR(env_.PullStart(clock, params()).status());  // at clock 0 the model may be ours already
  env_.pulled_through = clock;
  env_.pushed_through = clock - 1;
  if (depth_ > 1) GD_RETURN_IF_ERROR(PullThrough(clock + depth_ - 1));
  return Status::Ok();
}

StatusOr<double> SgdStep::Jump(int64_t from, int64_t to) {
  SkipClocks(from, to);
  GD_ASSIGN_OR_RETURN(double waited, env_.PullFull(to, params()));
  for (int k = 1; k < depth_ && to + k < env_.clocks; ++k) GD_RETURN_IF_ERROR(env_.ps->Pull(to + k));
  env_.pulled_through = std::min<int64_t>(to + depth_ - 1, env_.clocks - 1);
  return waited;
}

// Pulls requested before the compute, to overlap it.
Status SgdStep::BeforeCompute(int64_t clock, bool more) {
  // Prefetch: the request (and across a WAN the reply) overlaps the compute.
  if (depth_ == 1 && more && prefetch_) {
    GD_RETURN_IF_ERROR(env_.ps->Pull(clock + 1, {.after_own_push = true}));
    env_.pulled_through = clock + 1;
    env_.NoteFloor();
  }
  if (depth_ > 1) GD_RETURN_IF_ERROR(PullThrough(clock + depth_));
  return Status::Ok();
}

Status SgdStep::PullThrough(int64_t through) {
  GD_ASSIGN_OR_RETURN(int64_t m, env_.gate->Barrier());
  for (int64_t k = env_.pulled_through + 1; k <= std::min({through, m, env_.clocks - 1}); ++k) {
    GD_RETURN_IF_ERROR(env_.ps->Pull(k));
    env_.pulled_through = k;
  }
  env_.NoteFloor();
  return Status::Ok();
}

StatusOr<Update> SgdStep::Compute(int64_t clock) {
  torch::Tensor grad = model_->NewGradBuffer();
  ++env_.n.batches;
  const bool usable = batches_->Gradient(*model_, clock, grad);
  Update u;
  u.computed = u.resumed = env_.clock->Now();
  if (!usable) {
    ++env_.n.skipped;
    GD_LOG(ERROR) << "step " << clock << ": loss or gradient is not finite; skipping this step's push";
    return u;
  }
  GD_RETURN_IF_ERROR(CheckPushable(grad.data_ptr<float>(), grad.numel(), clock));
  Hand(std::move(grad), &u);
  return u;
}

Status SgdStep::AfterPush(int64_t clock, bool more) {
  if (!more || prefetch_) return Status::Ok();
  GD_RETURN_IF_ERROR(env_.ps->Pull(clock + 1));
  env_.pulled_through = clock + 1;
  return Status::Ok();
}

// At most two clocks (or the pipeline's depth + 1) of pushes unacknowledged,
// bounding memory.
size_t SgdStep::unacked_clocks() const { return static_cast<size_t>(std::max(2, depth_ + 1)); }

std::optional<SnapshotView> SgdStep::Snapshot(int64_t clock, bool) const {
  if (!model_->has_network()) return std::nullopt;
  return SnapshotView{.values = params(), .count = model_->num_params(), .step = clock};
}

}  // namespace geodesic::worker
