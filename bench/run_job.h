// Runs one job through `geodesic launch` as a child process and returns its
// summary: the building block of the benchmarks that train (compression
// sweep, WAN experiment).
#pragma once

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace geodesic::bench {

struct JobRun {
  std::string binary;  // the geodesic binary
  std::string job_file;
  std::string run_dir;                  // the launch's run directory; its log is run_dir + ".log"
  std::vector<std::string> overrides;   // --set KEY=VALUE
  std::vector<std::string> extra_args;  // more launch flags
};

// Runs argv as a child process logged to `log_file` and waits for it
// (SIGTERM when `stop` is set: Cancelled). An error naming the log if it
// failed.
Status RunLogged(const std::string& name, const std::vector<std::string>& argv, const std::string& log_file,
                 const std::atomic<bool>* stop);

// A JSON file, parsed; an error naming it if it is missing or malformed.
StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);

// Launches, waits (SIGTERM to the launch when `stop` is set), and returns the
// parsed summary.json; an error naming the logs if the run failed.
StatusOr<nlohmann::json> RunJob(const JobRun& run, const std::atomic<bool>* stop);

// Steps per worker a summary reports (the most any worker ran).
int64_t StepsOf(const nlohmann::json& summary);
// The workers' mean compute utilization from a summary, or null.
nlohmann::json MeanComputeUtilization(const nlohmann::json& summary);

}  // namespace geodesic::bench
