// `geodesic bench ps-overhead`: what the parameter server costs. Samples per
// second of the job run asynchronously through `geodesic launch` (4 workers,
// 2 shards by default) against plain LibTorch training of the same model with
// no parameter server, in `processes` independent single-thread processes on
// the same cores (the fastest way to use them without a PS), measured one
// after the other in one run. Also reports the time to the job's target
// accuracy for both (plain: one of its processes, on its own core).
#include <signal.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/bench.h"
#include "common/files.h"
#include "common/log.h"
#include "config/job.h"
#include "deploy/process.h"

namespace geodesic::bench {
namespace {

using json = nlohmann::json;

// Runs children to completion (or until `stop`); returns false if any failed.
bool RunAll(std::vector<std::unique_ptr<deploy::Child>>& children, const std::atomic<bool>* stop) {
  for (auto& c : children)
    if (!c->Start().ok()) return false;
  while (true) {
    bool running = false;
    for (auto& c : children) running |= !c->Poll();
    if (!running) break;
    if (stop->load())
      for (auto& c : children) c->Signal(SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& c : children)
    if (!c->exit()->ok()) {
      GD_LOG(ERROR) << c->name() << " " << c->exit()->Describe() << "; log:\n" << c->LogTail(15);
      return false;
    }
  return true;
}

// 1. Plain LibTorch, one single-thread process per core, side by side: the
// processes' results (bench plain-train's JSON).
StatusOr<json> RunPlain(const BenchOptions& options, const std::string& exe, const std::string& dir,
                        const std::atomic<bool>* stop) {
  std::vector<std::unique_ptr<deploy::Child>> plain;
  for (int i = 0; i < options.processes; ++i)
    plain.push_back(std::make_unique<deploy::Child>(
        "plain-" + std::to_string(i),
        std::vector<std::string>{exe, "bench", "plain-train", "--job", options.job_file, "--seconds",
                                 std::to_string(options.seconds), "--result-file",
                                 dir + "/plain-" + std::to_string(i) + ".json"},
        dir + "/plain-" + std::to_string(i) + ".log"));
  GD_LOG(INFO) << "plain LibTorch: " << options.processes << " processes for " << options.seconds << " s";
  if (!RunAll(plain, stop)) return Internal("plain training failed (logs in " + dir + ")");
  json plain_runs = json::array();
  for (int i = 0; i < options.processes; ++i) {
    GD_ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/plain-" + std::to_string(i) + ".json"));
    plain_runs.push_back(json::parse(text));
  }
  return plain_runs;
}

// 2. The same model through Geodesic, asynchronous within the bound: the
// launch's summary.
StatusOr<json> RunGeodesic(const BenchOptions& options, const std::string& exe, const std::string& dir,
                           const std::atomic<bool>* stop) {
  std::vector<std::string> args = {
      exe,          "launch",  options.job_file, "--run-dir",
      dir + "/run", "--quiet", "--set",          "training.staleness_bound=" + std::to_string(options.staleness_bound)};
  if (options.epochs > 0) {
    args.push_back("--set");
    args.push_back("training.epochs=" + std::to_string(options.epochs));
  }
  for (const std::string& o : options.overrides) {
    args.push_back("--set");
    args.push_back(o);
  }
  std::vector<std::unique_ptr<deploy::Child>> launch;
  launch.push_back(std::make_unique<deploy::Child>("launch", args, dir + "/launch.log"));
  GD_LOG(INFO) << "geodesic: the job with staleness bound " << options.staleness_bound;
  if (!RunAll(launch, stop)) return Internal("geodesic launch failed (logs in " + dir + ")");
  GD_ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/run/summary.json"));
  return json::parse(text);
}

}  // namespace

Status RunPsOverheadBench(const BenchOptions& options, const std::atomic<bool>* stop) {
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(options.job_file, options.overrides));  // as the launch will run it
  const std::string exe = options.binary.empty() ? deploy::SelfBinary() : options.binary;
  char tmpl[] = "/tmp/geodesic-overhead-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  ::setenv("OMP_NUM_THREADS", "1", 1);
  GD_ASSIGN_OR_RETURN(json plain_runs, RunPlain(options, exe, dir, stop));
  double plain_sps = 0;
  for (const json& r : plain_runs) plain_sps += r["samples_per_second"].get<double>();
  GD_ASSIGN_OR_RETURN(json s, RunGeodesic(options, exe, dir, stop));
  double ours = s["samples_per_second"].get<double>();
  json out = {{"model", job.model.name},
              {"workers", job.NumWorkers()},
              {"servers", job.NumServers()},
              {"staleness_bound", options.staleness_bound},
              {"overrides", options.overrides},
              {"geodesic_samples_per_second", ours},
              {"plain_samples_per_second", plain_sps},
              {"plain_processes", options.processes},
              {"ratio", ours / plain_sps},
              {"target_accuracy", job.eval.target_accuracy},
              {"geodesic_seconds_to_target", s["seconds_to_target"]},
              {"geodesic_test_accuracy", s["test_accuracy"]},
              {"geodesic_wall_seconds", s["wall_seconds"]},
              {"plain_seconds_to_target_one_process", plain_runs[0]["seconds_to_target"]},
              {"plain_final_accuracy_one_process", plain_runs[0]["final_accuracy"]},
              {"step_time_breakdown", s["step_time_breakdown"]},
              {"run_dir", dir}};
  if (options.json) {
    std::cout << out.dump(2) << std::endl;
  } else {
    std::printf("plain LibTorch (%d processes): %.0f samples/s\n", options.processes, plain_sps);
    std::printf("geodesic (bound %lld):          %.0f samples/s  ratio %.2f\n",
                static_cast<long long>(options.staleness_bound), ours, ours / plain_sps);
    std::printf("time to %.0f%%: geodesic %s s, plain (one process) %s s\n", 100 * job.eval.target_accuracy,
                s["seconds_to_target"].dump().c_str(), plain_runs[0]["seconds_to_target"].dump().c_str());
  }
  return Status::Ok();
}

}  // namespace geodesic::bench
