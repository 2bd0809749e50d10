// geodesic: one binary, one subcommand per role or tool (cli/command.h).
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "deploy/spawner.h"
#include "transport/connection_guard.h"
#include "transport/message.h"
#include "transport/protobuf_log.h"

namespace {

// A subcommand has joined its threads and closed its sockets (ZeroMQ
// contexts flush on close, inside run) by the time it returns. What static
// destruction would still do is LibTorch's: deregistering every operator,
// about 0.2-0.3 s of CPU per process, paid by every server, worker and tool the
// launcher and the tests start (docs/threading.md). Under AddressSanitizer
// the normal exit stays, for its leak check.
int ExitNow(int code) {
#if defined(__SANITIZE_ADDRESS__)
  return code;
#else
  std::fflush(nullptr);
  std::cout.flush();
  std::cerr.flush();
  std::_Exit(code);
#endif
}

// main, as the spawner's children run it too (deploy/spawner.h).
int RunCli(int argc, char** argv) {
  using namespace geodesic::cli;
  CLI::App app{"geodesic: training across cloud regions and edge devices with sharded parameter servers", "geodesic"};
  app.require_subcommand(1);
  app.set_version_flag("--version",
                       "geodesic 0.1 (wire protocol " + std::to_string(geodesic::transport::kProtocolVersion) + ")");
  // Declaration order is the order --help lists them in.
  const std::vector<Command> commands = {
      AddCoordinator(app), AddServer(app), AddWorker(app),    AddEvaluator(app), AddAggregator(app), AddClient(app),
      AddToken(app),       AddLaunch(app), AddWan(app),       AddPlan(app),      AddCheckpoint(app), AddStatus(app),
      AddMetrics(app),     AddDeploy(app), AddWanRouter(app), AddPartition(app), AddBench(app),      AddSweep(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ExitNow(app.exit(e));  // --help, --version or a bad command line
  }
  geodesic::transport::RouteProtobufLogs();
  InstallSignalHandlers();
  for (const Command& c : commands)
    if (c.app->parsed()) return ExitNow(c.run());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // ZeroMQ allocates a buffer per received message. With glibc's default,
  // every multi-MiB message is a fresh mmap (page faults, zeroing) and an
  // munmap when freed; keeping such buffers on the heap makes receives of
  // 1-32 MiB chunks reuse memory instead (measured: docs/benchmarks.md).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  // Serving processes hold a descriptor per connection, and the soft limit
  // is often 1,024 under a far higher hard one. Raised before any child
  // starts (they inherit it); where it cannot be, the connection guard
  // keeps connections below the limit in force (transport/connection_guard.h).
  (void)geodesic::transport::RaiseFileLimit();
  // Before any thread: a launcher's children fork from a copy of this
  // process instead of loading LibTorch again.
  geodesic::deploy::StartSpawner(argc, argv, RunCli);
  return RunCli(argc, argv);
}
