// Minibatches: where a worker's minibatch gradients come from, for the
// strategies that train on minibatches (SgdStep, LocalSgdStep; worker/step.h).
// PartitionBatches (worker/steps/partition_batches.h) trains on this worker's
// partition of an image set, ElasticUnits (worker/steps/elastic_units.h) on
// the data units the coordinator hands out, SyntheticGradients
// (worker/steps/synthetic_gradients.h) makes seeded gradients without data
// (communication benchmarks). Another loss or data set (a language model's)
// is another Minibatches.
//
// The strategy owns the model and passes it in; implementations count
// samples, loss, accuracy and clipping in the StepEnv's counters. Not
// synchronized: the loop's thread only. Torch-free header.
#pragma once

#include <cstdint>

#include "proto/stats.pb.h"

namespace at {
class Tensor;
}

namespace geodesic::worker {

class FlatModel;

class Minibatches {
 public:
  virtual ~Minibatches() = default;

  // Minibatch step `step`'s gradient of `model` into `grad` (the model's
  // flat gradient buffer, zeroed); false if the loss or the gradient is not
  // finite.
  virtual bool Gradient(FlatModel& model, int64_t step, at::Tensor& grad) = 0;
  // Steps [from, to) will not be computed: their batches are drawn and
  // dropped, so that a later start keeps an uninterrupted run's data order.
  virtual void Skip(int64_t from, int64_t to) {}
  // What the stats file says about the data (the partition).
  virtual void AddDataStats(stats::WorkerStats* s) const {}
};

}  // namespace geodesic::worker
