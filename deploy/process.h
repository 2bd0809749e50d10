// Child processes for the local launcher: spawn with output to a log file,
// poll for exit, signal, and describe how a process ended. A child that runs
// this binary is forked from the spawner where one runs (deploy/spawner.h),
// else exec'ed. Each child gets
// its own process group (so a terminal's Ctrl-C reaches only the launcher,
// which then stops the children in order) and SIGTERM if the launcher dies.
// Not synchronized; the launcher's thread owns its children.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace geodesic::deploy {

struct ExitInfo {
  int code = -1;                 // exit status if it exited
  int signal = 0;                // signal number if a signal ended it
  double cpu_seconds = 0;        // user + system CPU time the process used
  double max_rss_mb = 0;         // its peak resident memory (MiB; getrusage's ru_maxrss)
  std::string Describe() const;  // "exited 0", "killed by SIGKILL"
  bool ok() const { return signal == 0 && code == 0; }
};

class Child {
 public:
  Child(std::string name, std::vector<std::string> argv, std::string log_file)
      : name_(std::move(name)), argv_(std::move(argv)), log_file_(std::move(log_file)) {}

  Status Start();
  // Non-blocking: true once the child has ended (then exit() is set).
  bool Poll();
  void Signal(int sig) const;
  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !exit_; }
  const std::optional<ExitInfo>& exit() const { return exit_; }
  const std::string& log_file() const { return log_file_; }
  // The last `lines` lines of the child's log, for error reports.
  std::string LogTail(int lines) const;

 private:
  std::string name_;
  std::vector<std::string> argv_;
  std::string log_file_;
  pid_t pid_ = -1;
  bool spawned_ = false;  // by the spawner: its exit comes from there
  std::optional<ExitInfo> exit_;
};

// The path of the running executable (children run the same binary).
std::string SelfBinary();

// How a child ended, from wait4's status and resource usage.
ExitInfo ExitFromWait(int status, const struct rusage& usage);

// In a freshly forked child, before it execs or runs: its own process
// group, SIGTERM when `parent` dies, stdout and stderr to `log_fd`, and no
// other descriptor inherited. Only async-signal-safe calls. False if
// `parent` died before the death signal was set.
bool EnterChild(pid_t parent, int log_fd);

}  // namespace geodesic::deploy
