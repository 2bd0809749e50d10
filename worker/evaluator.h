// The evaluator process's steps, as RunEvaluator (trainer.h) runs them:
// wait for training to end, pull the final model, evaluate it and worker
// 0's snapshots on the test set. Internal to worker/; Torch-free header.
// Not synchronized: the evaluator's one thread calls these in order.
#pragma once

#include <atomic>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "worker/trainer.h"

namespace geodesic::worker {

class FlatModel;
struct SplitExamples;

// Fills result["test_loss"] (and "test_accuracy" for classifiers,
// "test_perplexity" for token data), the curves over the snapshots in
// `snapshot_dir` and the seconds to the job's target (accuracy, or
// eval.target_loss), on `test` (the job's test split, read once when the
// evaluator starts).
Status EvaluateOnTestSet(const JobSpec& job, const SplitExamples& test, const std::string& snapshot_dir,
                         FlatModel& model, const Clock* clock, const std::atomic<bool>* stop, nlohmann::json* result);

}  // namespace geodesic::worker
