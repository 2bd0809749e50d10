// The local launcher behind `geodesic launch JOB.yaml`: starts a whole job
// on this machine (coordinator, every server and worker, the evaluator) as
// child processes of this binary, shows live progress, injects faults on
// request, stops everything cleanly on Ctrl-C or on a failure, and writes
// the job summary JSON (docs/launcher.md lists its keys).
//
// Policy: a worker that dies is reported and the job goes on without it
// (the coordinator drops it from the staleness bound); a coordinator,
// server or evaluator that fails ends the job. The verdict follows what
// happened (deploy/verdict.h): a worker lost for good (an error, or a
// signal nobody injected, and no restart), no worker trained to the end,
// or a result not written makes the job failed. Single-threaded.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/job.h"

namespace geodesic::deploy {

struct LaunchOptions {
  std::string job_file;
  std::vector<std::string> overrides;  // "key.path=value", as --set
  std::string summary_file;            // also written to <run_dir>/summary.json
  std::string run_dir;                 // default: runs/<job>-<yyyymmdd-hhmmss>
  // Fault injection, "ROLE:ID@SECONDS[:SIGNAL]": send SIGNAL (default KILL;
  // also TERM, INT, STOP, CONT) after that much training.
  std::vector<std::string> kills;
  // Partitions on emulated links, "A:B@SECONDS+DURATION": cut regions A and
  // B apart after that much training, heal DURATION seconds later.
  std::vector<std::string> cuts;
  // Elastic jobs: start worker ID (one of the ids kept for workers that join
  // later) after SECONDS of training, "worker:ID@SECONDS".
  std::vector<std::string> joins;
  // Continue the stopped job in this run directory from its checkpoints
  // (its job.yaml unless job_file is given); see docs/reliability.md.
  std::string resume_dir;
  // Churn: a worker that dies (killed by a signal) is started again, up to
  // 3 times; it rejoins at the live workers' clock with the current model.
  // Off: the job continues without it.
  bool restart_workers = false;
  bool quiet = false;  // no live progress
  std::string binary;  // the geodesic binary to run (default: this one)
  // The live dashboard (deploy/dashboard.h) and the launcher's /metrics:
  // host:port (port 0: a free one); empty: none. Secured jobs serve it
  // only with a token (dashboard_token_file, its first line).
  std::string dashboard = "127.0.0.1:0";
  bool metrics = true;  // every process serves /metrics (off: none does)
  // At exit, every process (and the launcher's dashboard) keeps serving
  // until its final metrics were scraped once, at most this long (s).
  double metrics_linger_s = 0;
  std::string dashboard_token_file;
  // Sets the regions' `aggregator: auto` (the caller builds the model the
  // planner needs; wan/aggregator_choice.h). Unset: such a job is refused.
  std::function<Status(JobSpec*)> resolve_auto_aggregators;
};

// What Launch checks before it starts anything: the job's codec names and,
// for Fashion-MNIST, that its files are there.
Status CheckLaunchable(const JobSpec& job, const std::string& job_file);

// Runs the job to its end. Returns the launcher's exit code: 0 when the job
// finished and was evaluated, 1 on failure, 130 when interrupted; a Status
// only when the job could not start (bad job file, missing dataset).
StatusOr<int> Launch(const LaunchOptions& options, const std::atomic<bool>* stop);

}  // namespace geodesic::deploy
