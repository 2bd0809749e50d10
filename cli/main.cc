// geodesic: one binary, one subcommand per role or tool (cli/command.h).
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "cli/command.h"
#include "transport/message.h"
#include "transport/protobuf_log.h"

int main(int argc, char** argv) {
  using namespace geodesic::cli;
  // ZeroMQ allocates a buffer per received message. With glibc's default,
  // every multi-MiB message is a fresh mmap (page faults, zeroing) and an
  // munmap when freed; keeping such buffers on the heap makes receives of
  // 1-32 MiB chunks reuse memory instead (measured: docs/benchmarks.md).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  CLI::App app{"geodesic: training across cloud regions and edge devices with sharded parameter servers", "geodesic"};
  app.require_subcommand(1);
  app.set_version_flag("--version",
                       "geodesic 0.1 (wire protocol " + std::to_string(geodesic::transport::kProtocolVersion) + ")");
  // Declaration order is the order --help lists them in.
  const std::vector<Command> commands = {
      AddCoordinator(app), AddServer(app),    AddWorker(app),    AddEvaluator(app),  AddClient(app), AddToken(app),
      AddLaunch(app),      AddWan(app),       AddPlan(app),      AddCheckpoint(app), AddStatus(app), AddMetrics(app),
      AddDeploy(app),      AddWanRouter(app), AddPartition(app), AddBench(app),      AddSweep(app),
  };
  CLI11_PARSE(app, argc, argv);
  geodesic::transport::RouteProtobufLogs();
  InstallSignalHandlers();
  for (const Command& c : commands)
    if (c.app->parsed()) return c.run();
  return 0;
}
