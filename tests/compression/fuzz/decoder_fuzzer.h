// The libFuzzer harness shared by the per-codec targets (fuzz_<codec>.cc):
// each target fixes the codec id, the input supplies everything else.
//
// Input: a 12-byte header, then the payload (so the payload is usually not
// aligned, and ends exactly where libFuzzer's buffer ends: ASan catches any
// read past it).
//   byte 0      flags: 1 = zstd stage, 2 = round trip instead of decode,
//               4 = take n from the payload size (dense codecs)
//   bytes 1-2   block          bytes 3-4   n (mod 4097)   bytes 5-6   kept
//   bytes 7-10  raw_bytes (round trip: the encoder's seed)
//   byte 11     round trip: share of values sent, byte / 255 (0 -> 1/255)
//
// Decode mode: Decode and DecodeAdd of the payload must agree on success;
// a success gives finite values and DecodeAdd adds exactly them; a refusal
// is InvalidArgument or DataLoss and leaves DecodeAdd's output untouched.
// Round-trip mode: the payload's bytes as floats (non-finite ones zeroed,
// clamped to fp16's range) must encode, and decode to exactly `sent`.
// Any violation aborts, which libFuzzer reports as a crash.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "compression/codec.h"

namespace geodesic::compression::fuzz {

constexpr size_t kHeader = 12;
constexpr uint8_t kZstd = 1, kRoundTrip = 2, kSizedN = 4;

[[noreturn]] inline void Fail(const char* what, const Status& s = Status::Ok()) {
  std::fprintf(stderr, "fuzz invariant violated: %s (%s)\n", what, s.ToString().c_str());
  std::abort();
}

template <typename T>
T Read(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The n for which a dense payload of `len` bytes has the right size, or the
// header's n when there is none.
inline uint64_t SizedN(const PayloadInfo& info, uint64_t len, uint64_t fallback) {
  uint64_t lo = 1, hi = 8 * len + 8;  // dense sizes grow with n: find the first n with size >= len
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (MaxEncodedBytes(info, mid) < len)
      lo = mid + 1;
    else
      hi = mid;
  }
  return MaxEncodedBytes(info, lo) == len ? lo : fallback;
}

inline void RoundTrip(wire::Codec codec, const uint8_t* header, const uint8_t* payload, size_t len) {
  const uint64_t n = len / 4;
  std::vector<float> x(n);
  for (uint64_t i = 0; i < n; ++i) {
    float v = Read<float>(payload + 4 * i);
    if (!std::isfinite(v)) v = 0;
    x[i] = std::clamp(v, -65504.0f, 65504.0f);
  }
  CodecSpec spec;
  spec.codec = codec;
  spec.block = 8 + Read<uint16_t>(header + 1) % 1024;
  spec.fraction = std::max<int>(header[11], 1) / 255.0;
  spec.zstd_level = (header[0] & kZstd) ? 1 : 0;
  Encoder encoder(spec, Read<uint32_t>(header + 7));
  std::vector<uint8_t> bytes, scratch;
  PayloadInfo info;
  std::vector<float> sent(n), out(n);
  Status s = encoder.Encode(x.data(), n, &bytes, &info, sent.data());
  if (!s.ok()) Fail("encoding finite input failed", s);
  s = CheckPayloadSize(info, n, bytes.size());
  if (!s.ok()) Fail("an encoded payload fails CheckPayloadSize", s);
  s = Decode(info, bytes.data(), bytes.size(), n, out.data(), &scratch);
  if (!s.ok()) Fail("an encoded payload does not decode", s);
  if (n && std::memcmp(out.data(), sent.data(), n * sizeof(float)) != 0) Fail("decoded values differ from sent");
}

inline int FuzzDecoder(wire::Codec codec, const uint8_t* data, size_t size) {
  if (size < kHeader) return 0;
  const uint8_t* payload = data + kHeader;
  const size_t len = size - kHeader;
  if (data[0] & kRoundTrip) {
    RoundTrip(codec, data, payload, len);
    return 0;
  }
  PayloadInfo info;
  info.codec = codec;
  info.block = Read<uint16_t>(data + 1);
  info.kept = Read<uint16_t>(data + 5);
  info.zstd = data[0] & kZstd;
  info.raw_bytes = Read<uint32_t>(data + 7);
  uint64_t n = Read<uint16_t>(data + 3) % 4097;  // small buffers keep executions fast
  if ((data[0] & kSizedN) && !info.zstd) n = SizedN(info, len, n);

  std::vector<float> out(n, -3.0f), base(n, 1.0f), added = base;
  std::vector<uint8_t> scratch;
  const Status s = Decode(info, payload, len, n, out.data(), &scratch);
  const Status a = DecodeAdd(info, payload, len, n, added.data(), &scratch);
  if (s.ok() != a.ok()) Fail("Decode and DecodeAdd disagree", s.ok() ? a : s);
  if (!s.ok()) {
    if (s.code() != Code::kInvalidArgument && s.code() != Code::kDataLoss) Fail("unexpected error code", s);
    if (s.message().empty()) Fail("an error without a message");
    if (added != base) Fail("DecodeAdd changed its output before refusing", a);
    return 0;
  }
  if (CountNonFinite(out.data(), n)) Fail("decoded a non-finite value");
  for (uint64_t i = 0; i < n; ++i)
    if (added[i] != 1.0f + out[i]) Fail("DecodeAdd added something else than Decode decoded");
  return 0;
}

}  // namespace geodesic::compression::fuzz
