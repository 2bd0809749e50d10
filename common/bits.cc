#include "common/bits.h"

namespace geodesic {

std::string PackBits(const std::vector<bool>& bits) {
  std::string out((bits.size() + 7) / 8, '\0');
  for (size_t i = 0; i < bits.size(); ++i)
    if (bits[i]) out[i / 8] = static_cast<char>(out[i / 8] | (1 << (i % 8)));
  return out;
}

StatusOr<std::vector<bool>> UnpackBits(const std::string& packed, int64_t n) {
  if (n < 0 || static_cast<int64_t>(packed.size()) < (n + 7) / 8)
    return DataLoss("a bit set of " + std::to_string(packed.size()) + " bytes cannot hold " + std::to_string(n) +
                    " bits");
  std::vector<bool> bits(n);
  for (int64_t i = 0; i < n; ++i) bits[i] = (static_cast<unsigned char>(packed[i / 8]) >> (i % 8)) & 1;
  return bits;
}

}  // namespace geodesic
