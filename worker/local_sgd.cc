#include "worker/local_sgd.h"

namespace geodesic::worker {

LocalRounds::LocalRounds(const JobSpec& job, torch::Tensor& params, bool rounds)
    : params_(params),
      lr_(job.optimizer.lr),
      momentum_(job.optimizer.momentum),
      weight_decay_(job.optimizer.weight_decay) {
  if (!rounds) return;
  global_ = torch::zeros({job.ShardValues(params.numel())}, params.options());
  base_ = torch::zeros_like(params.detach());
  if (momentum_ > 0 && job.training.local_steps > 1) velocity_ = torch::zeros_like(base_);
}

void LocalRounds::Restart() {
  torch::NoGradGuard ng;
  torch::Tensor model = global_.narrow(0, 0, params_.numel());
  params_.copy_(model);
  base_.copy_(model);
}

void LocalRounds::Step(const torch::Tensor& grad, double lr_factor) {
  torch::NoGradGuard ng;
  torch::Tensor d = weight_decay_ > 0 ? grad + weight_decay_ * params_ : grad;
  if (velocity_.defined()) {
    velocity_.mul_(momentum_).add_(d);
    d = velocity_;
  }
  params_.sub_(d, lr_ * lr_factor);
}

torch::Tensor LocalRounds::Finish(bool merged) {
  torch::NoGradGuard ng;
  torch::Tensor push = base_ - params_;
  if (merged) params_.copy_(global_ - push);
  base_.copy_(params_);
  return push;
}

}  // namespace geodesic::worker
