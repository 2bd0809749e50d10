#include "worker/local_sgd.h"

namespace geodesic::worker {
namespace {

std::unique_ptr<torch::optim::Optimizer> MakeInner(const OptimizerSpec& o, const torch::Tensor& param) {
  std::vector<torch::Tensor> params = {param};
  switch (o.name) {
    case OptimizerKind::kAdam:
      return std::make_unique<torch::optim::Adam>(
          params, torch::optim::AdamOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
    case OptimizerKind::kAdamW:
      return std::make_unique<torch::optim::AdamW>(
          params, torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
    case OptimizerKind::kSgd:
      break;
  }
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).nesterov(o.nesterov).weight_decay(o.weight_decay));
}

}  // namespace

LocalRounds::LocalRounds(const JobSpec& job, torch::Tensor& params, bool rounds)
    : params_(params), lr_(job.optimizer.lr) {
  if (!rounds) return;
  global_ = torch::zeros({job.ShardValues(params.numel())}, params.options());
  base_ = torch::zeros_like(params.detach());
  alias_ = params_.detach();
  inner_ = MakeInner(job.optimizer, alias_);
}

void LocalRounds::Restart() { Restart({0, params_.numel()}); }

void LocalRounds::AdoptOwn() {
  torch::NoGradGuard ng;
  global_.narrow(0, 0, params_.numel()).copy_(params_);
}

void LocalRounds::Step(const torch::Tensor& grad, double lr_factor) {
  torch::NoGradGuard ng;
  for (auto& group : inner_->param_groups()) group.options().set_lr(lr_ * lr_factor);
  alias_.mutable_grad() = grad;
  inner_->step();
  alias_.mutable_grad() = torch::Tensor();
}

torch::Tensor LocalRounds::Finish(bool merged) {
  torch::NoGradGuard ng;
  torch::Tensor push = base_ - params_;
  if (merged) params_.copy_(global_ - push);
  base_.copy_(params_);
  return push;
}

void LocalRounds::MergeNow() { MergeNow({0, params_.numel()}); }

void LocalRounds::Restart(Span span) {
  torch::NoGradGuard ng;
  torch::Tensor model = global_.narrow(0, span.begin, span.size);
  params_.narrow(0, span.begin, span.size).copy_(model);
  base_.narrow(0, span.begin, span.size).copy_(model);
}

void LocalRounds::Finish(Span span, torch::Tensor& push) {
  torch::NoGradGuard ng;
  torch::Tensor model = params_.narrow(0, span.begin, span.size);
  torch::Tensor base = base_.narrow(0, span.begin, span.size);
  torch::Tensor out = push.narrow(0, span.begin, span.size);
  torch::sub_out(out, base, model);
  base.copy_(model);
}

void LocalRounds::MergeNow(Span span) {
  torch::NoGradGuard ng;
  torch::Tensor global = global_.narrow(0, span.begin, span.size);
  torch::Tensor model = params_.narrow(0, span.begin, span.size);
  torch::Tensor base = base_.narrow(0, span.begin, span.size);
  torch::Tensor progress = base - model;
  model.copy_(global - progress);
  base.copy_(global);
}

}  // namespace geodesic::worker
