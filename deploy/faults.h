// Fault injection for tests and experiments, timed on the training clock:
// `--kill ROLE:ID@SECONDS[:SIGNAL]` signals a child, `--cut A:B@S+D`
// partitions two regions' emulated link for a while, and `geodesic wan
// cut|heal` request files (RUN_DIR/wan-control/) do it by hand. Records what
// it did for the summary (faults_injected, link_events). Not thread-safe;
// the launcher's thread owns it.
#pragma once

#include <signal.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "config/job.h"
#include "deploy/emulated_wan.h"
#include "deploy/netns.h"
#include "deploy/progress.h"
#include "deploy/supervisor.h"

namespace geodesic::deploy {

struct Kill {
  std::string target;  // e.g. "worker-2"
  double after_s = 0;
  int signal = SIGKILL;
  std::string signal_name = "SIGKILL";
  bool done = false;
};
StatusOr<std::vector<Kill>> ParseKills(const std::vector<std::string>& specs, const JobSpec& job);

// Elastic jobs: `--join worker:ID@SECONDS` starts a worker that joins late.
struct Join {
  int id = 0;
  double after_s = 0;
  bool done = false;
};
StatusOr<std::vector<Join>> ParseJoins(const std::vector<std::string>& specs, const JobSpec& job);

struct Cut {
  std::string a, b;
  double after_s = 0, for_s = 0;
  bool cut = false, healed = false;
};
StatusOr<std::vector<Cut>> ParseCuts(const std::vector<std::string>& specs, const JobSpec& job);

// Seconds since training started, on the launcher's wall clock (the
// coordinator's training time stops when the workers do); 0 before.
class TrainingClock {
 public:
  // Training began `training_seconds` ago (the coordinator's count).
  void Start(double training_seconds);
  bool started() const { return start_.has_value(); }
  double Seconds() const;

 private:
  std::optional<std::chrono::steady_clock::time_point> start_;
};

class FaultInjector {
 public:
  // `wan` or `netns` (or neither) carries the emulated links.
  FaultInjector(std::vector<Kill> kills, std::vector<Cut> cuts, std::string wan_control_dir, EmulatedWan* wan,
                NetnsWan* netns)
      : kills_(std::move(kills)),
        cuts_(std::move(cuts)),
        wan_control_dir_(std::move(wan_control_dir)),
        wan_(wan),
        netns_(netns) {}

  // Does whatever is due: kills and cuts once training runs, link requests always.
  void Tick(const TrainingClock& clock, const Supervisor& children, ProgressLine& progress);

  // When the first fault hit `target`, if one did (a STOP, not its CONT).
  std::optional<std::chrono::steady_clock::time_point> KilledAt(const std::string& target) const;
  // The same on the system clock (seconds since the epoch).
  std::optional<double> KilledUnix(const std::string& target) const;
  const nlohmann::json& faults() const { return faults_; }
  const nlohmann::json& link_events() const { return link_events_; }

 private:
  void InjectKills(double t, const Supervisor& children, ProgressLine& progress);
  void ApplyLink(const std::string& action, const std::string& a, const std::string& b, const char* why,
                 const TrainingClock& clock, ProgressLine& progress);
  void ApplyRequests(const TrainingClock& clock, ProgressLine& progress);

  std::vector<Kill> kills_;
  std::vector<Cut> cuts_;
  std::string wan_control_dir_;
  EmulatedWan* wan_;
  NetnsWan* netns_;
  std::map<std::string, std::chrono::steady_clock::time_point> killed_at_;
  std::map<std::string, double> killed_unix_;
  nlohmann::json faults_ = nlohmann::json::array();
  nlohmann::json link_events_ = nlohmann::json::array();
};

}  // namespace geodesic::deploy
