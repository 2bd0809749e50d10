// The spawner: children of the launcher forked from a copy of the binary
// that has already loaded its libraries, instead of exec'ed afresh.
//
// Why. Starting `geodesic` costs about 0.6-0.7 s of CPU before main: the
// dynamic loader resolves LibTorch's 290 libraries and LibTorch registers
// its operators (docs/threading.md, "Starting processes"). A launcher starts
// one process per role and restarts the ones that die, and the tests start
// thousands. A fork of a process that has done that work costs a few
// milliseconds.
//
// How. StartSpawner, called first thing in main by a subcommand that starts
// children (launch, bench, sweep), forks the spawner: a single-threaded copy
// of the process as it stands after static initialization. The launcher
// sends it a child's argv, environment, working directory and log file over
// a socket pair; the spawner forks, and the fork sets up its process group,
// death signal, output and environment as Child::Start does before exec,
// then runs `run(argc, argv)` as a freshly exec'ed binary would run main.
// The spawner reaps its children and reports each exit (status, CPU time,
// peak memory) back over the socket.
//
// Lifetimes. The spawner dies with the launcher (death signal SIGKILL; an
// orderly exit closes the socket and it exits); its children get SIGTERM
// when it dies, as exec'ed children get it when the launcher dies. It sits
// in a process group of its own, so a terminal's Ctrl-C does not reach it.
//
// GEODESIC_SPAWN=exec turns it off: every child is exec'ed, as before; so
// do builds under AddressSanitizer, whose children keep the normal exit.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace geodesic::deploy {

struct ExitInfo;

// main(argc, argv) of the binary, run by each spawned child.
using SpawnMain = int (*)(int argc, char** argv);

// Forks the spawner if `argv[1]` names a subcommand that starts children
// and GEODESIC_SPAWN is not "exec". Call before any thread is started.
void StartSpawner(int argc, char** argv, SpawnMain run);

// The same for any argv (the tests'): `argv` must be the process's own, as
// the kernel laid it out, for children to show their command lines.
void ForkSpawner(int argc, char** argv, SpawnMain run);

// True when a spawner serves this process.
bool SpawnerRunning();

// Starts `argv` (argv[0] is this binary) through the spawner, with stdout
// and stderr on `log_fd` (the caller keeps its copy). Unavailable if the
// spawner is gone; the caller then execs.
StatusOr<pid_t> SpawnChild(const std::vector<std::string>& argv, int log_fd);

// The exit of a spawned child, once the spawner has reported it.
std::optional<ExitInfo> SpawnedExit(pid_t pid);

}  // namespace geodesic::deploy
