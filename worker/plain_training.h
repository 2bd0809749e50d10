// Plain LibTorch training in one process, no parameter server: the baseline
// that the parameter server's overhead is measured against (`geodesic bench
// plain-train`, bench/plain_train.cc). The same model, data, batch size,
// sampler and SGD with momentum as the job's workers; one intra-op thread.
// A header without LibTorch, so that the benchmark code compiles without it.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/status.h"
#include "config/job.h"

namespace geodesic::worker {

struct PlainRun {
  int64_t samples = 0, steps = 0;
  double seconds = 0;
  // (seconds, test accuracy) of the snapshots taken every
  // eval.snapshot_every_s and at the end; scored after the timed loop.
  std::vector<std::pair<double, double>> curve;
};

// Trains the job's model on the whole training set for `max_seconds` (or
// until `stop`), then scores its snapshots on the test set. A model without
// a network (synthetic) is InvalidArgument.
StatusOr<PlainRun> TrainPlain(const JobSpec& job, double max_seconds, const std::atomic<bool>* stop);

}  // namespace geodesic::worker
