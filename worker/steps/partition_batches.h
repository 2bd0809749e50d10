// PartitionBatches: minibatch gradients of the model's objective (cross
// entropy over classes, or the module's own loss: worker/objective.h) on
// this worker's partition of the training set (data.partition,
// docs/partitions.md): images or token windows alike (worker/examples.h).
// The partition is converted to tensors once and visited by a seeded
// BatchSampler (worker/batcher.h), so a worker's batches depend on
// (seed, worker) alone. BatchGradient is the step itself, shared with
// ElasticUnits (worker/steps/elastic_units.h).
// Not synchronized: the loop's thread only.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/batcher.h"
#include "worker/examples.h"
#include "worker/minibatches.h"
#include "worker/step.h"

namespace geodesic::worker {

// One minibatch of step `step`: augments image inputs (data.augment), runs
// the objective forward and backward into `grad` (the model's flat
// gradient buffer) and clips it (optimizer.clip_norm); counts the samples,
// and the loss and accuracy when usable. False if the loss or the gradient
// is not finite.
bool BatchGradient(StepEnv& env, FlatModel& model, Examples batch, int64_t step, torch::Tensor& grad);

// This worker's part of the job's training split, and what the stats
// report about it.
struct TrainingPart {
  Examples examples;  // renumbered 0..n-1
  SampleShape shape;  // of the whole split
  int64_t split_samples = 0;
  std::string digest;           // of the whole partition
  std::vector<int64_t> labels;  // samples per label (images)
};
// Loads the split and draws part `id` (data.partition); InvalidArgument
// naming data.partition when the split cannot give every worker a full
// batch, and naming data.train_samples when epochs cannot be counted.
StatusOr<TrainingPart> LoadTrainingPart(const JobSpec& job, int id);

class PartitionBatches final : public Minibatches {
 public:
  static std::unique_ptr<PartitionBatches> Create(StepEnv& env, TrainingPart part);

  bool Gradient(FlatModel& model, int64_t step, torch::Tensor& grad) override;
  void Skip(int64_t from, int64_t to) override;
  void AddDataStats(stats::WorkerStats* s) const override;

 private:
  explicit PartitionBatches(StepEnv& env) : env_(env) {}

  StepEnv& env_;
  TrainingPart part_;
  std::unique_ptr<BatchSampler> sampler_;
};

}  // namespace geodesic::worker
