// The job summary (RUN_DIR/summary.json; docs/launcher.md lists its keys):
// built once every child has ended, from what the launcher saw and from the
// files the processes left in the run directory (stats/*.json, push
// ledgers, result.json). Thread-safe (no shared state).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "config/job.h"
#include "deploy/emulated_wan.h"
#include "deploy/faults.h"
#include "deploy/netns.h"
#include "deploy/progress.h"
#include "deploy/run_dir.h"
#include "deploy/supervisor.h"
#include "deploy/verdict.h"

namespace geodesic::deploy {

// What the launcher knows at the end of a run.
struct RunRecord {
  const JobSpec& job;
  const RunDir& dir;
  Outcome outcome = Outcome::kFinished;
  std::string failure;                 // why, when failed
  std::vector<Loss> losses;            // processes that failed for good
  std::vector<std::string> unwritten;  // "FILE: why", results not written
  TrainingSpan span;                   // the clock wall_seconds and the curve share
  double total_wall_seconds = 0;
  const Supervisor& children;
  const FaultInjector& faults;
  nlohmann::json recoveries;
  nlohmann::json link_probes;  // before training, per emulated link
  EmulatedWan* wan = nullptr;
  NetnsWan* netns = nullptr;
  // Bytes per link direction counted outside the launcher (a compose
  // deployment's link router), as LinkTraffic writes them.
  const nlohmann::json* link_traffic = nullptr;
};

nlohmann::json BuildSummary(const RunRecord& run);

// Writes `summary` to the run directory (and `summary_file`, if given),
// says how the job ended, and returns the launcher's exit code.
StatusOr<int> FinishRun(const nlohmann::json& summary, const RunRecord& run, const std::string& summary_file,
                        ProgressLine& progress);

// The summary of a run that no launcher ran (a rendered deployment whose
// processes shared `run_dir`, like a compose file's volume `run`): built
// from the files alone (stats/, push ledgers, result.json, and links.json,
// the link router's bytes per link), written and told as FinishRun does.
// NotFound when `run_dir` has no stats/.
StatusOr<int> SummarizeRunDir(const JobSpec& job, const std::string& run_dir, const std::string& summary_file,
                              ProgressLine& progress);

// Acknowledged vs. taken, per worker (docs/reliability.md): every worker
// process's push ledger in `stats_dir` against `taken`, the chunks of each
// worker's pushes that the shards' serving processes took.
nlohmann::json PushAccounting(const std::string& stats_dir, const std::map<int, uint64_t>& taken);

}  // namespace geodesic::deploy
