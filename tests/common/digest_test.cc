#include "common/digest.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace geodesic {
namespace {

TEST(ValuesDigestTest, EqualValuesAgreeAndAnyBitOrLengthChangesIt) {
  std::vector<float> a(1003);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.001f * static_cast<float>(i) - 0.3f;
  std::vector<float> b = a;
  const uint64_t d = ValuesDigest(a.data(), a.size());
  EXPECT_EQ(ValuesDigest(b.data(), b.size()), d);
  // One bit anywhere: in the lanes (index 5) and in the tail (index 1001).
  for (size_t at : {size_t{5}, size_t{1001}}) {
    std::vector<float> c = a;
    uint32_t bits;
    std::memcpy(&bits, &c[at], 4);
    bits ^= 1u;
    std::memcpy(&c[at], &bits, 4);
    EXPECT_NE(ValuesDigest(c.data(), c.size()), d) << at;
  }
  EXPECT_NE(ValuesDigest(a.data(), a.size() - 1), d);
  // Swapped values are not the same chunk.
  std::swap(b[0], b[1]);
  EXPECT_NE(ValuesDigest(b.data(), b.size()), d);
  // By bits: 0.0 and -0.0 differ; zeros of different lengths differ.
  const float zero = 0.0f, minus = -0.0f;
  EXPECT_NE(ValuesDigest(&zero, 1), ValuesDigest(&minus, 1));
  std::vector<float> z8(8, 0.0f), z16(16, 0.0f);
  EXPECT_NE(ValuesDigest(z8.data(), 8), ValuesDigest(z16.data(), 16));
}

}  // namespace
}  // namespace geodesic
