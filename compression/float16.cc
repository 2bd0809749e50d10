// FP32, FP16 and BF16: one element in, one element out, so every loop is a
// straight vectorizable map plus a branch-free count of non-finite values.
// Payload bytes are read and written through memcpy (LoadU16 and friends):
// frames need not be aligned, and the compiler turns these into plain
// unaligned vector loads.
#include <algorithm>
#include <cstring>
#include <string>

#if defined(__x86_64__) && !defined(GEODESIC_NO_TARGET_CLONES)
#include <cpuid.h>
#include <immintrin.h>
#define GD_HAVE_F16C_PATH 1
#endif

#include "compression/internal/bits.h"
#include "compression/internal/codecs.h"

namespace geodesic::compression::internal {
namespace {

template <typename F>
uint64_t FirstBad(uint64_t n, F bad) {
  for (uint64_t i = 0; i < n; ++i)
    if (bad(i)) return i;
  return n;
}

Status NonFiniteError(const char* codec, uint64_t count, uint64_t first) {
  return InvalidArgument(std::string(codec) + " payload holds " + std::to_string(count) +
                         " non-finite value(s), the first at index " + std::to_string(first))
      .WithDetail(Detail::kNonFinite);
}

// One loop body per 16-bit format and per value of "is `sent` wanted", so
// that each is straight; the conversions inline.
template <bool kSent, uint16_t (*kTo16)(float), float (*kFrom16)(uint16_t), bool (*kNonFinite)(uint16_t)>
[[gnu::always_inline]] inline uint64_t Encode16Body(const float* __restrict x, uint64_t n, uint8_t* __restrict out,
                                                    float* __restrict sent) {
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const uint16_t h = kTo16(x[i]);
    StoreU16(out + 2 * i, h);
    bad += kNonFinite(h);
    if (kSent) sent[i] = kFrom16(h);
  }
  return bad;
}
template <bool kSent>
[[gnu::always_inline]] inline uint64_t EncodeFp16Body(const float* __restrict x, uint64_t n, uint8_t* __restrict out,
                                                      float* __restrict sent) {
  return Encode16Body<kSent, FloatToHalf, HalfToFloat, NonFiniteHalf>(x, n, out, sent);
}
GD_TARGET_CLONES uint64_t EncodeFp16Loop(const float* x, uint64_t n, uint8_t* out, float* sent) {
  return sent ? EncodeFp16Body<true>(x, n, out, sent) : EncodeFp16Body<false>(x, n, out, nullptr);
}

#ifdef GD_HAVE_F16C_PATH
// The F16C instructions convert 8 values at once with the same rounding
// (to nearest even, overflow to Inf, subnormal halves exact); the bitwise
// version above needs ~30 vector operations for the same, which made fp16
// encoding compute-bound. Results are bit-identical for every non-NaN
// input (codec_test checks), and NaN inputs are refused either way.
template <bool kSent>
__attribute__((target("avx2,f16c"))) uint64_t EncodeFp16F16c(const float* __restrict x, uint64_t n,
                                                             uint8_t* __restrict out, float* __restrict sent) {
  const __m128i exp_mask = _mm_set1_epi16(0x7c00);
  __m128i bad = _mm_setzero_si128();  // per lane: -1 per non-finite half (16-bit counters, flushed below)
  uint64_t total = 0;
  uint64_t i = 0;
  while (i + 8 <= n) {
    const uint64_t end = std::min(n & ~uint64_t{7}, i + 8 * 32000);  // flush before a 16-bit lane can wrap
    for (; i < end; i += 8) {
      const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
      bad = _mm_add_epi16(bad, _mm_cmpeq_epi16(_mm_and_si128(h, exp_mask), exp_mask));
      if (kSent) _mm256_storeu_ps(sent + i, _mm256_cvtph_ps(h));
    }
    alignas(16) int16_t lanes[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(lanes), bad);
    for (int16_t l : lanes) total += static_cast<uint64_t>(-l);
    bad = _mm_setzero_si128();
  }
  return total + EncodeFp16Body<kSent>(x + i, n - i, out + 2 * i, kSent ? sent + i : nullptr);
}

bool HaveF16c() {
  static const bool have = [] {
    unsigned a, b, c, d;  // __builtin_cpu_supports knows no "f16c" in clang 14; avx2 implies OS support for ymm
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
  }();
  return have;
}
#endif

GD_TARGET_CLONES uint64_t EncodeBf16Loop(const float* x, uint64_t n, uint8_t* out, float* sent) {
  return sent ? Encode16Body<true, FloatToBf16, Bf16ToFloat, NonFiniteBf16>(x, n, out, sent)
              : Encode16Body<false, FloatToBf16, Bf16ToFloat, NonFiniteBf16>(x, n, out, nullptr);
}

GD_TARGET_CLONES uint64_t EncodeFp32Loop(const float* __restrict x, uint64_t n, uint8_t* __restrict out) {
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; ++i) {
    StoreF32(out + 4 * i, x[i]);
    bad += NonFiniteBits(FloatBits(x[i]));
  }
  return bad;
}

// Decoding: out = decoded with a count of non-finite values, or a count
// alone (the check before an add), or out += decoded (after the check).
GD_TARGET_CLONES uint64_t CountBadFp32(const uint8_t* __restrict in, uint64_t n) {
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; ++i) bad += NonFiniteBits(FloatBits(LoadF32(in + 4 * i)));
  return bad;
}
GD_TARGET_CLONES uint64_t DecodeFp32Loop(const uint8_t* __restrict in, uint64_t n, float* __restrict out) {
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const float v = LoadF32(in + 4 * i);
    out[i] = v;
    bad += NonFiniteBits(FloatBits(v));
  }
  return bad;
}
GD_TARGET_CLONES void AddFp32Loop(const uint8_t* __restrict in, uint64_t n, float* __restrict out) {
  for (uint64_t i = 0; i < n; ++i) out[i] += LoadF32(in + 4 * i);
}

// The fp16 and bf16 loops differ only in the conversion; the bodies are
// inlined into each multiversioned entry point below.
using HalfToFloatFn = float (*)(uint16_t);
using HalfBadFn = bool (*)(uint16_t);
template <HalfToFloatFn kToFloat, HalfBadFn kBad>
[[gnu::always_inline]] inline uint64_t DecodeHalfBody(const uint8_t* __restrict in, uint64_t n, float* __restrict out) {
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const uint16_t h = LoadU16(in + 2 * i);
    out[i] = kToFloat(h);
    bad += kBad(h);
  }
  return bad;
}
template <HalfBadFn kBad>
[[gnu::always_inline]] inline uint64_t CountBadHalfBody(const uint8_t* __restrict in, uint64_t n) {
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; ++i) bad += kBad(LoadU16(in + 2 * i));
  return bad;
}
template <HalfToFloatFn kToFloat>
[[gnu::always_inline]] inline void AddHalfBody(const uint8_t* __restrict in, uint64_t n, float* __restrict out) {
  for (uint64_t i = 0; i < n; ++i) out[i] += kToFloat(LoadU16(in + 2 * i));
}

GD_TARGET_CLONES uint64_t DecodeFp16Loop(const uint8_t* in, uint64_t n, float* out) {
  return DecodeHalfBody<HalfToFloat, NonFiniteHalf>(in, n, out);
}
GD_TARGET_CLONES uint64_t CountBadFp16(const uint8_t* in, uint64_t n) { return CountBadHalfBody<NonFiniteHalf>(in, n); }
GD_TARGET_CLONES void AddFp16Loop(const uint8_t* in, uint64_t n, float* out) { AddHalfBody<HalfToFloat>(in, n, out); }
GD_TARGET_CLONES uint64_t DecodeBf16Loop(const uint8_t* in, uint64_t n, float* out) {
  return DecodeHalfBody<Bf16ToFloat, NonFiniteBf16>(in, n, out);
}
GD_TARGET_CLONES uint64_t CountBadBf16(const uint8_t* in, uint64_t n) { return CountBadHalfBody<NonFiniteBf16>(in, n); }
GD_TARGET_CLONES void AddBf16Loop(const uint8_t* in, uint64_t n, float* out) { AddHalfBody<Bf16ToFloat>(in, n, out); }

}  // namespace

uint64_t EncodeFp32(const float* x, uint64_t n, uint8_t* out, float* sent) {
  const uint64_t bad = EncodeFp32Loop(x, n, out);
  if (sent) std::memcpy(sent, x, n * sizeof(float));
  return bad;
}

uint64_t EncodeFp16(const float* x, uint64_t n, uint8_t* out, float* sent) {
#ifdef GD_HAVE_F16C_PATH
  if (HaveF16c()) return sent ? EncodeFp16F16c<true>(x, n, out, sent) : EncodeFp16F16c<false>(x, n, out, nullptr);
#endif
  return EncodeFp16Loop(x, n, out, sent);
}

uint64_t EncodeBf16(const float* x, uint64_t n, uint8_t* out, float* sent) { return EncodeBf16Loop(x, n, out, sent); }

Status DecodeFp32(const uint8_t* p, uint64_t n, float* out, bool add) {
  uint64_t bad = add ? CountBadFp32(p, n) : DecodeFp32Loop(p, n, out);
  if (bad)
    return NonFiniteError("fp32", bad,
                          FirstBad(n, [&](uint64_t i) { return NonFiniteBits(FloatBits(LoadF32(p + 4 * i))); }));
  if (add) AddFp32Loop(p, n, out);
  return Status::Ok();
}

Status DecodeFp16(const uint8_t* p, uint64_t n, float* out, bool add) {
  uint64_t bad = add ? CountBadFp16(p, n) : DecodeFp16Loop(p, n, out);
  if (bad)
    return NonFiniteError("fp16", bad, FirstBad(n, [&](uint64_t i) { return NonFiniteHalf(LoadU16(p + 2 * i)); }));
  if (add) AddFp16Loop(p, n, out);
  return Status::Ok();
}

Status DecodeBf16(const uint8_t* p, uint64_t n, float* out, bool add) {
  uint64_t bad = add ? CountBadBf16(p, n) : DecodeBf16Loop(p, n, out);
  if (bad)
    return NonFiniteError("bf16", bad, FirstBad(n, [&](uint64_t i) { return NonFiniteBf16(LoadU16(p + 2 * i)); }));
  if (add) AddBf16Loop(p, n, out);
  return Status::Ok();
}

}  // namespace geodesic::compression::internal
