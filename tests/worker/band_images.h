// A small learnable image set for the worker tests: 640 images whose label
// is the row of their one bright band, over faint noise.
#pragma once

#include <random>

#include "worker/dataset.h"

namespace geodesic::worker {

inline ImageSet Bands() {
  ImageSet set;
  set.count = 640;
  set.rows = set.cols = 28;
  set.pixels.assign(640 * 784, 0);
  set.labels.resize(640);
  std::mt19937 rng(2);
  for (int i = 0; i < 640; ++i) {
    const int label = i % 10;
    set.labels[i] = static_cast<uint8_t>(label);
    for (int p = 0; p < 784; ++p) set.pixels[i * 784 + p] = static_cast<uint8_t>(rng() % 40);
    for (int c = 0; c < 28; ++c) set.pixels[i * 784 + (2 + 2 * label) * 28 + c] = 250;
  }
  return set;
}

}  // namespace geodesic::worker
