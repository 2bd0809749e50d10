// Bit-level helpers shared by the codecs: little-endian loads and stores,
// the float16/bfloat16 conversions, the counter-based hash behind stochastic
// rounding, and LEB128 varints. Everything here is branch-free where it sits
// in a hot loop, so that the loops calling it vectorize.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

// Hot loops are compiled twice, for AVX2 and for the x86-64 baseline, and the
// loader picks one (a portable binary that still uses wide vectors). AVX2
// does not imply FMA, so both versions round every operation alike and give
// bit-identical results. Not under ThreadSanitizer: it instruments the
// resolver, which the loader runs before TSan's runtime is up (a crash at
// start).
#if defined(__x86_64__) && !defined(GEODESIC_NO_TARGET_CLONES) && !defined(__SANITIZE_THREAD__)
#define GD_TARGET_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define GD_TARGET_CLONES
#endif

namespace geodesic::compression::internal {

static_assert(std::endian::native == std::endian::little, "the payload layouts are little-endian");

inline uint32_t FloatBits(float f) { return std::bit_cast<uint32_t>(f); }
inline float BitsFloat(uint32_t u) { return std::bit_cast<float>(u); }

inline float LoadF32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void StoreF32(uint8_t* p, float v) { std::memcpy(p, &v, sizeof v); }
inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void StoreU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, sizeof v); }

// True for NaN and +-Inf, from the bits.
inline bool NonFiniteBits(uint32_t bits) { return (bits & 0x7f800000u) == 0x7f800000u; }

// c ? a : b without a branch (compilers turn a plain ?: over values that
// need floating-point work into control flow, which blocks vectorization).
inline uint32_t Select(bool c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return (a & m) | (b & ~m);
}

// float32 -> IEEE binary16, round to nearest even; overflow gives +-Inf,
// NaN stays NaN (quiet), subnormal halves are rounded correctly. Branch-free
// (after F. Giesen, "float_to_half_fast3_rtne").
inline uint16_t FloatToHalf(float f) {
  uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  // Normal halves: rebias the exponent and round the 13 dropped bits.
  const uint32_t odd = (x >> 13) & 1u;
  const uint32_t normal = (x + 0xc8000fffu + odd) >> 13;  // 0xc8000000 = (15 - 127) << 23
  // Subnormal halves (|f| < 2^-14): adding 0.5 makes the float adder round
  // at the half's subnormal spacing, 2^-24.
  const uint32_t sub = FloatBits(BitsFloat(x) + 0.5f) - 0x3f000000u;
  const uint32_t special = x > 0x7f800000u ? 0x7e00u : 0x7c00u;  // NaN : overflow or Inf
  const uint32_t o = Select(x >= (143u << 23), special, Select(x < (113u << 23), sub, normal));
  return static_cast<uint16_t>(o | sign);
}

// IEEE binary16 -> float32, exact (every half is a float).
inline float HalfToFloat(uint16_t h) {
  const uint32_t mag = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exp = mag & (0x1fu << 23);
  const uint32_t normal = mag + (112u << 23);                                // rebias 15 -> 127
  const uint32_t special = mag + (224u << 23);                               // Inf and NaN: exponent 255
  const uint32_t sub = FloatBits(BitsFloat(mag + (113u << 23)) - 0x1p-14f);  // m * 2^-24, exact
  const uint32_t o = Select(exp == 0, sub, Select(exp == (0x1fu << 23), special, normal));
  return BitsFloat(o | (static_cast<uint32_t>(h & 0x8000u) << 16));
}
inline bool NonFiniteHalf(uint16_t h) { return (h & 0x7c00u) == 0x7c00u; }

// float32 -> bfloat16, round to nearest even; NaN stays NaN (quiet).
inline uint16_t FloatToBf16(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x40u;
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}
inline float Bf16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }
inline bool NonFiniteBf16(uint16_t h) { return (h & 0x7f80u) == 0x7f80u; }

// splitmix64: seeds and per-call keys.
inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// 32-bit integer hash (C. Wellons' "lowbias32"): the random bits of element
// i are Hash32(i * a + b) for per-call odd a and b, so any element's draw is
// computed independently and the loop vectorizes.
inline uint32_t Hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// A uniform float in [0, 1) with 24 random bits.
inline float UnitFloat(uint32_t h) { return static_cast<float>(static_cast<int32_t>(h >> 8)) * 0x1p-24f; }

// Rounds y (|y| <= L, up to a rounding error) stochastically to an integer
// in [-L, L]: floor(y) or floor(y) + 1 with E[q] = y. Branch-free: t is y
// truncated toward zero, f = y - t is exact, and the draw u moves t one
// step away from zero with probability |f|.
template <int L>
inline int32_t StochasticRound(float y, float u) {
  const int32_t t = static_cast<int32_t>(y);
  const float f = y - static_cast<float>(t);
  int32_t q = t + static_cast<int32_t>(u < f) - static_cast<int32_t>(u < -f);
  q = q > L ? L : q;
  return q < -L ? -L : q;
}

// LEB128: 7 bits per byte, low bits first, high bit set on all but the last.
inline uint32_t VarintLength(uint64_t v) { return v < 128 ? 1 : (static_cast<uint32_t>(std::bit_width(v)) + 6) / 7; }
inline uint8_t* PutVarint(uint8_t* p, uint64_t v) {
  while (v >= 128) {
    *p++ = static_cast<uint8_t>(v | 0x80u);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}

}  // namespace geodesic::compression::internal
