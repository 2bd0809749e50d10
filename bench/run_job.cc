#include "bench/run_job.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/files.h"
#include "deploy/process.h"

namespace geodesic::bench {

StatusOr<nlohmann::json> RunJob(const JobRun& run, const std::atomic<bool>* stop) {
  std::vector<std::string> args = {run.binary, "launch", run.job_file, "--run-dir", run.run_dir, "--quiet"};
  for (const auto& o : run.overrides) {
    args.push_back("--set");
    args.push_back(o);
  }
  args.insert(args.end(), run.extra_args.begin(), run.extra_args.end());
  deploy::Child launch("launch", args, run.run_dir + ".log");
  GD_RETURN_IF_ERROR(launch.Start());
  bool signalled = false;
  while (!launch.Poll()) {
    if (stop->load() && !signalled) signalled = true, launch.Signal(SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (signalled) return Cancelled("interrupted");
  auto text = ReadFile(run.run_dir + "/summary.json");
  if (!launch.exit()->ok() || !text.ok())
    return Internal("the run failed (" + launch.exit()->Describe() + "); see " + run.run_dir + ".log and " +
                    run.run_dir + "/logs");
  try {
    return nlohmann::json::parse(*text);
  } catch (const std::exception& e) {
    return Internal(run.run_dir + "/summary.json: " + e.what());
  }
}

int64_t StepsOf(const nlohmann::json& summary) {
  int64_t steps = 0;
  for (const auto& [name, b] : summary["step_time_breakdown"].items())
    steps = std::max(steps, b["steps"].get<int64_t>());
  return steps;
}

}  // namespace geodesic::bench
