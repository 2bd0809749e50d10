#include "worker/steps/model_step.h"

#include "worker/minibatches.h"
#include "worker/ps_client.h"

namespace geodesic::worker {

Status ModelStep::Init() {
  const int64_t n = model_->num_params(), values = env_.job.ShardValues(n);
  torch::Tensor init = values == n ? model_->params() : torch::cat({model_->params(), torch::zeros({values - n})});
  return env_.ps->Init(init.data_ptr<float>(), env_.stop);
}

void ModelStep::Hand(torch::Tensor grad, Update* u) {
  auto owner = std::make_shared<torch::Tensor>(std::move(grad));
  u->values = owner->data_ptr<float>();
  u->owner = std::shared_ptr<const void>(owner, owner->data_ptr());
}

void ModelStep::AddMinibatchStats(const Minibatches& batches, stats::WorkerStats* s) const {
  batches.AddDataStats(s);
  if (env_.job.optimizer.clip_norm > 0) s->set_clipped_steps(env_.n.clipped);
}

}  // namespace geodesic::worker
