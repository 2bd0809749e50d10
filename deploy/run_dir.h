// The run directory of one launch: its layout (logs/, stats/, snapshots/,
// checkpoints/, tokens/, wan-control/ and the coordinator's files), making
// it ready for a new or resumed run, and the pids.json that `geodesic
// checkpoint|replan` read. The launcher owns it while the job runs; other
// commands only read it. Thread-safe (no shared state).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "config/job.h"
#include "server/checkpoint.h"

namespace geodesic::deploy {

struct RunDir {
  std::string path;

  std::string File(const std::string& name) const { return path + "/" + name; }
  std::string job_yaml() const { return File("job.yaml"); }
  std::string logs() const { return File("logs"); }
  // logs/NAME.log: the output of the process (or script run) called NAME.
  std::string log(const std::string& name) const { return logs() + "/" + name + ".log"; }
  std::string stats_dir() const { return File("stats"); }
  // stats/NAME.json, written by the process called NAME ("worker-2").
  std::string stats(const std::string& name) const { return stats_dir() + "/" + name + ".json"; }
  std::string snapshots() const { return File("snapshots"); }
  // http/NAME: the host:port where the process called NAME serves /metrics.
  std::string http_dir() const { return File("http"); }
  std::string http(const std::string& name) const { return http_dir() + "/" + name; }
  std::string checkpoints() const { return File("checkpoints"); }
  std::string resume_json() const { return File("resume.json"); }
  std::string endpoint_file() const { return File("coordinator.endpoint"); }
  std::string coordinator_key() const { return File("coordinator.key"); }
  std::string coordinator_keypair() const { return File("coordinator.keypair"); }
  std::string coordinator_state() const { return File("coordinator.state"); }
  std::string result_json() const { return File("result.json"); }
  std::string final_params() const { return File("final_params.bin"); }
  std::string wan_control() const { return File("wan-control"); }
  std::string tokens() const { return File("tokens"); }
  // tokens/NAME.token: the member called NAME's token (secured jobs).
  std::string token(const std::string& name) const { return tokens() + "/" + name + ".token"; }
  std::string netns_conf() const { return File("netns.conf"); }
  std::string summary_json() const { return File("summary.json"); }
  std::string rounds_csv() const { return File("rounds.csv"); }

  // Records the children's pids by name (pids.json).
  Status WritePids(const nlohmann::json& pids) const;
};

// Picks the run directory (`resume_dir`, else `requested`, else
// runs/<job>-<yyyymmdd-hhmmss>) and readies it: plans the resume from its
// checkpoints when resuming (into `resume`, also written to resume.json),
// refuses a plain launch over another run's checkpoints, and clears what an
// earlier launch left that this one must not read (endpoint, state, result,
// snapshots, push ledgers, link requests).
StatusOr<RunDir> PrepareRunDir(const JobSpec& job, const std::string& resume_dir, const std::string& requested,
                               std::optional<server::ResumePlan>* resume);

// The pids a running launcher recorded in `run_dir`, by process name.
StatusOr<nlohmann::json> ReadPids(const std::string& run_dir);

}  // namespace geodesic::deploy
