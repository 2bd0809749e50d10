// Parameter snapshots for the accuracy curve: worker 0 writes the model it
// holds every few seconds of training; the evaluator reads them after
// training, so evaluation costs no training time. File layout (native
// little-endian): magic "GDSNAP01", int64 step, float64 training seconds,
// int64 count, count float32 values. Written atomically. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace geodesic::worker {

struct SnapshotInfo {
  std::string path;
  int64_t step = 0;
  double seconds = 0;
};

Status WriteSnapshot(const std::string& dir, int64_t step, double seconds, const float* values, int64_t n);
// Snapshots in `dir`, by step. Unreadable files are skipped with a warning.
std::vector<SnapshotInfo> ListSnapshots(const std::string& dir);
// Reads one snapshot's values; DataLoss if it is truncated or not `n` values.
Status ReadSnapshot(const std::string& path, int64_t n, std::vector<float>* values);

}  // namespace geodesic::worker
