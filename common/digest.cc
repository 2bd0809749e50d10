#include "common/digest.h"

#include <cstring>

namespace geodesic {
namespace {

// splitmix64's finalizer: every input bit reaches every output bit.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace

// Four independent lanes over pairs of floats (so the loop pipelines),
// folded with the count at the end.
uint64_t ValuesDigest(const float* values, size_t n) {
  uint64_t lane[4] = {0x9E3779B97F4A7C15ULL, 0xC2B2AE3D27D4EB4FULL, 0x165667B19E3779F9ULL, 0x27D4EB2F165667C5ULL};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, values + i + 2 * k, sizeof(w));
      lane[k] = Mix(lane[k] ^ w) + 0x9E3779B97F4A7C15ULL;
    }
  uint64_t h = Mix(n);
  for (; i < n; ++i) {
    uint32_t w;
    std::memcpy(&w, values + i, sizeof(w));
    h = Mix(h ^ w);
  }
  for (uint64_t l : lane) h = Mix(h ^ l);
  return h;
}

}  // namespace geodesic
