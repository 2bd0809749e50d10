// Helpers for integration tests: run the real `geodesic` binary as child
// processes, with bounded waits, in a private temporary directory.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cluster/member_client.h"
#include "tests/scratch_dir.h"

namespace geodesic::testing {

struct RunResult {
  int exit_code = -1;  // -1 if killed by a signal or timed out
  int signal = 0;
  bool timed_out = false;
  std::string output;  // stdout and stderr together
};

// Runs `geodesic args...` to completion, killing it after `timeout_s`.
RunResult RunGeodesic(const std::vector<std::string>& args, double timeout_s);

// A background `geodesic` process (or, with `program`, the program named by
// args[0]) in a process group of its own, killed (SIGKILL, the whole group)
// on destruction if still running, and (SIGKILL) when the test process dies
// without destroying it; start it from the test's main thread, whose end
// counts as the test's.
class Process {
 public:
  Process(const std::vector<std::string>& args, const std::string& log_file, bool program = false);
  ~Process();
  pid_t pid() const { return pid_; }
  // Waits up to timeout_s; returns the exit code, or -1 (signal or
  // timeout); again the same once reaped.
  int Wait(double timeout_s);
  void Signal(int sig);

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int exit_code_ = -1;
};

// A fresh /tmp/gd-test-* directory, removed at destruction.
using TempDir = ScratchDir;

// Options for this test process to join `job` as worker 0 of a synthetic
// model of `num_params` (heartbeats every 100 ms, a long lease, a 20 s rendezvous).
cluster::MemberOptions TestWorker(const std::string& job, const std::string& coordinator, uint64_t num_params);

void WriteText(const std::string& path, const std::string& text);
std::string ReadText(const std::string& path);
nlohmann::json ReadJson(const std::string& path);
// Polls until `path` exists (true) or timeout_s passes (false).
bool WaitForFile(const std::string& path, double timeout_s);

// Checks a launch summary's push_accounting (docs/reliability.md): every
// worker's pushes acknowledged to any of its processes were taken by the
// shards' serving processes (nothing acknowledged lost), and nothing beyond
// what it pushed. For a worker none of whose processes was killed (not in
// `killed_workers`), taken equals acknowledged exactly and nothing was in
// flight; a killed one may have had pushes taken that it never heard back
// about, at most what its ledger says was in flight.
void ExpectEveryPushAccountedFor(const nlohmann::json& summary, const std::set<int>& killed_workers);

}  // namespace geodesic::testing
