// `geodesic sweep SWEEP.yaml`: a grid of launches and one table of results
// (bench/sweep.h, docs/experiments.md).
#include <memory>

#include "bench/sweep.h"
#include "cli/command.h"

namespace geodesic::cli {

Command AddSweep(CLI::App& app) {
  auto o = std::make_shared<bench::SweepOptions>();
  auto* cmd = app.add_subcommand("sweep", "run a base job over a grid of settings, one launch after another");
  cmd->add_option("sweep", o->sweep_file, "sweep file (YAML: job, set, axes, limit_s)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", o->out, "output folder (default runs/sweep-<name>)");
  cmd->add_flag("--resume", o->resume, "keep the runs --out already has and run the rest");
  cmd->add_flag("--retry-failed", o->retry_failed, "with --resume: run failed and timed-out runs again");
  cmd->add_flag("--dry-run", o->dry_run, "list the runs and check their jobs; start nothing");
  cmd->add_flag_callback(
      "--no-plot", [o] { o->plot = false; }, "skip the plots");
  return {cmd, [o] {
            StatusOr<int> rc = bench::RunSweep(*o, &g_stop);
            return rc.ok() ? *rc : Fail(rc.status());
          }};
}

}  // namespace geodesic::cli
