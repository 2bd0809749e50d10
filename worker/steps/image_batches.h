// PartitionBatches: minibatch gradients of an image classifier (cross
// entropy) on this worker's partition of the training set (data.partition,
// docs/partitions.md). The partition is converted to tensors once and
// visited by a seeded BatchSampler (worker/batcher.h), so a worker's batches
// depend on (seed, worker) alone. ImageGradient is the step itself, shared
// with ElasticUnits (worker/steps/elastic_units.h).
// Not synchronized: the loop's thread only.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/batcher.h"
#include "worker/dataset.h"
#include "worker/minibatches.h"
#include "worker/step.h"

namespace geodesic::worker {

// One minibatch (`x` images, `y` labels) of step `step`: augments `x`
// (data.augment), runs forward and backward into `grad` (the model's flat
// gradient buffer) and clips it (optimizer.clip_norm); counts the samples,
// and the loss and accuracy when usable. False if the loss or the gradient
// is not finite.
bool ImageGradient(StepEnv& env, FlatModel& model, torch::Tensor x, const torch::Tensor& y, int64_t step,
                   torch::Tensor& grad);

class PartitionBatches final : public Minibatches {
 public:
  // This worker's part of `train`; InvalidArgument naming data.partition
  // when the split cannot give every worker a full batch.
  static StatusOr<std::unique_ptr<PartitionBatches>> Create(StepEnv& env, const ImageSet& train);

  bool Gradient(FlatModel& model, int64_t step, torch::Tensor& grad) override;
  void Skip(int64_t from, int64_t to) override;
  void AddDataStats(stats::WorkerStats* s) const override;

 private:
  explicit PartitionBatches(StepEnv& env) : env_(env) {}

  StepEnv& env_;
  torch::Tensor images_, labels_;  // this worker's partition, renumbered 0..n-1
  std::string digest_;             // of the whole split
  std::vector<int64_t> labels_per_class_;
  std::unique_ptr<BatchSampler> sampler_;
};

}  // namespace geodesic::worker
