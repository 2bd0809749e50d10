// INT8, INT4 and SIGN: per block of B values a float32 scale, then the
// block's levels. Each block is read twice while it is in L1 (its scale,
// then its levels), so a pass costs one trip through memory.
//
// Stochastic rounding draws element i's uniform from Hash32(i * a + b) with
// a per-call odd `a` and `b` (from the Encoder's generator), so draws do not
// depend on each other and the quantizing loop vectorizes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "compression/internal/bits.h"
#include "compression/internal/codecs.h"

namespace geodesic::compression::internal {
namespace {

constexpr uint64_t kNoError = ~uint64_t{0};

// What a decoding pass does: write and check, check only (before an add),
// or add only (after a check).
enum class Pass { kDecode, kCheck, kAdd };

struct Keys {
  uint32_t a, b;
};
Keys SplitKey(uint64_t key) { return {static_cast<uint32_t>(key) | 1u, static_cast<uint32_t>(key >> 32)}; }

// max |x| as bits (for finite floats, the order of |x| is the order of
// their bits as integers, and an integer max vectorizes without NaN rules).
[[gnu::always_inline]] inline uint32_t MaxAbsBits(const float* x, uint32_t len) {
  uint32_t m = 0;
  for (uint32_t j = 0; j < len; ++j) m = std::max(m, FloatBits(x[j]) & 0x7fffffffu);
  return m;
}

// The scale for a block of largest magnitude m > 0 and L levels each side:
// s = m / L, nudged so that m / s does not exceed L (no clipping, so the
// rounding stays unbiased) and L * s stays finite (so decoded values do).
float ScaleFor(float m, float levels) {
  float s = std::max(m / levels, std::numeric_limits<float>::denorm_min());
  for (int i = 0; i < 2 && s * levels < m; ++i) s = std::nextafter(s, std::numeric_limits<float>::infinity());
  while (!std::isfinite(s * levels)) s = std::nextafter(s, 0.0f);
  return s;
}

// A valid scale is finite and not negative, and L levels of it are finite.
bool ValidScale(float s, float levels) { return FloatBits(s) < 0x7f800000u && std::isfinite(s * levels); }

// Quantizes x[0, len) (element indices base + j) to levels in [-L, L] of
// scale s > 0; sent (optional) receives q * s.
template <int L, bool kSent>
[[gnu::always_inline]] inline void QuantizeSpan(const float* __restrict x, uint32_t len, float s, uint32_t base, Keys k,
                                                int8_t* __restrict q, float* __restrict sent) {
  for (uint32_t j = 0; j < len; ++j) {
    const float u = UnitFloat(Hash32((base + j) * k.a + k.b));
    const int32_t level = StochasticRound<L>(x[j] / s, u);
    q[j] = static_cast<int8_t>(level);
    if (kSent) sent[j] = static_cast<float>(level) * s;
  }
}

template <bool kSent>
[[gnu::always_inline]] inline uint64_t EncodeInt8Body(const float* __restrict x, uint64_t n, uint32_t block, Keys k,
                                                      uint8_t* __restrict out, float* __restrict sent) {
  uint64_t bad = 0;
  for (uint64_t start = 0; start < n; start += block) {
    const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(block, n - start));
    const uint32_t m = MaxAbsBits(x + start, len);
    int8_t* q = reinterpret_cast<int8_t*>(out + 4);
    float* sb = kSent ? sent + start : nullptr;
    if (m == 0 || NonFiniteBits(m)) {
      bad += m != 0;
      StoreF32(out, 0.0f);
      std::fill(q, q + len, int8_t{0});
      if (kSent) std::fill(sb, sb + len, 0.0f);
    } else {
      const float s = ScaleFor(BitsFloat(m), 127.0f);
      StoreF32(out, s);
      QuantizeSpan<127, kSent>(x + start, len, s, static_cast<uint32_t>(start), k, q, sb);
    }
    out += 4 + len;
  }
  return bad;
}

template <bool kSent>
[[gnu::always_inline]] inline uint64_t EncodeInt4Body(const float* __restrict x, uint64_t n, uint32_t block, Keys k,
                                                      uint8_t* __restrict out, float* __restrict sent) {
  constexpr uint32_t kSpan = 256;  // levels are staged in L1 this many at a time, then packed
  alignas(64) int8_t q[kSpan];
  uint64_t bad = 0;
  for (uint64_t start = 0; start < n; start += block) {
    const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(block, n - start));
    const uint32_t m = MaxAbsBits(x + start, len);
    uint8_t* o = out + 4;
    float* sb = kSent ? sent + start : nullptr;
    if (m == 0 || NonFiniteBits(m)) {
      bad += m != 0;
      StoreF32(out, 0.0f);
      std::fill(o, o + (len + 1) / 2, uint8_t{0});
      if (kSent) std::fill(sb, sb + len, 0.0f);
    } else {
      const float s = ScaleFor(BitsFloat(m), 7.0f);
      StoreF32(out, s);
      for (uint32_t off = 0; off < len; off += kSpan) {
        const uint32_t span = std::min(kSpan, len - off);
        QuantizeSpan<7, kSent>(x + start + off, span, s, static_cast<uint32_t>(start + off), k, q,
                               kSent ? sb + off : nullptr);
        uint8_t* ob = o + off / 2;
        for (uint32_t t = 0; t < span / 2; ++t)
          ob[t] = static_cast<uint8_t>((q[2 * t] & 0x0f) | (static_cast<uint8_t>(q[2 * t + 1]) << 4));
        if (span % 2) ob[span / 2] = static_cast<uint8_t>(q[span - 1] & 0x0f);
      }
    }
    out += 4 + (len + 1) / 2;
  }
  return bad;
}

template <bool kSent>
[[gnu::always_inline]] inline uint64_t EncodeSignBody(const float* __restrict x, uint64_t n, uint32_t block,
                                                      uint8_t* __restrict out, float* __restrict sent) {
  uint64_t bad = 0;
  for (uint64_t start = 0; start < n; start += block) {
    const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(block, n - start));
    const float* xb = x + start;
    // mean |x| in double (8 independent sums so the loop vectorizes); a
    // float sum could overflow for values near FLT_MAX.
    double acc[8] = {};
    uint32_t j = 0;
    for (; j + 8 <= len; j += 8)
      for (int l = 0; l < 8; ++l) acc[l] += std::fabs(static_cast<double>(xb[j + l]));
    for (; j < len; ++j) acc[0] += std::fabs(static_cast<double>(xb[j]));
    const double sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    float s = static_cast<float>(sum / len);
    if (!std::isfinite(s)) {
      ++bad;
      s = 0.0f;
    }
    StoreF32(out, s);
    uint8_t* o = out + 4;
    const uint32_t sbits = FloatBits(s);
    for (uint32_t t = 0; t < len / 8; ++t) {
      uint32_t byte = 0;
      for (uint32_t l = 0; l < 8; ++l) byte |= (FloatBits(xb[8 * t + l]) >> 31) << l;
      o[t] = static_cast<uint8_t>(byte);
    }
    if (len % 8) {
      uint32_t byte = 0;
      for (uint32_t l = 0; l < len % 8; ++l) byte |= (FloatBits(xb[len / 8 * 8 + l]) >> 31) << l;
      o[len / 8] = static_cast<uint8_t>(byte);
    }
    if (kSent)
      for (uint32_t i = 0; i < len; ++i) sent[start + i] = BitsFloat(sbits | (FloatBits(xb[i]) & 0x80000000u));
    out += 4 + (len + 7) / 8;
  }
  return bad;
}

GD_TARGET_CLONES uint64_t EncodeInt8Loop(const float* x, uint64_t n, uint32_t block, Keys k, uint8_t* out,
                                         float* sent) {
  return sent ? EncodeInt8Body<true>(x, n, block, k, out, sent) : EncodeInt8Body<false>(x, n, block, k, out, nullptr);
}
GD_TARGET_CLONES uint64_t EncodeInt4Loop(const float* x, uint64_t n, uint32_t block, Keys k, uint8_t* out,
                                         float* sent) {
  return sent ? EncodeInt4Body<true>(x, n, block, k, out, sent) : EncodeInt4Body<false>(x, n, block, k, out, nullptr);
}
GD_TARGET_CLONES uint64_t EncodeSignLoop(const float* x, uint64_t n, uint32_t block, uint8_t* out, float* sent) {
  return sent ? EncodeSignBody<true>(x, n, block, out, sent) : EncodeSignBody<false>(x, n, block, out, nullptr);
}

// Decoding passes return the index of the first bad block, or kNoError.

// The three passes of a block codec's body as separately compiled (and
// separately cloned) entry points: decode, check only, and decode-and-add.
#define GD_BLOCK_PASSES(Name)                                                                        \
  GD_TARGET_CLONES uint64_t Name##Decode(const uint8_t* p, uint64_t n, uint32_t block, float* out) { \
    return Name##Body<Pass::kDecode>(p, n, block, out);                                              \
  }                                                                                                  \
  GD_TARGET_CLONES uint64_t Name##Check(const uint8_t* p, uint64_t n, uint32_t block) {              \
    return Name##Body<Pass::kCheck>(p, n, block, nullptr);                                           \
  }                                                                                                  \
  GD_TARGET_CLONES uint64_t Name##Add(const uint8_t* p, uint64_t n, uint32_t block, float* out) {    \
    return Name##Body<Pass::kAdd>(p, n, block, out);                                                 \
  }

template <Pass P>
[[gnu::always_inline]] inline uint64_t Int8Body(const uint8_t* __restrict p, uint64_t n, uint32_t block,
                                                float* __restrict out) {
  for (uint64_t start = 0, b = 0; start < n; start += block, ++b) {
    const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(block, n - start));
    const float s = LoadF32(p);
    const int8_t* q = reinterpret_cast<const int8_t*>(p + 4);
    float* o = P == Pass::kCheck ? nullptr : out + start;
    if (P != Pass::kAdd && !ValidScale(s, 127.0f)) return b;
    uint32_t bad = 0;
    for (uint32_t j = 0; j < len; ++j) {
      if (P == Pass::kDecode) o[j] = static_cast<float>(q[j]) * s;
      if (P == Pass::kAdd) o[j] += static_cast<float>(q[j]) * s;
      if (P != Pass::kAdd) bad |= q[j] == -128;
    }
    if (bad) return b;
    p += 4 + len;
  }
  return kNoError;
}
GD_BLOCK_PASSES(Int8)

template <Pass P>
[[gnu::always_inline]] inline uint64_t Int4Body(const uint8_t* __restrict p, uint64_t n, uint32_t block,
                                                float* __restrict out) {
  for (uint64_t start = 0, b = 0; start < n; start += block, ++b) {
    const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(block, n - start));
    const float s = LoadF32(p);
    const uint8_t* q = p + 4;
    float* o = P == Pass::kCheck ? nullptr : out + start;
    if (P != Pass::kAdd && !ValidScale(s, 7.0f)) return b;
    uint32_t bad = 0;
    for (uint32_t t = 0; t < len / 2; ++t) {
      const uint8_t v = q[t];
      const float lo = static_cast<float>(static_cast<int8_t>(v << 4) >> 4) * s;
      const float hi = static_cast<float>(static_cast<int8_t>(v) >> 4) * s;
      if (P == Pass::kDecode) {
        o[2 * t] = lo;
        o[2 * t + 1] = hi;
      }
      if (P == Pass::kAdd) {
        o[2 * t] += lo;
        o[2 * t + 1] += hi;
      }
      if (P != Pass::kAdd) bad |= ((v & 0x0fu) == 8u) | ((v >> 4) == 8u);
    }
    if (len % 2) {
      const uint8_t v = q[len / 2];
      const float lo = static_cast<float>(static_cast<int8_t>(v << 4) >> 4) * s;
      if (P == Pass::kDecode) o[len - 1] = lo;
      if (P == Pass::kAdd) o[len - 1] += lo;
      if (P != Pass::kAdd) bad |= ((v & 0x0fu) == 8u) | ((v >> 4) != 0u);  // the padding nibble is zero
    }
    if (bad) return b;
    p += 4 + (len + 1) / 2;
  }
  return kNoError;
}
GD_BLOCK_PASSES(Int4)

template <Pass P>
[[gnu::always_inline]] inline uint64_t SignBody(const uint8_t* __restrict p, uint64_t n, uint32_t block,
                                                float* __restrict out) {
  for (uint64_t start = 0, b = 0; start < n; start += block, ++b) {
    const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(block, n - start));
    const float s = LoadF32(p);
    const uint8_t* bits = p + 4;
    float* o = P == Pass::kCheck ? nullptr : out + start;
    if (P != Pass::kAdd && !ValidScale(s, 1.0f)) return b;
    if (len % 8 && (bits[len / 8] >> (len % 8)) != 0) return b;  // padding bits are zero
    if (P == Pass::kCheck) {
      p += 4 + (len + 7) / 8;
      continue;
    }
    const uint32_t sbits = FloatBits(s);
    for (uint32_t t = 0; t < len / 8; ++t) {
      const uint32_t v = bits[t];
      for (uint32_t l = 0; l < 8; ++l) {
        const float d = BitsFloat(sbits | (((v >> l) & 1u) << 31));
        if (P == Pass::kDecode) o[8 * t + l] = d;
        if (P == Pass::kAdd) o[8 * t + l] += d;
      }
    }
    for (uint32_t i = len / 8 * 8; i < len; ++i) {
      const float d = BitsFloat(sbits | (((bits[i / 8] >> (i % 8)) & 1u) << 31));
      if (P == Pass::kDecode) o[i] = d;
      if (P == Pass::kAdd) o[i] += d;
    }
    p += 4 + (len + 7) / 8;
  }
  return kNoError;
}
GD_TARGET_CLONES uint64_t SignDecode(const uint8_t* p, uint64_t n, uint32_t block, float* out) {
  return SignBody<Pass::kDecode>(p, n, block, out);
}
uint64_t SignCheck(const uint8_t* p, uint64_t n, uint32_t block) {
  return SignBody<Pass::kCheck>(p, n, block, nullptr);
}
GD_TARGET_CLONES uint64_t SignAdd(const uint8_t* p, uint64_t n, uint32_t block, float* out) {
  return SignBody<Pass::kAdd>(p, n, block, out);
}

uint64_t BlockBytes(uint64_t n, uint32_t block, uint64_t (*bytes_for)(uint64_t)) {
  const uint64_t full = n / block, last = n % block;
  return full * (4 + bytes_for(block)) + (last ? 4 + bytes_for(last) : 0);
}

Status BadBlock(const char* codec, const uint8_t* p, uint64_t n, uint32_t block, uint64_t b,
                uint64_t (*bytes_for)(uint64_t), float levels, const char* level_rule) {
  const uint64_t first = b * block, last = std::min(n, first + block) - 1;
  const float s = LoadF32(p + b * (4 + bytes_for(block)));
  const bool bad_scale = !ValidScale(s, levels);
  std::string what = bad_scale ? "an invalid scale " + std::to_string(s) + " (must be finite, >= 0)"
                               : std::string("a level outside ") + level_rule;
  return InvalidArgument(std::string(codec) + " payload: block " + std::to_string(b) + " (values " +
                         std::to_string(first) + ".." + std::to_string(last) + ") has " + what)
      .WithDetail(bad_scale ? Detail::kNonFinite : Detail::kNone);
}

uint64_t Int8LevelBytes(uint64_t len) { return len; }
uint64_t Int4LevelBytes(uint64_t len) { return (len + 1) / 2; }
uint64_t SignLevelBytes(uint64_t len) { return (len + 7) / 8; }

}  // namespace

uint64_t Int8Bytes(uint64_t n, uint32_t block) { return BlockBytes(n, block, Int8LevelBytes); }
uint64_t Int4Bytes(uint64_t n, uint32_t block) { return BlockBytes(n, block, Int4LevelBytes); }
uint64_t SignBytes(uint64_t n, uint32_t block) { return BlockBytes(n, block, SignLevelBytes); }

uint64_t EncodeInt8(const float* x, uint64_t n, uint32_t block, uint64_t key, uint8_t* out, float* sent) {
  return EncodeInt8Loop(x, n, block, SplitKey(key), out, sent);
}
uint64_t EncodeInt4(const float* x, uint64_t n, uint32_t block, uint64_t key, uint8_t* out, float* sent) {
  return EncodeInt4Loop(x, n, block, SplitKey(key), out, sent);
}
uint64_t EncodeSign(const float* x, uint64_t n, uint32_t block, uint8_t* out, float* sent) {
  return EncodeSignLoop(x, n, block, out, sent);
}

Status DecodeInt8(const uint8_t* p, uint64_t n, uint32_t block, float* out, bool add) {
  uint64_t b = add ? Int8Check(p, n, block) : Int8Decode(p, n, block, out);
  if (b != kNoError) return BadBlock("int8", p, n, block, b, Int8LevelBytes, 127.0f, "[-127, 127]");
  if (add) (void)Int8Add(p, n, block, out);
  return Status::Ok();
}

Status DecodeInt4(const uint8_t* p, uint64_t n, uint32_t block, float* out, bool add) {
  uint64_t b = add ? Int4Check(p, n, block) : Int4Decode(p, n, block, out);
  if (b != kNoError)
    return BadBlock("int4", p, n, block, b, Int4LevelBytes, 7.0f, "[-7, 7] or a non-zero padding nibble");
  if (add) (void)Int4Add(p, n, block, out);
  return Status::Ok();
}

Status DecodeSign(const uint8_t* p, uint64_t n, uint32_t block, float* out, bool add) {
  uint64_t b = add ? SignCheck(p, n, block) : SignDecode(p, n, block, out);
  if (b != kNoError) return BadBlock("sign", p, n, block, b, SignLevelBytes, 1.0f, "the block (non-zero padding bits)");
  if (add) (void)SignAdd(p, n, block, out);
  return Status::Ok();
}

}  // namespace geodesic::compression::internal
