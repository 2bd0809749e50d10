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
  Status ran = RunLogged("launch", args, run.run_dir + ".log", stop);
  if (ran.code() == Code::kCancelled) return ran;
  if (!ran.ok()) return Internal(ran.message() + " and " + run.run_dir + "/logs");
  return ReadJsonFile(run.run_dir + "/summary.json");
}

Status RunLogged(const std::string& name, const std::vector<std::string>& argv, const std::string& log_file,
                 const std::atomic<bool>* stop) {
  deploy::Child child(name, argv, log_file);
  GD_RETURN_IF_ERROR(child.Start());
  bool signalled = false;
  while (!child.Poll()) {
    if (stop->load() && !signalled) signalled = true, child.Signal(SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (signalled) return Cancelled("interrupted");
  if (!child.exit()->ok()) return Internal(name + " failed (" + child.exit()->Describe() + "); see " + log_file);
  return Status::Ok();
}

StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  GD_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return DataLoss(path + ": " + e.what());
  }
}

int64_t StepsOf(const nlohmann::json& summary) {
  int64_t steps = 0;
  for (const auto& [name, b] : summary.at("step_time_breakdown").items())
    steps = std::max(steps, b.at("steps").get<int64_t>());
  return steps;
}

nlohmann::json MeanComputeUtilization(const nlohmann::json& summary) {
  if (!summary.is_object() || !summary.contains("compute_utilization")) return nullptr;
  const nlohmann::json& u = summary["compute_utilization"];
  return u.is_object() ? u.value("mean", nlohmann::json()) : nlohmann::json();
}

}  // namespace geodesic::bench
