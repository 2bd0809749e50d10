// SyntheticGradients: minibatch "gradients" without data for the synthetic
// model (model.name synthetic, communication benchmarks): four seeded
// random vectors of 1e-3 scale, taken in turn, each worker its own (seeded
// by job and worker), so that sums over workers depend on their order as
// real ones do. Always finite. Not synchronized: the loop's thread only.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "worker/minibatches.h"
#include "worker/step.h"

namespace geodesic::worker {

class SyntheticGradients final : public Minibatches {
 public:
  explicit SyntheticGradients(const StepEnv& env) : env_(env) {}

  bool Gradient(FlatModel& model, int64_t step, torch::Tensor& grad) override;

 private:
  const StepEnv& env_;
  std::vector<torch::Tensor> grads_;  // drawn at the first step
};

}  // namespace geodesic::worker
