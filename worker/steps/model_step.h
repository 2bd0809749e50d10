// ModelStep: what every strategy (worker/step.h) shares: the model it
// trains (worker/model.h, its parameters one flat vector), what the shards
// hold of it, and its initial values; and, for the strategies that train on
// minibatches, their common stats. Not synchronized: the loop's thread only.
#pragma once

#include <memory>

#include "worker/minibatches.h"
#include "worker/model.h"
#include "worker/step.h"

namespace geodesic::worker {

class ModelStep : public StepStrategy {
 public:
  wire::ModelSignature signature() const override { return model_->signature(); }
  int64_t num_params() const override { return model_->num_params(); }
  // The model's values (under SCAFFOLD, with c = 0 after them).
  Status Init() override;

 protected:
  ModelStep(StepEnv& env, std::unique_ptr<FlatModel> model) : env_(env), model_(std::move(model)) {}

  // A fresh gradient buffer, kept alive by the returned owner while ZeroMQ
  // sends it: `grad`'s values, after the checks, as an Update.
  static void Hand(torch::Tensor grad, Update* u);
  // The stats of minibatch training (clipping), after `batches`' own.
  void AddMinibatchStats(const Minibatches& batches, stats::WorkerStats* s) const;

  StepEnv& env_;
  std::unique_ptr<FlatModel> model_;
};

}  // namespace geodesic::worker
