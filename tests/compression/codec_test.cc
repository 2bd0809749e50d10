// Codec details that the conformance suite does not pin down: exact
// conversions, exact payload bytes, names, size checks and edge cases.
#include "compression/codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "compression/internal/bits.h"
#include "compression/internal/codecs.h"

namespace geodesic::compression {
namespace {

using internal::Bf16ToFloat;
using internal::FloatToBf16;
using internal::FloatToHalf;
using internal::HalfToFloat;

// --- float16 / bfloat16 conversions ---------------------------------------

// The value of a half, from its definition.
double HalfValue(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -mag : mag;
}

// Round-to-nearest-even of a finite float to `bits` significand bits with
// minimum exponent emin (subnormals below it) and overflow threshold; the
// reference both conversions are checked against.
double RoundToFormat(float f, int bits, int emin, double overflow) {
  const double d = std::fabs(static_cast<double>(f));
  if (d == 0) return f;
  const int e = std::max(std::ilogb(d), emin);
  const double ulp = std::ldexp(1.0, e - (bits - 1));
  double r = std::nearbyint(d / ulp) * ulp;  // d / ulp is exact; nearbyint rounds half to even
  if (r >= overflow) r = INFINITY;
  return std::signbit(f) ? -r : r;
}

TEST(Float16Test, EveryHalfConvertsExactlyAndBack) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    const int e = (h >> 10) & 31;
    if (e == 31 && (h & 1023)) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << h;
      continue;
    }
    if (e == 31) {
      EXPECT_EQ(f, (h & 0x8000) ? -INFINITY : INFINITY) << h;
    } else {
      EXPECT_EQ(static_cast<double>(f), HalfValue(static_cast<uint16_t>(h))) << h;
    }
    EXPECT_EQ(FloatToHalf(f), h) << h;
  }
}

TEST(Float16Test, RoundsToNearestEvenIncludingSubnormalsAndOverflow) {
  std::vector<float> probes = {65504.0f,   65519.99f,  65520.0f, 65536.0f, 1e30f,        0x1p-24f,     0x1p-25f,
                               0x1.8p-25f, 0x1.8p-24f, 0x1p-26f, 0x1p-14f, 0x1.ff8p-15f, 0x1.ffcp-15f, 0x1.002p0f,
                               0x1.006p0f, 1e-45f,     3.14159f, -2.5e-6f, 0.1f,         1.0f / 3};
  std::mt19937_64 rng(1);
  for (int i = 0; i < 200000; ++i) {
    // Random bits over the exponents that matter for halves (2^-30 .. 2^17).
    const uint32_t bits =
        (static_cast<uint32_t>(rng()) & 0x807fffffu) | static_cast<uint32_t>((97u + rng() % 48) << 23);
    probes.push_back(std::bit_cast<float>(bits));
  }
  for (float f : probes) {
    const double want = RoundToFormat(f, 11, -14, 65520.0);
    EXPECT_EQ(static_cast<double>(HalfToFloat(FloatToHalf(f))), want) << f;
    EXPECT_EQ(static_cast<double>(HalfToFloat(FloatToHalf(-f))), -want) << f;
  }
  EXPECT_EQ(FloatToHalf(INFINITY), 0x7c00);
  EXPECT_EQ(FloatToHalf(-INFINITY), 0xfc00);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
}

TEST(Float16Test, TheEncoderMatchesTheReferenceConversionBitForBit) {
  // Encode may use the F16C instructions; they must agree with FloatToHalf.
  std::mt19937_64 rng(2);
  std::vector<float> x(100003);
  for (auto& v : x)
    v = std::bit_cast<float>((static_cast<uint32_t>(rng()) & 0x807fffffu) |
                             static_cast<uint32_t>((97u + rng() % 45) << 23));  // below 2^15
  Encoder enc(*ParseCodecSpec("fp16"), 1);
  std::vector<uint8_t> out;
  PayloadInfo info;
  std::vector<float> sent(x.size());
  ASSERT_TRUE(enc.Encode(x.data(), x.size(), &out, &info, sent.data()).ok());
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, out.data() + 2 * i, 2);
    ASSERT_EQ(h, FloatToHalf(x[i])) << x[i];
    ASSERT_EQ(sent[i], HalfToFloat(h));
  }
}

TEST(Bf16Test, RoundsToNearestEven) {
  std::vector<float> probes = {1.0f,        0x1.01p0f, 0x1.018p0f, 0x1.008p0f, 0x1.fep127f,
                               0x1.ffp127f, FLT_MAX,   1e-40f,     0x1p-133f,  0x1.8p-133f};
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    if (!internal::NonFiniteBits(bits)) probes.push_back(std::bit_cast<float>(bits));
  }
  for (float f : probes) {
    const double want = RoundToFormat(f, 8, -126, std::ldexp(1.0, 128));
    ASSERT_EQ(static_cast<double>(Bf16ToFloat(FloatToBf16(f))), want) << f;
  }
  EXPECT_EQ(FloatToBf16(INFINITY), 0x7f80);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
  EXPECT_TRUE(
      std::isnan(Bf16ToFloat(FloatToBf16(std::bit_cast<float>(0x7f800001u)))));  // a NaN that rounding would make Inf
}

TEST(Float16Test, ValuesBeyondTheRangeAreRefusedByTheEncoder) {
  // 40 values: the vector path and the scalar tail both see the edge.
  for (size_t at : {13, 38}) {
    std::vector<float> x(40, 1.0f);
    x[at] = 65519.99f;  // rounds to 65504
    Encoder enc(*ParseCodecSpec("fp16"), 1);
    std::vector<uint8_t> out;
    PayloadInfo info;
    std::vector<float> sent(x.size());
    ASSERT_TRUE(enc.Encode(x.data(), x.size(), &out, &info, sent.data()).ok());
    EXPECT_EQ(sent[at], 65504.0f);
    x[at] = 65520.0f;  // rounds to Inf
    Status s = enc.Encode(x.data(), x.size(), &out, &info, nullptr);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("beyond the format's range"), std::string::npos) << s;
    x[at] = -1e6f;
    EXPECT_EQ(enc.Encode(x.data(), x.size(), &out, &info, nullptr).code(), Code::kInvalidArgument);
    EXPECT_TRUE(Encoder(*ParseCodecSpec("bf16"), 1).Encode(x.data(), x.size(), &out, &info, nullptr).ok());
  }
}

// --- exact payload bytes ---------------------------------------------------

template <typename T>
T Load(const std::vector<uint8_t>& p, size_t off) {
  T v;
  std::memcpy(&v, p.data() + off, sizeof v);
  return v;
}

TEST(LayoutTest, Int8IsScaleThenLevelsPerBlock) {
  // On-grid values round deterministically.
  std::vector<float> x(10);
  for (int i = 0; i < 8; ++i) x[i] = static_cast<float>(i * 10 - 30) * 0.5f;  // -15 .. 20, max 20
  x[8] = 0.0f;
  x[9] = -3.0f;
  Encoder enc(*ParseCodecSpec("int8:block=8"), 1);
  std::vector<uint8_t> p;
  PayloadInfo info;
  ASSERT_TRUE(enc.Encode(x.data(), x.size(), &p, &info, nullptr).ok());
  EXPECT_EQ(info.codec, wire::INT8);
  EXPECT_EQ(info.block, 8u);
  ASSERT_EQ(p.size(), (4 + 8) + (4 + 2u));
  // Scales are max|x| / 127, nudged up (never down) so no level clips.
  const float s0 = Load<float>(p, 0), s1 = Load<float>(p, 12);
  EXPECT_NEAR(s0, 20.0f / 127, 1e-7);
  EXPECT_GE(s0 * 127, 20.0f);
  EXPECT_NEAR(s1, 3.0f / 127, 1e-8);
  EXPECT_GE(s1 * 127, 3.0f);
  EXPECT_EQ(static_cast<int8_t>(p[4 + 7]), 127);
  EXPECT_EQ(static_cast<int8_t>(p[16]), 0);
  EXPECT_EQ(static_cast<int8_t>(p[17]), -127);
  // The level -128 is refused.
  std::vector<uint8_t> bad = p;
  bad[5] = 0x80;
  std::vector<float> out(x.size());
  EXPECT_EQ(Decode(info, bad.data(), bad.size(), x.size(), out.data(), nullptr).code(), Code::kInvalidArgument);
}

TEST(DecodeTest, NonFiniteValuesAndScalesSayItAsADetailNotInText) {
  // A receiver counts non-finite payloads apart from malformed ones by the
  // Status detail, which survives Annotate.
  std::vector<float> x = {1, 2, 3, 4};
  std::vector<float> out(x.size());
  for (const char* spec : {"fp16", "int8"}) {
    Encoder enc(*ParseCodecSpec(spec), 1);
    std::vector<uint8_t> p;
    PayloadInfo info;
    ASSERT_TRUE(enc.Encode(x.data(), x.size(), &p, &info, nullptr).ok());
    std::vector<uint8_t> bad = p;
    if (info.codec == wire::FP16) {
      bad[0] = 0x00, bad[1] = 0x7c;  // +Inf
    } else {
      const float inf = std::numeric_limits<float>::infinity();
      std::memcpy(bad.data(), &inf, 4);  // the block's scale
    }
    Status s = Decode(info, bad.data(), bad.size(), x.size(), out.data(), nullptr).Annotate("chunk 0");
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << spec;
    EXPECT_EQ(s.detail(), Detail::kNonFinite) << spec << ": " << s;
    bad = p;
    bad.pop_back();
    EXPECT_EQ(Decode(info, bad.data(), bad.size(), x.size(), out.data(), nullptr).detail(), Detail::kNone) << spec;
  }
}

TEST(LayoutTest, Int4PacksLowNibbleFirstAndPadsOddBlocks) {
  std::vector<float> x = {7, -7, 0, 7, -7, 7, 0, 0, 7};  // one block of 9, scale 1
  Encoder enc(*ParseCodecSpec("int4:block=9"), 1);
  std::vector<uint8_t> p;
  PayloadInfo info;
  ASSERT_TRUE(enc.Encode(x.data(), x.size(), &p, &info, nullptr).ok());
  ASSERT_EQ(p.size(), 4 + 5u);
  EXPECT_EQ(Load<float>(p, 0), 1.0f);
  EXPECT_EQ(p[4], 0x97);  // -7 = 0x9 high, 7 low
  EXPECT_EQ(p[5], 0x70);
  EXPECT_EQ(p[6], 0x79);
  EXPECT_EQ(p[7], 0x00);
  EXPECT_EQ(p[8], 0x07);  // the padding nibble is zero
  // A non-zero padding nibble or the level -8 is refused.
  std::vector<float> out(9);
  for (auto [off, byte] : {std::pair{8, 0x17}, std::pair{4, 0x87}, std::pair{4, 0x98}}) {
    std::vector<uint8_t> bad = p;
    bad[off] = static_cast<uint8_t>(byte);
    EXPECT_EQ(Decode(info, bad.data(), bad.size(), 9, out.data(), nullptr).code(), Code::kInvalidArgument) << byte;
  }
}

TEST(LayoutTest, SignIsMeanAbsThenOneBitPerValueLsbFirst) {
  std::vector<float> x = {1, -2, 3, -4, 5, -6, 7, -8, -9, 10};  // block 8, then a block of 2
  Encoder enc(*ParseCodecSpec("sign:block=8"), 1);
  std::vector<uint8_t> p;
  PayloadInfo info;
  std::vector<float> sent(x.size());
  ASSERT_TRUE(enc.Encode(x.data(), x.size(), &p, &info, sent.data()).ok());
  ASSERT_EQ(p.size(), (4 + 1) + (4 + 1u));
  EXPECT_EQ(Load<float>(p, 0), 4.5f);
  EXPECT_EQ(p[4], 0xaa);
  EXPECT_EQ(Load<float>(p, 5), 9.5f);
  EXPECT_EQ(p[9], 0x01);
  EXPECT_EQ(sent[1], -4.5f);
  EXPECT_EQ(sent[9], 9.5f);
  std::vector<uint8_t> bad = p;
  bad[9] |= 0x04;  // a padding bit
  std::vector<float> out(x.size());
  EXPECT_EQ(Decode(info, bad.data(), bad.size(), x.size(), out.data(), nullptr).code(), Code::kInvalidArgument);
}

TEST(LayoutTest, TopKIsGapVarintsThenValues) {
  std::vector<float> x(300, 0.5f);
  x[1] = 5;
  x[3] = -7;
  x[200] = 9;
  Encoder enc(*ParseCodecSpec("topk:0.01"), 1);  // k = 3
  std::vector<uint8_t> p;
  PayloadInfo info;
  ASSERT_TRUE(enc.Encode(x.data(), x.size(), &p, &info, nullptr).ok());
  EXPECT_EQ(info.kept, 3u);
  const std::vector<uint8_t> gaps = {1, 2, 0xc5, 0x01};  // 1, 2, 197
  ASSERT_EQ(p.size(), gaps.size() + 12);
  EXPECT_TRUE(std::equal(gaps.begin(), gaps.end(), p.begin()));
  EXPECT_EQ(Load<float>(p, 4), 5.0f);
  EXPECT_EQ(Load<float>(p, 8), -7.0f);
  EXPECT_EQ(Load<float>(p, 12), 9.0f);
}

TEST(SparseTest, DecoderRefusesMalformedIndices) {
  std::vector<float> out(300);
  auto decode = [&](std::vector<uint8_t> gaps, uint64_t k, float value = 1.0f) {
    for (uint64_t j = 0; j < k; ++j) {
      uint8_t b[4];
      std::memcpy(b, &value, 4);
      gaps.insert(gaps.end(), b, b + 4);
    }
    PayloadInfo info;
    info.codec = wire::TOPK;
    info.kept = k;
    return Decode(info, gaps.data(), gaps.size(), out.size(), out.data(), nullptr);
  };
  ASSERT_TRUE(decode({0, 1, 0xab, 0x01}, 3).ok());  // indices 0, 1, 172
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[172], 1.0f);
  EXPECT_EQ(out[2], 0.0f);
  const std::tuple<std::vector<uint8_t>, uint64_t, float, const char*> cases[] = {
      {{0, 0}, 2, 1.0f, "repeats index 0"},
      {{0xac, 0x02}, 1, 1.0f, "out of range: 300 >= 300"},
      {{0x80}, 1, 1.0f, "runs past the index section"},
      {{0x80, 0x00}, 1, 1.0f, "redundant zero byte"},
      {{0, 1, 2}, 2, 1.0f, "1 byte(s) left over"},
      {{5}, 1, NAN, "not finite"},
      {{5}, 1, -INFINITY, "not finite"},
  };
  for (const auto& [gaps, k, value, what] : cases) {
    Status s = decode(gaps, k, value);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s;
  }
  // A varint longer than 64 bits (unreachable through Decode, whose size
  // check bounds the varints by n, so called directly).
  std::vector<uint8_t> over(10, 0xff);
  over.push_back(0x02);
  over.resize(over.size() + 4, 0);
  float one = 0;
  Status s = internal::DecodeSparse("topk", over.data(), over.size(), ~uint64_t{0}, 1, &one, true);
  EXPECT_NE(s.message().find("overflows 64 bits"), std::string::npos) << s;
}

TEST(SparseTest, TopKKeepsExactlyKWithTies) {
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 20; ++trial) {
    const uint64_t n = 1 + rng() % 5000;
    std::vector<float> x(n);
    for (auto& v : x) v = static_cast<float>(static_cast<int>(rng() % 7) - 3);  // many ties, zeros
    const double fraction = 0.001 + (rng() % 1000) / 1000.0;
    CodecSpec spec;
    spec.codec = wire::TOPK;
    spec.fraction = std::min(1.0, fraction);
    Encoder enc(spec, 1);
    std::vector<uint8_t> p;
    PayloadInfo info;
    std::vector<float> sent(n);
    ASSERT_TRUE(enc.Encode(x.data(), n, &p, &info, sent.data()).ok());
    const uint64_t k = info.kept;
    ASSERT_EQ(k, std::clamp<uint64_t>(static_cast<uint64_t>(std::ceil(spec.fraction * n - 1e-9)), 1, n));
    std::vector<float> d(n);
    ASSERT_TRUE(Decode(info, p.data(), p.size(), n, d.data(), nullptr).ok());
    // k indices by the varints; the kept magnitudes are the k largest.
    std::vector<float> mags(n);
    for (uint64_t i = 0; i < n; ++i) mags[i] = std::fabs(x[i]);
    std::sort(mags.rbegin(), mags.rend());
    double kept_sum = 0, want_sum = 0;
    for (uint64_t i = 0; i < n; ++i) kept_sum += std::fabs(d[i]);
    for (uint64_t i = 0; i < k; ++i) want_sum += mags[i];
    EXPECT_EQ(kept_sum, want_sum);
  }
}

TEST(SparseTest, RandKDrawsEveryIndexAlike) {
  // 20,000 draws of k = 10 of n = 100: each index ~2,000 times (sd ~42).
  CodecSpec spec;
  spec.codec = wire::RANDK;
  spec.fraction = 0.1;
  Encoder enc(spec, 5);
  std::vector<float> x(100, 1.0f), d(100);
  std::vector<int> hits(100, 0);
  std::vector<uint8_t> p;
  PayloadInfo info;
  for (int t = 0; t < 20000; ++t) {
    ASSERT_TRUE(enc.Encode(x.data(), x.size(), &p, &info, nullptr).ok());
    ASSERT_EQ(info.kept, 10u);
    ASSERT_TRUE(Decode(info, p.data(), p.size(), x.size(), d.data(), nullptr).ok());
    for (int i = 0; i < 100; ++i) hits[i] += d[i] != 0;
  }
  for (int i = 0; i < 100; ++i) EXPECT_NEAR(hits[i], 2000, 5 * 42.4) << i;
}

// --- names ----------------------------------------------------------------

TEST(SpecTest, ParsesEveryCodecAndParameters) {
  struct Case {
    const char* text;
    wire::Codec codec;
    uint32_t block;
    double fraction;
    int zstd;
    const char* name;
  };
  const Case cases[] = {
      {"fp32", wire::FP32, 256, 0.01, 0, "fp32"},
      {"none", wire::FP32, 256, 0.01, 0, "fp32"},
      {"fp16", wire::FP16, 256, 0.01, 0, "fp16"},
      {"bf16+zstd", wire::BF16, 256, 0.01, 3, "bf16+zstd:3"},
      {"int8", wire::INT8, 256, 0.01, 0, "int8:block=256"},
      {"int8:block=128+zstd:3", wire::INT8, 128, 0.01, 3, "int8:block=128+zstd:3"},
      {"int4:block=8", wire::INT4, 8, 0.01, 0, "int4:block=8"},
      {"sign:block=65536+zstd:19", wire::SIGN, 65536, 0.01, 19, "sign:block=65536+zstd:19"},
      {"topk:0.01+zstd", wire::TOPK, 256, 0.01, 3, "topk:0.01+zstd:3"},
      {"topk:1", wire::TOPK, 256, 1.0, 0, "topk:1"},
      {"randk:0.25", wire::RANDK, 256, 0.25, 0, "randk:0.25"},
      {"randk:1e-3", wire::RANDK, 256, 0.001, 0, "randk:0.001"},
  };
  for (const Case& c : cases) {
    auto spec = ParseCodecSpec(c.text);
    ASSERT_TRUE(spec.ok()) << c.text << ": " << spec.status();
    EXPECT_EQ(spec->codec, c.codec) << c.text;
    EXPECT_EQ(spec->block, c.block) << c.text;
    EXPECT_EQ(spec->fraction, c.fraction) << c.text;
    EXPECT_EQ(spec->zstd_level, c.zstd) << c.text;
    EXPECT_EQ(spec->Name(), c.name) << c.text;
    EXPECT_EQ(spec->lossy(), c.codec != wire::FP32);
    EXPECT_EQ(spec->sparse(), c.codec == wire::TOPK || c.codec == wire::RANDK);
  }
}

TEST(SpecTest, RefusesBadNamesNamingTheProblemAndTheKnownCodecs) {
  const std::pair<const char*, const char*> cases[] = {
      {"int3", "unknown codec 'int3'"},
      {"", "unknown codec ''"},
      {"FP16", "unknown codec 'FP16'"},
      {"topk:0", "in (0, 1]"},
      {"topk:1.5", "in (0, 1]"},
      {"topk:-0.1", "in (0, 1]"},
      {"topk:nan", "in (0, 1]"},
      {"topk:0.01x", "in (0, 1]"},
      {"topk", "needs the share"},
      {"randk:", "in (0, 1]"},
      {"int8:block=3", "[8, 65536]"},
      {"int8:block=65537", "[8, 65536]"},
      {"int8:block=", "[8, 65536]"},
      {"int8:128", "block=N"},
      {"sign:block=-8", "[8, 65536]"},
      {"fp16:2", "takes no parameters"},
      {"fp16+lz4", "unknown stage 'lz4'"},
      {"fp16+zstd:0", "zstd level"},
      {"fp16+zstd:20", "zstd level"},
      {"fp16+zstd:x", "zstd level"},
      {"fp16+zstd+zstd", "at most one stage"},
      {"fp16 ", "unknown codec 'fp16 '"},
  };
  for (auto [text, what] : cases) {
    auto spec = ParseCodecSpec(text);
    ASSERT_FALSE(spec.ok()) << text;
    EXPECT_EQ(spec.status().code(), Code::kInvalidArgument);
    EXPECT_NE(spec.status().message().find(what), std::string::npos) << text << ": " << spec.status();
    EXPECT_NE(spec.status().message().find("known codecs: fp32"), std::string::npos) << text;
  }
}

TEST(SpecTest, CodecNames) {
  EXPECT_EQ(CodecName(wire::FP32), "fp32");
  EXPECT_EQ(CodecName(wire::INT4), "int4");
  EXPECT_EQ(CodecName(wire::RANDK), "randk");
  EXPECT_EQ(CodecName(static_cast<wire::Codec>(77)), "codec#77");
  EXPECT_EQ(CodecName(wire::CODEC_UNSPECIFIED), "codec#0");
}

// --- sizes ------------------------------------------------------------------

TEST(SizeTest, Fp32SizesAreExact) {
  EXPECT_TRUE(CheckPayloadSize(wire::FP32, 10, 40).ok());
  EXPECT_EQ(CheckPayloadSize(wire::FP32, 10, 39).code(), Code::kInvalidArgument);
  EXPECT_EQ(CheckPayloadSize(wire::FP32, 10, 44).code(), Code::kInvalidArgument);
  EXPECT_TRUE(CheckPayloadSize(wire::FP16, 10, 20).ok());
  EXPECT_EQ(CheckPayloadSize(static_cast<wire::Codec>(77), 10, 40).code(), Code::kInvalidArgument);
  EXPECT_EQ(CheckPayloadSize(wire::CODEC_UNSPECIFIED, 10, 40).code(), Code::kInvalidArgument);
  EXPECT_EQ(CheckPayloadSize(wire::INT8, 10, 14).code(), Code::kInvalidArgument);  // needs a block
}

TEST(SizeTest, MaxEncodedBytesPerCodec) {
  PayloadInfo info;
  info.codec = wire::INT8;
  info.block = 256;
  EXPECT_EQ(MaxEncodedBytes(info, 1000), 1000 + 4 * 4u);
  info.codec = wire::INT4;
  EXPECT_EQ(MaxEncodedBytes(info, 1000), 500 + 4 * 4u);
  info.block = 9;
  EXPECT_EQ(MaxEncodedBytes(info, 20), 2 * (4 + 5) + (4 + 1u));
  info.codec = wire::SIGN;
  info.block = 256;
  EXPECT_EQ(MaxEncodedBytes(info, 1000), 125 + 4 * 4u);
  info.codec = wire::TOPK;
  info.kept = 10;
  EXPECT_EQ(MaxEncodedBytes(info, 1000), 10 * (4 + 2u));  // indices below 2^14: 2 bytes at most
  info.kept = 1001;
  EXPECT_EQ(MaxEncodedBytes(info, 1000), 0u);
  info.codec = wire::BF16;
  EXPECT_EQ(MaxEncodedBytes(info, 1000), 2000u);
  EXPECT_EQ(MaxEncodedBytes(info, uint64_t{1} << 62), 0u);  // absurd counts are invalid, not overflowed
}

TEST(SizeTest, ZstdPayloadsAreBoundedByTheirRawSize) {
  PayloadInfo info;
  info.codec = wire::FP16;
  info.zstd = true;
  info.raw_bytes = 2000;
  EXPECT_TRUE(CheckPayloadSize(info, 1000, 100).ok());
  EXPECT_EQ(CheckPayloadSize(info, 1000, 0).code(), Code::kInvalidArgument);
  EXPECT_EQ(CheckPayloadSize(info, 1000, 1 << 20).code(), Code::kInvalidArgument);
  info.raw_bytes = 2002;
  EXPECT_EQ(CheckPayloadSize(info, 1000, 100).code(), Code::kInvalidArgument);
}

// --- encoder --------------------------------------------------------------

TEST(EncoderTest, IncompressibleBytesSkipTheZstdStage) {
  std::mt19937_64 rng(4);
  std::vector<float> x(10000);
  for (auto& v : x) v = std::bit_cast<float>(static_cast<uint32_t>(rng()) & 0xbfffffffu);  // random, finite
  Encoder enc(*ParseCodecSpec("fp32+zstd"), 1);
  std::vector<uint8_t> p;
  PayloadInfo info;
  ASSERT_TRUE(enc.Encode(x.data(), x.size(), &p, &info, nullptr).ok());
  EXPECT_FALSE(info.zstd);
  EXPECT_EQ(p.size(), 40000u);
  std::vector<float> d(x.size());
  ASSERT_TRUE(Decode(info, p.data(), p.size(), x.size(), d.data(), nullptr).ok());
  EXPECT_EQ(d, x);
}

TEST(EncoderTest, InvalidSpecsAreRefused) {
  std::vector<float> x(10, 1.0f);
  std::vector<uint8_t> p;
  PayloadInfo info;
  CodecSpec spec;
  spec.codec = wire::INT8;
  spec.block = 4;
  EXPECT_EQ(Encoder(spec, 1).Encode(x.data(), x.size(), &p, &info, nullptr).code(), Code::kInvalidArgument);
  spec.codec = wire::TOPK;
  spec.fraction = 0;
  EXPECT_EQ(Encoder(spec, 1).Encode(x.data(), x.size(), &p, &info, nullptr).code(), Code::kInvalidArgument);
  spec.codec = static_cast<wire::Codec>(42);
  EXPECT_EQ(Encoder(spec, 1).Encode(x.data(), x.size(), &p, &info, nullptr).code(), Code::kInvalidArgument);
}

TEST(EncoderTest, ExtremeMagnitudesStayFinite) {
  // Scales near FLT_MAX and in the subnormal range must decode finitely and
  // within a level.
  for (const char* codec : {"int8", "int4", "sign"}) {
    for (float mag : {FLT_MAX, FLT_MAX / 2, 1e-40f, 1e-45f, 1.0f}) {
      std::vector<float> x = {mag, -mag, mag / 3, 0.0f, -mag / 7, mag, 0.0f, mag / 2};
      Encoder enc(*ParseCodecSpec(std::string(codec) + ":block=8"), 1);
      std::vector<uint8_t> p;
      PayloadInfo info;
      std::vector<float> sent(8), d(8);
      ASSERT_TRUE(enc.Encode(x.data(), 8, &p, &info, sent.data()).ok()) << codec << " " << mag;
      ASSERT_TRUE(Decode(info, p.data(), p.size(), 8, d.data(), nullptr).ok()) << codec << " " << mag;
      EXPECT_EQ(d, sent);
      EXPECT_EQ(CountNonFinite(d.data(), 8), 0u);
      if (std::string(codec) != "sign") {
        const double levels = std::string(codec) == "int8" ? 127 : 7;
        for (int i = 0; i < 8; ++i)
          EXPECT_LE(std::fabs(static_cast<double>(d[i]) - x[i]), mag / levels * 1.0001 + 1e-45) << codec << mag;
      }
    }
  }
}

TEST(DecodeTest, AcceptsUnalignedPayloads) {
  std::vector<float> x = {1.5f, -2.25f, 3.0f, 4.0f, 5.0f};
  for (const char* codec : {"fp32", "fp16", "bf16", "int8:block=8"}) {
    Encoder enc(*ParseCodecSpec(codec), 1);
    std::vector<uint8_t> p;
    PayloadInfo info;
    std::vector<float> sent(x.size()), d(x.size());
    ASSERT_TRUE(enc.Encode(x.data(), x.size(), &p, &info, sent.data()).ok());
    std::vector<uint8_t> shifted(p.size() + 1);
    std::memcpy(shifted.data() + 1, p.data(), p.size());
    ASSERT_TRUE(Decode(info, shifted.data() + 1, p.size(), x.size(), d.data(), nullptr).ok()) << codec;
    EXPECT_EQ(d, sent) << codec;
  }
}

TEST(ErrorFeedbackTest, ResidualsArePerChunkAndResettable) {
  ErrorFeedback ef;
  std::vector<float> a = {1, 2, 3}, sent = {0.5f, 2, 0}, c(3);
  ef.Correct(1, a.data(), 3, c.data());
  EXPECT_EQ(c, a);
  ef.Remember(1, c.data(), sent.data(), 3);  // residual {0.5, 0, 3}
  ef.Remember(2, c.data(), c.data(), 3);     // residual 0
  EXPECT_DOUBLE_EQ(ef.ResidualSquaredNorm(), 0.25 + 9);
  ef.Correct(1, a.data(), 3, c.data());
  EXPECT_EQ(c, (std::vector<float>{1.5f, 2, 6}));
  ef.Correct(1, a.data(), 2, c.data());  // another size: the residual does not apply
  EXPECT_EQ(c[0], 1.0f);
  std::vector<float> in_place = a;
  ef.Correct(1, in_place.data(), 3, in_place.data());
  EXPECT_EQ(in_place, (std::vector<float>{1.5f, 2, 6}));
  ef.Reset(2);
  EXPECT_DOUBLE_EQ(ef.ResidualSquaredNorm(), 0.25 + 9);
  ef.ResetAll();
  EXPECT_EQ(ef.ResidualSquaredNorm(), 0.0);
  ef.Correct(1, a.data(), 3, c.data());
  EXPECT_EQ(c, a);
}

// --- CountNonFinite ----------------------------------------------------------

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
