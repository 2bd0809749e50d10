// Payload codecs: how a span of float32 values becomes the bytes of one
// payload frame and back, and the error feedback that makes lossy codecs
// converge.
//
// A codec is named in a job file as "<codec>[:params][+zstd[:level]]":
//   fp32 | fp16 | bf16 | int8[:block=N] | int4[:block=N] | sign[:block=N]
//   | topk:F | randk:F        (F = share of values sent, 0 < F <= 1)
// e.g. "int8:block=128+zstd:3", "topk:0.01+zstd". What a receiver needs to
// decode (codec id, block, kept count, zstd stage and raw size) travels in
// the message header (wire::ChunkData), never inside the payload.
//
// Payload layouts, little-endian, before the optional zstd stage, for n
// values (bytes per value in brackets):
//   FP32   n float32                                          [4]
//   FP16   n IEEE binary16, round to nearest even             [2]
//   BF16   n bfloat16, round to nearest even                  [2]
//   INT8   per block of B: float32 scale s = max|x| / 127, then B int8
//          q with x ~ q * s, rounded stochastically (unbiased) [1 + 4/B]
//   INT4   per block: float32 scale s = max|x| / 7, then B 4-bit two's
//          complement q in [-7, 7], low nibble first, stochastic   [0.5 + 4/B]
//   SIGN   per block: float32 scale s = mean|x|, then B bits (1 = negative),
//          least significant bit first; decodes to +-s           [1/8 + 4/B]
//   TOPK   k = kept values of largest |x|: k indices ascending as LEB128
//          varints of the gap to the previous index (the first from 0),
//          then k float32 values                         [(4 + ~1-3) * k/n]
//   RANDK  as TOPK, the k indices chosen uniformly at random
// The last block may be short. Scales and values are finite.
//
// Threading: Encoder and ErrorFeedback are not synchronized (one per
// sending thread); the free functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "proto/geodesic.pb.h"

namespace geodesic::compression {

struct CodecSpec {
  wire::Codec codec = wire::FP32;
  uint32_t block = 256;    // INT8, INT4, SIGN: values per scale, in [8, 65536]
  double fraction = 0.01;  // TOPK, RANDK: share of values sent, in (0, 1]
  int zstd_level = 0;      // 0: no zstd stage; otherwise 1..19

  bool lossy() const { return codec != wire::FP32; }
  bool sparse() const { return codec == wire::TOPK || codec == wire::RANDK; }
  // The canonical name; ParseCodecSpec(Name()) gives this spec back.
  std::string Name() const;
};

// Parses a codec name; InvalidArgument naming the problem and the known
// codecs for anything else ("int3", "topk:0", "int8:block=3", "fp16+lz4").
StatusOr<CodecSpec> ParseCodecSpec(const std::string& text);

// Name of a codec id ("fp32"), or "codec#N" for an unknown one.
std::string CodecName(wire::Codec codec);

// What a receiver needs, besides the bytes, to decode one payload; the
// sender fills it and it travels in wire::ChunkData.
struct PayloadInfo {
  wire::Codec codec = wire::FP32;
  uint32_t block = 0;  // INT8, INT4, SIGN
  uint64_t kept = 0;   // TOPK, RANDK
  bool zstd = false;
  uint64_t raw_bytes = 0;  // with zstd: the payload's size before the zstd stage

  void ToWire(wire::ChunkData* d) const;
  static PayloadInfo FromWire(const wire::ChunkData& d);
};

// The largest payload (before zstd) a valid encoding of n values can have;
// 0 if `info` itself is invalid (unknown codec, bad block, kept > n).
uint64_t MaxEncodedBytes(const PayloadInfo& info, uint64_t n);

// Checks a payload's size against its codec without decoding: exact for
// dense codecs, bounded for sparse ones and the zstd stage. InvalidArgument.
Status CheckPayloadSize(const PayloadInfo& info, uint64_t n, uint64_t bytes);
// The same for a fp32 payload (a shortcut for FP32 without zstd).
Status CheckPayloadSize(wire::Codec codec, uint64_t num_elems, uint64_t bytes);

// Decodes one payload of n values into out[0, n): dense values, zeros where
// a sparse codec sent nothing. Validates everything before trusting it
// (codec and parameters, sizes, zstd output bound, indices in range and
// strictly increasing, finite scales and values) and never reads or writes
// out of bounds: a malformed payload is an InvalidArgument or DataLoss,
// never a crash. `scratch` holds the zstd stage's output between calls
// (may be null). After an error, out[] is unspecified for Decode and
// unchanged for DecodeAdd (it validates the whole payload first).
Status Decode(const PayloadInfo& info, const void* data, uint64_t size, uint64_t n, float* out,
              std::vector<uint8_t>* scratch);

// Decodes and adds: out[i] += decoded[i] (for parameter deltas).
Status DecodeAdd(const PayloadInfo& info, const void* data, uint64_t size, uint64_t n, float* out,
                 std::vector<uint8_t>* scratch);

// Turns float spans into payloads with one codec. Stochastic rounding and
// random-k draw from a seeded generator, so a run is reproducible.
class Encoder {
 public:
  Encoder(CodecSpec spec, uint64_t seed);
  const CodecSpec& spec() const { return spec_; }

  // Encodes values[0, n) into *out (replaced) and fills *info. If `sent` is
  // not null it receives the n values the receiver will decode (for error
  // feedback), computed without a second decode pass. InvalidArgument if a
  // value is not finite or the codec cannot represent it finitely (fp16
  // beyond +-65504). The zstd stage is skipped (info->zstd false) when it
  // would not make the payload smaller.
  Status Encode(const float* values, uint64_t n, std::vector<uint8_t>* out, PayloadInfo* info, float* sent);

 private:
  CodecSpec spec_;
  uint64_t state_;                // generator state
  std::vector<uint8_t> staging_;  // the codec's bytes before zstd
  std::vector<uint32_t> index_scratch_;
  std::vector<float> value_scratch_;
};

// Error feedback for one sender: a residual per chunk, so that what a lossy
// codec drops now is sent later. Before encoding chunk c, Correct() adds
// the residual to the new values; after, Remember() keeps what was not sent.
// Over any number of steps, (sum of what was sent) + residual equals (sum
// of the inputs) up to float rounding.
class ErrorFeedback {
 public:
  // corrected[0, n) = values + residual of `chunk` (zero if none yet).
  void Correct(uint32_t chunk, const float* values, uint64_t n, float* corrected);
  // residual of `chunk` = corrected - sent.
  void Remember(uint32_t chunk, const float* corrected, const float* sent, uint64_t n);
  // Forget a chunk's residual (the chunk moved to another shard) or all of
  // them (the sender rejoined a job).
  void Reset(uint32_t chunk);
  void ResetAll();
  // Sum of squares of every residual, for logs and tests.
  double ResidualSquaredNorm() const;

 private:
  std::unordered_map<uint32_t, std::vector<float>> residual_;
};

// Counts NaN and +-Inf values; `first_bad`, if given, receives the index of
// the first one (unchanged when there is none). Vectorizes; runs at memory speed.
size_t CountNonFinite(const float* values, size_t n, size_t* first_bad = nullptr);

}  // namespace geodesic::compression
