// The launcher's children: starts each one (under its region's command
// prefix, output to logs/NAME.log), knows who each is (a ProcessId: role and
// id), remembers how it was started so that it can be started again in its
// slot, reaps exits, and stops them all (signal, grace period, SIGKILL). What to do when a child ends is the caller's
// policy, not this class's. Not thread-safe; the launcher's thread owns it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "deploy/process.h"
#include "deploy/process_id.h"

namespace geodesic::deploy {

class Supervisor {
 public:
  // `command_prefix(region)`: what runs before a child's arguments (the
  // binary, behind `ip netns exec gd-REGION` with kernel-emulated links).
  using CommandPrefix = std::function<std::vector<std::string>(const std::string& region)>;
  Supervisor(std::string log_dir, CommandPrefix command_prefix)
      : log_dir_(std::move(log_dir)), command_prefix_(std::move(command_prefix)) {}

  // Starts process `who` with `args` (after the prefix), logging to NAME.log.
  Status Start(ProcessId who, std::vector<std::string> args, const std::string& region);
  // Starts the ended child `dead` again in its slot with `args`, logging to
  // LOG_NAME.log; `dead` is gone once this returns OK.
  StatusOr<Child*> Replace(Child* dead, const std::vector<std::string>& args, const std::string& log_name);
  // The arguments and region `who` was last started with by Start.
  const std::pair<std::vector<std::string>, std::string>& StartedAs(ProcessId who) const { return started_as_.at(who); }
  // Who child `c` (one of children()) is.
  ProcessId Who(const Child* c) const { return who_.at(c); }

  // The children that ended since the last call, in start order.
  std::vector<Child*> Reap();
  bool AllEnded() const;
  // Sends `sig` (and SIGCONT) to every child, SIGKILL to those still
  // running after `grace_s`, and waits for all of them.
  void StopAll(int sig, double grace_s);

  const std::vector<std::unique_ptr<Child>>& children() const { return children_; }
  Child* Find(const std::string& name) const;
  nlohmann::json Pids() const;

 private:
  StatusOr<std::unique_ptr<Child>> Make(ProcessId who, std::vector<std::string> args, const std::string& region,
                                        const std::string& log_name) const;

  std::string log_dir_;
  CommandPrefix command_prefix_;
  std::vector<std::unique_ptr<Child>> children_;
  std::unordered_map<const Child*, ProcessId> who_;
  std::map<ProcessId, std::pair<std::vector<std::string>, std::string>> started_as_;
};

}  // namespace geodesic::deploy
