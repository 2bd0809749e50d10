// Parameter snapshots for the accuracy curve: worker 0 writes the model it
// holds every few seconds of training; the evaluator reads them after
// training, so evaluation costs no training time. File layout (native
// little-endian): magic "GDSNAP01", int64 step, float64 training seconds,
// int64 count, count float32 values. Written atomically. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace geodesic::worker {

struct SnapshotInfo {
  std::string path;
  int64_t step = 0;
  double seconds = 0;
};

// `age_s` > 0: the values were there that long before now (a local-SGD
// worker's pulled model); the file's modification time, which the evaluator
// dates the curve by, is set back as far.
Status WriteSnapshot(const std::string& dir, int64_t step, double seconds, const float* values, int64_t n,
                     double age_s = 0);
// Snapshots in `dir`, by step. Unreadable files are skipped with a warning.
std::vector<SnapshotInfo> ListSnapshots(const std::string& dir);
// Reads one snapshot's values; DataLoss if it is truncated or not `n` values.
Status ReadSnapshot(const std::string& path, int64_t n, std::vector<float>* values);

// Which of snapshots 0..n-1 the accuracy curve scores (eval.curve_points):
// all of them when n <= points or points == 0. Otherwise `points` spread
// evenly, the last included; then the first to reach `target` is searched
// for in the stretch before the first of them that reached it: in order if
// it holds at most `points` snapshots, else by `points` picks over it and
// again in the stretch before the first pick that reached it. So the time
// to the target is that of the first snapshot to reach it (unless accuracy
// rose to the target and fell back between two scored points), for about
// points * log_points(n) calls of `score` instead of n.
// `score` returns a snapshot's accuracy (nullopt: unreadable, skipped).
// Returns (index, accuracy) by index.
using SnapshotScore = std::function<std::optional<double>(size_t)>;
std::vector<std::pair<size_t, double>> ScoreCurve(size_t n, int64_t points, double target, const SnapshotScore& score);

}  // namespace geodesic::worker
