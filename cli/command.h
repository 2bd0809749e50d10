// The subcommands of the `geodesic` binary.
//
// Each Add* declares one subcommand on `app` with its flags bound to state
// the returned Command owns, and returns the function that runs it once the
// command line names it; main runs that one. Flags and the job file are
// parsed here, once, into the Options structs the libraries take; nothing
// below a subcommand's run function reads the environment. Main thread only.
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdint>
#include <functional>
#include <ostream>

#include "common/status.h"
#include "config/job.h"

namespace geodesic::cli {

struct Command {
  CLI::App* app = nullptr;   // parsed() tells whether the user named it
  std::function<int()> run;  // the process's exit code
};

// Set from signal handlers (InstallSignalHandlers), read by the running
// subcommand's loops.
extern std::atomic<bool> g_stop;                     // SIGINT, SIGTERM
extern std::atomic<uint64_t> g_checkpoint_requests;  // SIGUSR1 (`geodesic checkpoint RUN_DIR`)
extern std::atomic<uint64_t> g_replan_requests;      // SIGUSR2 (`geodesic wan replan RUN_DIR`)
void InstallSignalHandlers();

// Logs `s` and returns its exit code: 130 when cancelled (a signal),
// kExitJobFatal (common/status.h) when the job cannot succeed, else 1.
int Fail(const Status& s);
// Sets `job`'s `aggregator: auto` regions with the planner, on the job's
// model, and prints why to `out` (cli/jobs.cc).
Status ResolveAutoAggregators(JobSpec* job, std::ostream& out);

// Members and credentials (cli/roles.cc).
Command AddCoordinator(CLI::App& app);
Command AddServer(CLI::App& app);
Command AddWorker(CLI::App& app);
Command AddEvaluator(CLI::App& app);
Command AddAggregator(CLI::App& app);
Command AddClient(CLI::App& app);
Command AddToken(CLI::App& app);
// Whole jobs and their run directories (cli/jobs.cc).
Command AddLaunch(CLI::App& app);
Command AddWan(CLI::App& app);
Command AddPlan(CLI::App& app);
Command AddCheckpoint(CLI::App& app);
Command AddStatus(CLI::App& app);
Command AddMetrics(CLI::App& app);
// `geodesic deploy render|summarize ...` and `geodesic wan-router`, the
// compose deployment's link router (cli/deploy.cc).
Command AddDeploy(CLI::App& app);
Command AddWanRouter(CLI::App& app);
// `geodesic partition JOB.yaml` (cli/partition.cc).
Command AddPartition(CLI::App& app);
// `geodesic bench ...` (cli/bench_commands.cc).
Command AddBench(CLI::App& app);
// `geodesic sweep SWEEP.yaml` (cli/sweep.cc).
Command AddSweep(CLI::App& app);

}  // namespace geodesic::cli
