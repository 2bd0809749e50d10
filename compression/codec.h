// Payload codecs: how a span of float32 values becomes the bytes of one
// payload frame and back. Protocol version 1 has one codec, FP32 (raw
// little-endian floats, sent zero-copy); the quantizing and sparsifying
// codecs of DESIGN.md plug in behind the same functions. All functions are
// pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "proto/geodesic.pb.h"

namespace geodesic::compression {

// Name of a codec id ("fp32"), or "codec#N" for an unknown one.
std::string CodecName(wire::Codec codec);

// Parses a codec name from a job file or flag.
StatusOr<wire::Codec> CodecFromName(const std::string& name);

// Checks that `bytes` is exactly what `codec` produces for `num_elems`
// values. InvalidArgument (unknown codec, wrong size) otherwise.
Status CheckPayloadSize(wire::Codec codec, uint64_t num_elems, uint64_t bytes);

// Decodes `bytes` (already size-checked) into `out[0..num_elems)`.
Status Decode(wire::Codec codec, const void* bytes, uint64_t num_bytes, float* out, uint64_t num_elems);

// Counts NaN and +-Inf values; `first_bad`, if given, receives the index of
// the first one (unchanged when there is none). Vectorizes; runs at memory speed.
size_t CountNonFinite(const float* values, size_t n, size_t* first_bad = nullptr);

}  // namespace geodesic::compression
