#include "compression/codec.h"

#include <bit>
#include <cmath>
#include <cstring>

namespace geodesic::compression {

std::string CodecName(wire::Codec codec) {
  switch (codec) {
    case wire::FP32:
      return "fp32";
    default:
      return "codec#" + std::to_string(static_cast<int>(codec));
  }
}

StatusOr<wire::Codec> CodecFromName(const std::string& name) {
  if (name == "fp32" || name == "none") return wire::FP32;
  return InvalidArgument("unknown codec '" + name + "' (known: fp32)");
}

Status CheckPayloadSize(wire::Codec codec, uint64_t num_elems, uint64_t bytes) {
  switch (codec) {
    case wire::FP32:
      if (bytes != num_elems * sizeof(float))
        return InvalidArgument("fp32 payload of " + std::to_string(num_elems) + " values must be " +
                               std::to_string(num_elems * sizeof(float)) + " bytes, got " + std::to_string(bytes));
      return Status::Ok();
    default:
      return InvalidArgument("unknown codec id " + std::to_string(static_cast<int>(codec)));
  }
}

Status Decode(wire::Codec codec, const void* bytes, uint64_t num_bytes, float* out, uint64_t num_elems) {
  GD_RETURN_IF_ERROR(CheckPayloadSize(codec, num_elems, num_bytes));
  std::memcpy(out, bytes, num_bytes);
  return Status::Ok();
}

size_t CountNonFinite(const float* values, size_t n, size_t* first_bad) {
  // Branch-free count over the exponent bits (all ones = NaN or Inf) so the
  // loop vectorizes; the index is searched only when something was found.
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += (std::bit_cast<uint32_t>(values[i]) & 0x7f800000u) == 0x7f800000u;
  if (bad && first_bad) {
    for (size_t i = 0; i < n; ++i)
      if (!std::isfinite(values[i])) {
        *first_bad = i;
        break;
      }
  }
  return bad;
}

}  // namespace geodesic::compression
