// Restarted and failed-over processes, for the summary's `recoveries`: how
// each one ended, and how long until the live view showed it working again
// (a step, an applied update, an answer). Also counts restarts per process,
// which the launcher caps. Not thread-safe; the launcher's thread owns it.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "config/job.h"
#include "deploy/progress.h"
#include "proto/geodesic.pb.h"

namespace geodesic::deploy {

class Recoveries {
 public:
  static constexpr int kMaxRestarts = 3;

  bool MayRestart(const std::string& name) const;
  // Counts one more restart of `name`; returns its number (1, 2, ...).
  int CountRestart(const std::string& name) { return ++restarts_[name]; }
  // `name` ended (`exit`) at training second `t` and was started again as
  // restart `k`, logging to `log`.
  void Restarted(const std::string& name, const std::string& exit, double t, int k, const std::string& log);
  // Adds key: value to the newest record of `name`, if it has one.
  void Note(const std::string& name, const std::string& key, const std::string& value);
  // Shard primary `name` ended and its backup takes over; timed from `since`.
  void FailedOver(const std::string& name, const std::string& exit, double t,
                  std::chrono::steady_clock::time_point since);

  // Marks the processes the reply shows working again, and says so.
  void Observe(const wire::StatusReply& st, const JobSpec& job, ProgressLine& progress);

  const nlohmann::json& records() const { return records_; }

 private:
  struct Pending {
    size_t index = 0;  // into records_
    std::chrono::steady_clock::time_point restarted{};
    int64_t baseline = -1;  // the counter when first seen live again
  };
  struct Probe;
  Probe Counter(const std::string& name, Pending& p, const wire::StatusReply& st, const JobSpec& job) const;

  std::map<std::string, int> restarts_;
  nlohmann::json records_ = nlohmann::json::array();
  std::map<std::string, Pending> pending_;
};

}  // namespace geodesic::deploy
