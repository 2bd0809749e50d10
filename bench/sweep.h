// `geodesic sweep SWEEP.yaml`: runs every point of a sweep file
// (config/sweep.h) as one `geodesic launch`, one after another, each capped
// at the sweep's limit_s, and keeps one table of results (docs/experiments.md).
//
// OUT/runs/NNN-slug/ is each run's run directory (its log beside it, its row
// in row.json); OUT/results.{csv,json,md} hold one row per run, in the
// sweep's order (time to target, final accuracy, samples/s, bytes per
// sample and per link, staleness mean and max, the step-time split, the
// final parameters' SHA-256), OUT/curves.csv every run's accuracy curve with
// the bytes exchanged by then, and OUT/accuracy_vs_{time,bytes}.png their
// plots (python3-matplotlib). --resume keeps every run that ended (found by
// its job and overrides) and runs the rest; a run stopped by Ctrl-C leaves
// no row and runs again. Single-threaded.
#pragma once

#include <atomic>
#include <string>

#include "common/status.h"

namespace geodesic::bench {

struct SweepOptions {
  std::string sweep_file;
  std::string out;            // default: runs/sweep-<name>
  bool resume = false;        // keep the runs OUT already has
  bool retry_failed = false;  // with resume: run failed and timed-out runs again
  bool dry_run = false;       // list the runs and check their jobs; start nothing
  bool plot = true;
  std::string binary;  // the geodesic binary to launch (default: this one)
};

// 0 when every run finished; 1 when some failed or timed out (the tables
// still written); a Status for a bad sweep file, a bad job of some run, or
// an output folder that holds another sweep.
StatusOr<int> RunSweep(const SweepOptions& options, const std::atomic<bool>* stop);

}  // namespace geodesic::bench
