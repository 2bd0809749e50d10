#include "compression/codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace geodesic::compression {
namespace {

TEST(CodecTest, Fp32SizesAreExact) {
  EXPECT_TRUE(CheckPayloadSize(wire::FP32, 10, 40).ok());
  EXPECT_EQ(CheckPayloadSize(wire::FP32, 10, 39).code(), Code::kInvalidArgument);
  EXPECT_EQ(CheckPayloadSize(wire::FP32, 10, 44).code(), Code::kInvalidArgument);
  EXPECT_EQ(CheckPayloadSize(static_cast<wire::Codec>(77), 10, 40).code(), Code::kInvalidArgument);
  EXPECT_EQ(CheckPayloadSize(wire::CODEC_UNSPECIFIED, 10, 40).code(), Code::kInvalidArgument);
}

TEST(CodecTest, NamesRoundTripAndUnknownNamesAreRefused) {
  auto c = CodecFromName("fp32");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(CodecName(*c), "fp32");
  auto bad = CodecFromName("int3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown codec 'int3'"), std::string::npos);
}

TEST(CodecTest, DecodeCopiesAndRefusesWrongSizes) {
  std::vector<float> in = {1, 2, 3}, out(3, 0);
  ASSERT_TRUE(Decode(wire::FP32, in.data(), 12, out.data(), 3).ok());
  EXPECT_EQ(out, in);
  EXPECT_FALSE(Decode(wire::FP32, in.data(), 8, out.data(), 3).ok());
}

TEST(CodecTest, CountNonFiniteFindsNaNAndInfAnywhere) {
  std::vector<float> v(1000, 1.0f);
  EXPECT_EQ(CountNonFinite(v.data(), v.size()), 0u);
  v[997] = std::numeric_limits<float>::quiet_NaN();
  v[3] = -std::numeric_limits<float>::infinity();
  v[500] = std::numeric_limits<float>::max();  // finite
  v[501] = std::numeric_limits<float>::denorm_min();
  size_t first = 12345;
  EXPECT_EQ(CountNonFinite(v.data(), v.size(), &first), 2u);
  EXPECT_EQ(first, 3u);
}

}  // namespace
}  // namespace geodesic::compression
