// Worker::Data: the tensors and samplers behind a Worker (worker/worker.h),
// shared by its two source files (worker.cc, worker_elastic.cc). Internal to
// the worker library; it includes LibTorch.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "proto/stats.pb.h"
#include "worker/batcher.h"
#include "worker/dataset.h"
#include "worker/units.h"
#include "worker/worker.h"

namespace geodesic::worker {

struct Worker::Data {
  torch::Tensor images, labels;  // this worker's partition, renumbered 0..n-1
  std::string partition_digest;
  std::vector<int64_t> partition_labels;
  std::unique_ptr<BatchSampler> sampler;
  // Elastic jobs: the whole training set (converted a batch at a time) and
  // the units' permutations.
  ImageSet full;
  std::unique_ptr<UnitData> units;
  std::vector<torch::Tensor> synthetic_grads;
  // Federated: one record per round (the stats file's `rounds`), and the
  // byte counters when the open one began.
  std::vector<stats::RoundStats> round_log;
  double round_sent0 = 0, round_received0 = 0;
};

}  // namespace geodesic::worker
