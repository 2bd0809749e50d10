// One suite over every codec, with and without the zstd stage: what each
// codec promises (its error bound, stated per codec below), what every codec
// promises (sent == decoded, error feedback conserves mass, reproducible),
// and that every decoder refuses malformed payloads without crashing.
#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "compression/codec.h"

namespace geodesic::compression {
namespace {

const char* const kCodecs[] = {
    "fp32", "fp16",          "bf16",      "int8",     "int8:block=8", "int4",       "int4:block=9",
    "sign", "sign:block=13", "topk:0.01", "topk:0.3", "topk:1",       "randk:0.01", "randk:0.7",
};

std::vector<std::string> AllSpecs() {
  std::vector<std::string> v;
  for (const char* c : kCodecs) {
    v.push_back(c);
    v.push_back(std::string(c) + "+zstd");
  }
  return v;
}

std::string TestName(const testing::TestParamInfo<std::string>& info) {
  std::string s;
  for (char c : info.param) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return s;
}

// Normal values with a few outliers a hundred times larger; no zeros (so
// that a sparse codec's kept values can be told from the ones it dropped).
std::vector<float> Gradient(uint64_t n, uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> g(n);
  for (auto& v : g) {
    do v = normal(rng);
    while (v == 0.0f);
  }
  for (uint64_t i = 3; i < n; i += 97) g[i] *= 100.0f;
  return g;
}

class CodecConformance : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto spec = ParseCodecSpec(GetParam());
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec_ = *spec;
  }

  bool Stochastic() const { return spec_.codec == wire::INT8 || spec_.codec == wire::INT4; }
  bool HasBlock() const { return spec_.codec == wire::INT8 || spec_.codec == wire::INT4 || spec_.codec == wire::SIGN; }

  struct Encoded {
    std::vector<uint8_t> payload;
    PayloadInfo info;
    std::vector<float> sent;
  };
  Encoded Encode(const std::vector<float>& x, uint64_t seed = 7) {
    Encoder enc(spec_, seed);
    Encoded e;
    e.sent.assign(x.size(), -1.0f);
    Status s = enc.Encode(x.data(), x.size(), &e.payload, &e.info, e.sent.data());
    EXPECT_TRUE(s.ok()) << s;
    return e;
  }

  // The bound each codec states, checked per element.
  void ExpectWithinBound(const std::vector<float>& x, const std::vector<float>& d) {
    const uint64_t n = x.size();
    switch (spec_.codec) {
      case wire::FP32:  // exact
        for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(d[i], x[i]) << i;
        break;
      case wire::FP16:  // relative 2^-11 in the normal range, 2^-25 absolute below it
        for (uint64_t i = 0; i < n; ++i)
          ASSERT_LE(std::fabs(d[i] - x[i]), std::max(std::ldexp(std::fabs(x[i]), -11), 0x1p-25f)) << i;
        break;
      case wire::BF16:  // relative 2^-8
        for (uint64_t i = 0; i < n; ++i) ASSERT_LE(std::fabs(d[i] - x[i]), std::ldexp(std::fabs(x[i]), -8)) << i;
        break;
      case wire::INT8:    // |err| <= one level, s = max|x| / 127 of the block (and the scale's rounding)
      case wire::INT4: {  // |err| <= s = max|x| / 7
        const float levels = spec_.codec == wire::INT8 ? 127.0f : 7.0f;
        for (uint64_t b = 0; b < n; b += spec_.block) {
          const uint64_t e = std::min<uint64_t>(n, b + spec_.block);
          float m = 0;
          for (uint64_t i = b; i < e; ++i) m = std::max(m, std::fabs(x[i]));
          const float s = m / levels * (1 + 1e-6f);
          for (uint64_t i = b; i < e; ++i) ASSERT_LE(std::fabs(d[i] - x[i]), s) << i;
        }
        break;
      }
      case wire::SIGN:  // d = sign(x) * mean|x| of the block (relative 1e-5 for the mean's rounding)
        for (uint64_t b = 0; b < n; b += spec_.block) {
          const uint64_t e = std::min<uint64_t>(n, b + spec_.block);
          double sum = 0;
          for (uint64_t i = b; i < e; ++i) sum += std::fabs(x[i]);
          const double mean = sum / static_cast<double>(e - b);
          for (uint64_t i = b; i < e; ++i) {
            ASSERT_NEAR(std::fabs(d[i]), mean, 1e-5 * mean) << i;
            ASSERT_EQ(std::signbit(d[i]), std::signbit(x[i])) << i;
          }
        }
        break;
      case wire::TOPK: {  // exactly k values kept as they are, none smaller than one dropped
        const uint64_t k = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(spec_.fraction * n - 1e-9)));
        uint64_t kept = 0;
        float min_kept = INFINITY, max_dropped = 0;
        for (uint64_t i = 0; i < n; ++i) {
          if (d[i] != 0) {
            ASSERT_EQ(d[i], x[i]) << i;
            ++kept;
            min_kept = std::min(min_kept, std::fabs(x[i]));
          } else {
            max_dropped = std::max(max_dropped, std::fabs(x[i]));
          }
        }
        ASSERT_EQ(kept, std::min(k, n));
        ASSERT_GE(min_kept, max_dropped);
        break;
      }
      case wire::RANDK: {  // exactly k values kept as they are (not rescaled)
        const uint64_t k = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(spec_.fraction * n - 1e-9)));
        uint64_t kept = 0;
        for (uint64_t i = 0; i < n; ++i) {
          if (d[i] != 0) {
            ASSERT_EQ(d[i], x[i]) << i;
            ++kept;
          }
        }
        ASSERT_EQ(kept, std::min(k, n));
        break;
      }
      default:
        FAIL() << "no bound for " << spec_.Name();
    }
  }

  CodecSpec spec_;
};

TEST_P(CodecConformance, NameRoundTrips) {
  auto again = ParseCodecSpec(spec_.Name());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->Name(), spec_.Name());
  EXPECT_EQ(again->codec, spec_.codec);
  EXPECT_EQ(again->block, spec_.block);
  EXPECT_EQ(again->fraction, spec_.fraction);
  EXPECT_EQ(again->zstd_level, spec_.zstd_level);
}

TEST_P(CodecConformance, RoundTripIsWithinTheCodecsBoundAndSentIsWhatIsDecoded) {
  for (uint64_t n : {0, 1, 7, 8, 9, 255, 256, 257, 1000, 4099, 70001}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const std::vector<float> x = Gradient(n, n + 1, n % 2 ? 1e-3f : 10.0f);
    Encoded e = Encode(x);
    EXPECT_EQ(e.info.codec, spec_.codec);
    EXPECT_TRUE(CheckPayloadSize(e.info, n, e.payload.size()).ok()) << CheckPayloadSize(e.info, n, e.payload.size());
    const uint64_t raw = e.info.zstd ? e.info.raw_bytes : e.payload.size();
    EXPECT_LE(raw, MaxEncodedBytes(e.info, n));
    if (!spec_.sparse()) {
      EXPECT_EQ(raw, MaxEncodedBytes(e.info, n));
    }
    if (!spec_.zstd_level) {
      EXPECT_FALSE(e.info.zstd);
    }

    std::vector<float> d(n, 12345.0f);
    std::vector<uint8_t> scratch;
    Status s = Decode(e.info, e.payload.data(), e.payload.size(), n, d.data(), &scratch);
    ASSERT_TRUE(s.ok()) << s;
    ExpectWithinBound(x, d);
    if (n) {
      ASSERT_EQ(std::memcmp(d.data(), e.sent.data(), n * sizeof(float)), 0) << "sent differs from decoded";
    }

    // The wire form carries everything the receiver needs.
    wire::ChunkData chunk;
    e.info.ToWire(&chunk);
    const PayloadInfo back = PayloadInfo::FromWire(chunk);
    EXPECT_EQ(back.codec, e.info.codec);
    EXPECT_EQ(back.block, e.info.block);
    EXPECT_EQ(back.kept, e.info.kept);
    EXPECT_EQ(back.zstd, e.info.zstd);
    EXPECT_EQ(back.raw_bytes, e.info.raw_bytes);

    // DecodeAdd adds exactly the decoded values.
    std::vector<float> base = Gradient(n, 99), added = base;
    s = DecodeAdd(back, e.payload.data(), e.payload.size(), n, added.data(), &scratch);
    ASSERT_TRUE(s.ok()) << s;
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(added[i], base[i] + d[i]) << i;
  }
}

TEST_P(CodecConformance, ZstdStageIsUsedWhenItHelps) {
  if (!spec_.zstd_level) GTEST_SKIP() << "no zstd stage";
  // Small integers repeat: every codec's bytes compress.
  std::vector<float> x(20000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 4) + 1);
  Encoded e = Encode(x);
  EXPECT_TRUE(e.info.zstd);
  EXPECT_LT(e.payload.size(), e.info.raw_bytes);
  std::vector<float> d(x.size());
  std::vector<uint8_t> scratch;
  ASSERT_TRUE(Decode(e.info, e.payload.data(), e.payload.size(), x.size(), d.data(), &scratch).ok());
  EXPECT_EQ(d, e.sent);
}

TEST_P(CodecConformance, StochasticRoundingIsUnbiased) {
  // E[decode(encode(x))] = x for INT8 and INT4; for RANDK each value is
  // kept with probability k/n, so E = (k/n) x. Over T encodings (fresh
  // random draws each, one seed) each element's mean must lie within 5
  // standard errors of its expectation (plus float rounding), and the mean
  // error over all elements within 4 (for 64 elements, a correct codec
  // fails the first with probability ~4e-5 and the second ~6e-5; the seed
  // is fixed anyway, so the outcome is too).
  if (!Stochastic() && spec_.codec != wire::RANDK) GTEST_SKIP() << "deterministic codec";
  constexpr int kTrials = 4000;
  const uint64_t n = 64;
  std::vector<float> x = Gradient(n, 5);
  const double keep = spec_.codec == wire::RANDK
                          ? static_cast<double>(std::max<uint64_t>(1, std::ceil(spec_.fraction * n - 1e-9))) / n
                          : 1.0;
  Encoder enc(spec_, 2024);
  std::vector<double> sum(n, 0);
  std::vector<uint8_t> payload, scratch;
  std::vector<float> d(n);
  PayloadInfo info;
  for (int t = 0; t < kTrials; ++t) {
    ASSERT_TRUE(enc.Encode(x.data(), n, &payload, &info, nullptr).ok());
    ASSERT_TRUE(Decode(info, payload.data(), payload.size(), n, d.data(), &scratch).ok());
    for (uint64_t i = 0; i < n; ++i) {
      sum[i] += d[i];
    }
  }
  // The variance of one draw, from theory (an empirical one is 0 for a
  // value so close to a level that no draw in T moved it): stochastic
  // rounding at step s with fractional part f has s^2 f (1 - f); keeping
  // with probability p has p (1 - p) x^2.
  auto variance = [&](uint64_t i) {
    if (spec_.codec == wire::RANDK) return keep * (1 - keep) * x[i] * x[i];
    const uint64_t b = i / spec_.block * spec_.block, e = std::min<uint64_t>(n, b + spec_.block);
    double m = 0;
    for (uint64_t j = b; j < e; ++j) m = std::max(m, std::fabs(static_cast<double>(x[j])));
    // The encoder may nudge a scale up by an ulp or two so the largest
    // value does not clip; a level of the block's maximum is then random.
    const double s = m / (spec_.codec == wire::INT8 ? 127 : 7) * (1 + 0x1p-21), y = x[i] / s;
    const double f = y - std::floor(y);
    return s * s * f * (1 - f);
  };
  double total_err = 0, total_var = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const double mean = sum[i] / kTrials;
    const double var = variance(i);
    const double se = std::sqrt(var / kTrials);
    const double expect = keep * x[i];
    EXPECT_LE(std::fabs(mean - expect), 5 * se + 1e-6 * std::fabs(expect)) << "element " << i << " x=" << x[i];
    total_err += mean - expect;
    total_var += var / kTrials;
  }
  EXPECT_LE(std::fabs(total_err), 4 * std::sqrt(total_var)) << "mean error over all elements";
}

TEST_P(CodecConformance, ErrorFeedbackConservesMass) {
  // Over 50 steps, sum(sent) + residual == sum(inputs) per element, up to
  // float rounding: each step rounds corrected = g + r and r = corrected -
  // sent once, so the error is at most ~2 ulps of the largest corrected
  // value per step.
  constexpr int kSteps = 50;
  const uint64_t n = 1000;
  const uint32_t chunk = 3;
  Encoder enc(spec_, 11);
  ErrorFeedback ef;
  std::vector<double> inputs(n, 0), sent_sum(n, 0);
  std::vector<float> corrected(n), sent(n), residual(n);
  std::vector<uint8_t> payload;
  PayloadInfo info;
  float max_corrected = 0;
  for (int step = 0; step < kSteps; ++step) {
    const std::vector<float> g = Gradient(n, 1000 + step);
    ef.Correct(chunk, g.data(), n, corrected.data());
    ASSERT_TRUE(enc.Encode(corrected.data(), n, &payload, &info, sent.data()).ok());
    ef.Remember(chunk, corrected.data(), sent.data(), n);
    for (uint64_t i = 0; i < n; ++i) {
      inputs[i] += g[i];
      sent_sum[i] += sent[i];
      max_corrected = std::max(max_corrected, std::fabs(corrected[i]));
    }
  }
  const std::vector<float> zeros(n, 0.0f);
  ef.Correct(chunk, zeros.data(), n, residual.data());
  const double tol = 4.0 * kSteps * std::ldexp(static_cast<double>(max_corrected), -24);
  double norm = 0;
  for (uint64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(sent_sum[i] + residual[i], inputs[i], tol) << i;
    norm += static_cast<double>(residual[i]) * residual[i];
  }
  EXPECT_DOUBLE_EQ(ef.ResidualSquaredNorm(), norm);
  if (!spec_.lossy()) {
    EXPECT_EQ(norm, 0.0);
  }

  // Reset forgets the chunk: Correct passes the values through.
  ef.Reset(chunk);
  ef.Correct(chunk, zeros.data(), n, residual.data());
  EXPECT_EQ(residual, zeros);
  EXPECT_EQ(ef.ResidualSquaredNorm(), 0.0);
}

TEST_P(CodecConformance, EncodingIsReproducible) {
  const std::vector<float> x = Gradient(3000, 8);
  Encoded a = Encode(x, 42), b = Encode(x, 42), c = Encode(x, 43);
  EXPECT_EQ(a.payload, b.payload);
  if (Stochastic() || spec_.codec == wire::RANDK) {
    EXPECT_NE(a.payload, c.payload);
  }
}

TEST_P(CodecConformance, NonFiniteInputIsRefusedByTheEncoder) {
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    std::vector<float> x = Gradient(500, 3);
    x[17] = bad;
    if (spec_.codec == wire::RANDK) std::fill(x.begin(), x.end(), bad);  // so that a bad value is drawn
    Encoder enc(spec_, 1);
    std::vector<uint8_t> payload;
    PayloadInfo info;
    Status s = enc.Encode(x.data(), x.size(), &payload, &info, nullptr);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
  }
}

// Malformed payloads: each is refused with InvalidArgument or DataLoss, or
// (for bytes a codec cannot tell from valid ones) decodes to finite values;
// DecodeAdd leaves its output untouched when it refuses.
class Refusals : public CodecConformance {
 protected:
  void SetUp() override {
    CodecConformance::SetUp();
    x_ = Gradient(kN, 21);
    e_ = Encode(x_);
  }

  // Decode must fail (with `must_fail`) or give finite values; never crash.
  void Check(const PayloadInfo& info, const std::vector<uint8_t>& bytes, bool must_fail, const std::string& what) {
    SCOPED_TRACE(what);
    std::vector<float> out(kN, 0.0f);
    std::vector<uint8_t> scratch;
    Status s = Decode(info, bytes.data(), bytes.size(), kN, out.data(), &scratch);
    if (must_fail) {
      EXPECT_FALSE(s.ok());
    }
    if (!s.ok()) {
      EXPECT_TRUE(s.code() == Code::kInvalidArgument || s.code() == Code::kDataLoss) << s;
      EXPECT_FALSE(s.message().empty());
    } else {
      EXPECT_EQ(CountNonFinite(out.data(), kN), 0u);
    }
    std::vector<float> base = Gradient(kN, 5), add = base;
    Status a = DecodeAdd(info, bytes.data(), bytes.size(), kN, add.data(), &scratch);
    EXPECT_EQ(a.ok(), s.ok()) << a;
    if (!a.ok()) {
      EXPECT_EQ(add, base) << "DecodeAdd changed its output before refusing";
    }
  }

  static constexpr uint64_t kN = 1000;
  std::vector<float> x_;
  Encoded e_;
};

TEST_P(Refusals, TruncatedAndOversized) {
  std::vector<uint8_t> p = e_.payload;
  Check(e_.info, {}, true, "empty");
  Check(e_.info, std::vector<uint8_t>(p.begin(), p.end() - 1), true, "one byte short");
  Check(e_.info, std::vector<uint8_t>(p.begin(), p.begin() + p.size() / 2), true, "half");
  std::vector<uint8_t> longer = p;
  longer.push_back(0);
  Check(e_.info, longer, true, "one byte more");
  longer.resize(p.size() + 4096, 0x55);
  Check(e_.info, longer, true, "4 KiB more");
  if (e_.info.zstd) {
    PayloadInfo info = e_.info;
    info.raw_bytes += 1;
    Check(info, p, true, "raw_bytes one more");
    info.raw_bytes = e_.info.raw_bytes - 1;
    Check(info, p, true, "raw_bytes one less");
  }
}

TEST_P(Refusals, UnknownCodecIds) {
  for (int id : {0, 9, 77, -1, 1 << 20}) {
    PayloadInfo info = e_.info;
    info.codec = static_cast<wire::Codec>(id);
    Check(info, e_.payload, true, "codec id " + std::to_string(id));
    EXPECT_EQ(MaxEncodedBytes(info, kN), 0u);
  }
  // Another known codec on these bytes: refused unless the bytes happen to
  // be valid for it too (fp16 and bf16 have the same size), never a crash.
  for (int id = wire::FP32; id <= wire::RANDK; ++id) {
    PayloadInfo info = e_.info;
    info.codec = static_cast<wire::Codec>(id);
    if (info.block == 0) info.block = 256;
    if (info.kept == 0) info.kept = 10;
    Check(info, e_.payload, false, "as " + CodecName(info.codec));
  }
}

TEST_P(Refusals, WrongBlockAndKept) {
  if (HasBlock()) {
    for (uint32_t block : {0u, 1u, 7u, 65537u, 1u << 31}) {
      PayloadInfo info = e_.info;
      info.block = block;
      Check(info, e_.payload, true, "block " + std::to_string(block));
      EXPECT_EQ(MaxEncodedBytes(info, kN), 0u);
    }
    PayloadInfo info = e_.info;
    info.block = e_.info.block == 128 ? 256 : 128;
    Check(info, e_.payload, true, "another valid block");
  }
  if (spec_.sparse()) {
    for (uint64_t kept : {kN + 1, uint64_t{1} << 40, ~uint64_t{0}}) {
      PayloadInfo info = e_.info;
      info.kept = kept;
      Check(info, e_.payload, true, "kept " + std::to_string(kept));
      EXPECT_EQ(MaxEncodedBytes(info, kN), 0u);
    }
    for (uint64_t kept : {e_.info.kept + 1, e_.info.kept - 1, uint64_t{0}}) {
      PayloadInfo info = e_.info;
      info.kept = kept;
      Check(info, e_.payload, true, "kept " + std::to_string(kept) + " instead of " + std::to_string(e_.info.kept));
    }
  }
  PayloadInfo info = e_.info;
  Check(info, e_.payload, false, "the valid payload");
}

TEST_P(Refusals, GarbageAndBitFlipsNeverCrash) {
  std::mt19937_64 rng(77);
  const uint64_t raw = e_.info.zstd ? e_.info.raw_bytes : e_.payload.size();
  for (int t = 0; t < 20; ++t) {
    std::vector<uint8_t> junk(t % 2 ? raw : e_.payload.size());
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    Check(e_.info, junk, e_.info.zstd, "random bytes " + std::to_string(t));
  }
  // Every single-bit flip of a small payload.
  const std::vector<float> small = Gradient(40, 4);
  Encoded e = Encode(small);
  for (size_t bit = 0; bit < e.payload.size() * 8; ++bit) {
    std::vector<uint8_t> p = e.payload;
    p[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    std::vector<float> out(small.size());
    std::vector<uint8_t> scratch;
    Status s = Decode(e.info, p.data(), p.size(), small.size(), out.data(), &scratch);
    if (s.ok()) {
      ASSERT_EQ(CountNonFinite(out.data(), out.size()), 0u) << "bit " << bit;
    }
  }
  // Decoders refuse non-finite values and scales they are handed.
  if (!e_.info.zstd && spec_.codec != wire::TOPK && spec_.codec != wire::RANDK) {
    std::vector<uint8_t> p = e_.payload;
    const uint8_t ones[4] = {0xff, 0xff, 0xff, 0xff};  // NaN as float32, fp16 and bf16
    std::memcpy(p.data(), ones, 4);
    Check(e_.info, p, true, "a NaN value or scale first");
  }
  if (!e_.info.zstd && spec_.sparse()) {
    std::vector<uint8_t> p = e_.payload;
    const float inf = INFINITY;
    std::memcpy(p.data() + p.size() - 4, &inf, 4);
    Check(e_.info, p, true, "an infinite value");
  }
}

TEST_P(Refusals, ZstdBombsAndFramesWithoutContentSize) {
  const uint64_t raw = MaxEncodedBytes(e_.info, kN);
  // A frame that holds far more than the codec can produce.
  std::vector<uint8_t> big(8 << 20, 0), frame(ZSTD_compressBound(big.size()));
  frame.resize(ZSTD_compress(frame.data(), frame.size(), big.data(), big.size(), 1));
  PayloadInfo info = e_.info;
  info.zstd = true;
  info.raw_bytes = raw;
  Check(info, frame, true, "8 MiB frame, raw_bytes valid");
  info.raw_bytes = big.size();
  Check(info, frame, true, "8 MiB frame, raw_bytes says so");
  // A frame whose header does not record its content size (streaming).
  std::vector<uint8_t> raw_bytes(raw, 0);
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0);
  std::vector<uint8_t> unsized(ZSTD_compressBound(raw) + 64);
  ZSTD_outBuffer out{unsized.data(), unsized.size(), 0};
  ZSTD_inBuffer in{raw_bytes.data(), raw_bytes.size(), 0};
  ASSERT_EQ(ZSTD_compressStream2(cctx, &out, &in, ZSTD_e_end), 0u);
  ZSTD_freeCCtx(cctx);
  unsized.resize(out.pos);
  ASSERT_EQ(ZSTD_getFrameContentSize(unsized.data(), unsized.size()), ZSTD_CONTENTSIZE_UNKNOWN);
  info.raw_bytes = raw;
  Check(info, unsized, true, "no content size");
  // Two frames back to back, and garbage after a valid frame.
  std::vector<uint8_t> valid(ZSTD_compressBound(raw));
  valid.resize(ZSTD_compress(valid.data(), valid.size(), raw_bytes.data(), raw, 1));
  std::vector<uint8_t> two = valid;
  two.insert(two.end(), valid.begin(), valid.end());
  Check(info, two, true, "two frames");
  std::vector<uint8_t> tail = valid;
  tail.push_back(1);
  Check(info, tail, true, "a byte after the frame");
  // A corrupt frame body.
  std::vector<uint8_t> corrupt = valid;
  for (size_t i = 6; i < corrupt.size(); ++i) corrupt[i] ^= 0xa5;
  Check(info, corrupt, true, "corrupt frame");
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecConformance, testing::ValuesIn(AllSpecs()), TestName);
INSTANTIATE_TEST_SUITE_P(AllCodecs, Refusals, testing::ValuesIn(AllSpecs()), TestName);

}  // namespace
}  // namespace geodesic::compression
