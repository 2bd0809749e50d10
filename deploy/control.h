// What other commands ask of a job that a launcher runs on this machine,
// through its run directory (deploy/run_dir.h): `geodesic wan cut|heal`
// (a request file the launcher applies), `geodesic checkpoint` and
// `geodesic wan replan` (signals to the recorded pids), `geodesic status`
// (the coordinator's status over its socket). Thread-safe (no shared state).
#pragma once

#include <string>

#include "common/status.h"

namespace geodesic::deploy {

// Cuts (or heals) the emulated link between two regions of the job running
// in `run_dir`; its launcher applies it within a tenth of a second.
Status ControlLink(const std::string& run_dir, const std::string& action, const std::string& a, const std::string& b);

// Asks every server of the job running in `run_dir` (on this machine) to
// write a checkpoint now (SIGUSR1); returns how many were asked.
StatusOr<int> RequestCheckpoint(const std::string& run_dir);

// Asks the coordinator of the job running in `run_dir` (on this machine) to
// re-plan its shard placement now (SIGUSR2). FailedPrecondition if the job
// does not re-plan (wan.replan: false).
Status RequestReplan(const std::string& run_dir);

// Asks the coordinator recorded in `run_dir` for the job's status, as JSON.
StatusOr<std::string> QueryStatus(const std::string& run_dir, int timeout_ms);

}  // namespace geodesic::deploy
