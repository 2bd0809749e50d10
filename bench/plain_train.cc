// Plain LibTorch training, no parameter server: the baseline the PS overhead
// is measured against (`geodesic bench plain-train`, and the processes that
// `geodesic bench ps-overhead` runs side by side). The training itself is
// worker::TrainPlain (worker/plain_training.h).
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "common/files.h"
#include "config/job.h"
#include "worker/plain_training.h"

namespace geodesic::bench {

Status RunPlainTraining(const BenchOptions& options, const std::atomic<bool>* stop) {
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(options.job_file));
  GD_ASSIGN_OR_RETURN(worker::PlainRun r, worker::TrainPlain(job, options.seconds, stop));
  nlohmann::json curve = nlohmann::json::array();
  nlohmann::json to_target = nullptr;
  for (const auto& [t, acc] : r.curve) {
    curve.push_back({t, acc});
    if (to_target.is_null() && acc >= job.eval.target_accuracy) to_target = t;
  }
  nlohmann::json out = {{"samples", r.samples},          {"steps", r.steps},
                        {"seconds", r.seconds},          {"samples_per_second", r.samples / r.seconds},
                        {"accuracy_curve", curve},       {"final_accuracy", curve.back()[1]},
                        {"seconds_to_target", to_target}};
  if (!options.result_file.empty()) GD_RETURN_IF_ERROR(WriteFileAtomic(options.result_file, out.dump(2)));
  std::cout << out.dump(2) << std::endl;
  return Status::Ok();
}

}  // namespace geodesic::bench
