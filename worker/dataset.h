// Fashion-MNIST from Debian's dataset-fashion-mnist package (IDX files,
// gzip-compressed, in /usr/share/datasets/fashion-mnist), and how the
// training set is split across workers.
//
// Loading checks every header field and length, so a truncated or foreign
// file is a clear DataLoss error rather than garbage pixels; a missing file
// names the Debian package to install. Torch-free: the trainer turns the
// bytes into tensors. Functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace geodesic::worker {

struct ImageSet {
  int64_t count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, row-major
  std::vector<uint8_t> labels;  // count, 0..9
};

// Mean and std of the 60k Fashion-MNIST training pixels in [0, 1]: x = (p/255 - mean) / std.
inline constexpr float kFashionMean = 0.2860f;
inline constexpr float kFashionStd = 0.3530f;

// Loads split "train" (60k) or "test" (10k) from `dir`.
StatusOr<ImageSet> LoadFashionMnist(const std::string& dir, const std::string& split);

// Reads a gzip-compressed IDX file of the given magic (0x803 images,
// 0x801 labels). Exposed for tests.
StatusOr<std::vector<uint8_t>> ReadIdxGz(const std::string& path, uint32_t magic, std::vector<uint32_t>* dims);

// IID partition: a seeded permutation of [0, n) cut into `parts` slices of
// near-equal size; returns slice `part`. Every index lands in exactly one part.
std::vector<int64_t> IidPartition(int64_t n, int parts, int part, uint64_t seed);

}  // namespace geodesic::worker
