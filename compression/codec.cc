// What every codec shares: payload metadata, size checks, the zstd stage,
// dispatch to the codec families (internal/codecs.h), and the Encoder.
#include "compression/codec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "compression/internal/bits.h"
#include "compression/internal/codecs.h"

namespace geodesic::compression {
namespace {

// Far beyond any chunk; keeps every byte count below 2^63.
constexpr uint64_t kMaxValues = uint64_t{1} << 48;

bool HasBlock(wire::Codec c) { return c == wire::INT8 || c == wire::INT4 || c == wire::SIGN; }
bool IsSparse(wire::Codec c) { return c == wire::TOPK || c == wire::RANDK; }
bool IsKnown(wire::Codec c) { return c >= wire::FP32 && c <= wire::RANDK; }

Status CheckInfo(const PayloadInfo& info, uint64_t n) {
  if (!IsKnown(info.codec)) return InvalidArgument("unknown codec id " + std::to_string(static_cast<int>(info.codec)));
  if (n > kMaxValues) return InvalidArgument(std::to_string(n) + " values is more than a payload may hold");
  if (HasBlock(info.codec) && (info.block < 8 || info.block > 65536))
    return InvalidArgument(CodecName(info.codec) + " block of " + std::to_string(info.block) +
                           " values is outside [8, 65536]");
  if (IsSparse(info.codec) && info.kept > n)
    return InvalidArgument(CodecName(info.codec) + " payload keeps " + std::to_string(info.kept) + " values of only " +
                           std::to_string(n));
  return Status::Ok();
}

// Exact size for dense codecs, the largest for sparse ones (info valid).
uint64_t RawBytes(const PayloadInfo& info, uint64_t n) {
  switch (info.codec) {
    case wire::FP32:
      return 4 * n;
    case wire::FP16:
    case wire::BF16:
      return 2 * n;
    case wire::INT8:
      return internal::Int8Bytes(n, info.block);
    case wire::INT4:
      return internal::Int4Bytes(n, info.block);
    case wire::SIGN:
      return internal::SignBytes(n, info.block);
    case wire::TOPK:
    case wire::RANDK:
      return internal::SparseMaxBytes(n, info.kept);
    default:
      return 0;
  }
}

std::string Describe(const PayloadInfo& info, uint64_t n) {
  std::string s = CodecName(info.codec) + " payload of " + std::to_string(n) + " values";
  if (HasBlock(info.codec)) s += " in blocks of " + std::to_string(info.block);
  if (IsSparse(info.codec)) s += " keeping " + std::to_string(info.kept);
  return s;
}

Status DecodeImpl(const PayloadInfo& info, const void* data, uint64_t size, uint64_t n, float* out,
                  std::vector<uint8_t>* scratch, bool add) {
  GD_RETURN_IF_ERROR(CheckPayloadSize(info, n, size));
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t bytes = size;
  std::vector<uint8_t> local;
  if (info.zstd) {
    std::vector<uint8_t>* buf = scratch ? scratch : &local;
    GD_RETURN_IF_ERROR(internal::ZstdDecompress(data, size, info.raw_bytes, buf));
    p = buf->data();
    bytes = info.raw_bytes;
  }
  switch (info.codec) {
    case wire::FP32:
      return internal::DecodeFp32(p, n, out, add);
    case wire::FP16:
      return internal::DecodeFp16(p, n, out, add);
    case wire::BF16:
      return internal::DecodeBf16(p, n, out, add);
    case wire::INT8:
      return internal::DecodeInt8(p, n, info.block, out, add);
    case wire::INT4:
      return internal::DecodeInt4(p, n, info.block, out, add);
    case wire::SIGN:
      return internal::DecodeSign(p, n, info.block, out, add);
    case wire::TOPK:
      return internal::DecodeSparse("topk", p, bytes, n, info.kept, out, add);
    case wire::RANDK:
      return internal::DecodeSparse("randk", p, bytes, n, info.kept, out, add);
    default:
      return InvalidArgument("unknown codec id " + std::to_string(static_cast<int>(info.codec)));
  }
}

Status CheckSpec(const CodecSpec& spec) {
  if (!IsKnown(spec.codec)) return InvalidArgument("unknown codec id " + std::to_string(static_cast<int>(spec.codec)));
  if (HasBlock(spec.codec) && (spec.block < 8 || spec.block > 65536))
    return InvalidArgument(spec.Name() + ": block outside [8, 65536]");
  if (spec.sparse() && !(spec.fraction > 0 && spec.fraction <= 1))
    return InvalidArgument(spec.Name() + ": the share of values sent is outside (0, 1]");
  if (spec.zstd_level < 0 || spec.zstd_level > 19) return InvalidArgument(spec.Name() + ": zstd level outside [1, 19]");
  return Status::Ok();
}

// k = max(1, ceil(fraction * n)), at most n. The product is nudged down by
// a relative 1e-12 so that a share meant to be exact (0.01 of 100) is not
// rounded up by the representation error of the fraction.
uint64_t KeptFor(double fraction, uint64_t n) {
  if (n == 0) return 0;
  const double x = fraction * static_cast<double>(n);
  const double k = std::ceil(x - x * 1e-12);
  return std::clamp<uint64_t>(k < 1 ? 1 : static_cast<uint64_t>(k), 1, n);
}

}  // namespace

void PayloadInfo::ToWire(wire::ChunkData* d) const {
  d->set_codec(codec);
  d->set_block(block);
  d->set_kept(kept);
  d->set_zstd(zstd);
  d->set_raw_bytes(raw_bytes);
}

PayloadInfo PayloadInfo::FromWire(const wire::ChunkData& d) {
  PayloadInfo info;
  info.codec = d.codec();
  info.block = d.block();
  info.kept = d.kept();
  info.zstd = d.zstd();
  info.raw_bytes = d.raw_bytes();
  return info;
}

uint64_t MaxEncodedBytes(const PayloadInfo& info, uint64_t n) {
  return CheckInfo(info, n).ok() ? RawBytes(info, n) : 0;
}

Status CheckPayloadSize(const PayloadInfo& info, uint64_t n, uint64_t bytes) {
  GD_RETURN_IF_ERROR(CheckInfo(info, n));
  const uint64_t max = RawBytes(info, n);
  const uint64_t raw = info.zstd ? info.raw_bytes : bytes;
  const std::string said = info.zstd ? "its raw_bytes say " : "got ";
  if (!IsSparse(info.codec) && raw != max)
    return InvalidArgument(Describe(info, n) + " must be " + std::to_string(max) + " bytes, " + said +
                           std::to_string(raw));
  if (IsSparse(info.codec) && (raw < 5 * info.kept || raw > max))
    return InvalidArgument(Describe(info, n) + " must be " + std::to_string(5 * info.kept) + ".." +
                           std::to_string(max) + " bytes, " + said + std::to_string(raw));
  if (info.zstd && (bytes == 0 || bytes > internal::ZstdBound(raw)))
    return InvalidArgument("zstd stage: " + std::to_string(bytes) + " bytes cannot be a zstd frame of " +
                           std::to_string(raw) + " bytes (at most " + std::to_string(internal::ZstdBound(raw)) + ")");
  return Status::Ok();
}

Status CheckPayloadSize(wire::Codec codec, uint64_t num_elems, uint64_t bytes) {
  PayloadInfo info;
  info.codec = codec;
  return CheckPayloadSize(info, num_elems, bytes);
}

Status Decode(const PayloadInfo& info, const void* data, uint64_t size, uint64_t n, float* out,
              std::vector<uint8_t>* scratch) {
  return DecodeImpl(info, data, size, n, out, scratch, false);
}

Status DecodeAdd(const PayloadInfo& info, const void* data, uint64_t size, uint64_t n, float* out,
                 std::vector<uint8_t>* scratch) {
  return DecodeImpl(info, data, size, n, out, scratch, true);
}

Encoder::Encoder(CodecSpec spec, uint64_t seed) : spec_(spec), state_(seed) {}

Status Encoder::Encode(const float* values, uint64_t n, std::vector<uint8_t>* out, PayloadInfo* info, float* sent) {
  GD_RETURN_IF_ERROR(CheckSpec(spec_));
  if (n > kMaxValues || (spec_.sparse() && n > UINT32_MAX))
    return InvalidArgument(spec_.Name() + ": cannot encode " + std::to_string(n) + " values in one payload");
  state_ += 0x9e3779b97f4a7c15ull;
  const uint64_t key = internal::Mix64(state_);  // this call's random stream

  PayloadInfo pi;
  pi.codec = spec_.codec;
  if (HasBlock(spec_.codec)) pi.block = spec_.block;
  if (spec_.sparse()) pi.kept = KeptFor(spec_.fraction, n);
  if (n == 0) {
    out->clear();
    *info = pi;
    return Status::Ok();
  }
  std::vector<uint8_t>& raw = spec_.zstd_level ? staging_ : *out;
  if (!spec_.sparse()) raw.resize(RawBytes(pi, n));
  uint64_t bad = 0;
  switch (spec_.codec) {
    case wire::FP32:
      bad = internal::EncodeFp32(values, n, raw.data(), sent);
      break;
    case wire::FP16:
      bad = internal::EncodeFp16(values, n, raw.data(), sent);
      break;
    case wire::BF16:
      bad = internal::EncodeBf16(values, n, raw.data(), sent);
      break;
    case wire::INT8:
      bad = internal::EncodeInt8(values, n, pi.block, key, raw.data(), sent);
      break;
    case wire::INT4:
      bad = internal::EncodeInt4(values, n, pi.block, key, raw.data(), sent);
      break;
    case wire::SIGN:
      bad = internal::EncodeSign(values, n, pi.block, raw.data(), sent);
      break;
    case wire::TOPK:
      bad = internal::EncodeTopK(values, n, pi.kept, &index_scratch_, &raw, sent);
      break;
    case wire::RANDK:
      bad = internal::EncodeRandK(values, n, pi.kept, key, &index_scratch_, &raw, sent);
      break;
    default:
      break;
  }
  if (bad) {
    size_t first = 0;
    std::string where =
        CountNonFinite(values, n, &first) ? ", the first non-finite input at index " + std::to_string(first) : "";
    return InvalidArgument(spec_.Name() + " cannot encode this input: " + std::to_string(bad) +
                           " value(s) or block(s) are not finite or beyond the format's range" + where);
  }
  if (spec_.zstd_level) {
    GD_RETURN_IF_ERROR(internal::ZstdCompress(raw.data(), raw.size(), spec_.zstd_level, out));
    if (out->size() < raw.size()) {
      pi.zstd = true;
      pi.raw_bytes = raw.size();
    } else {
      out->swap(staging_);  // incompressible: send the codec's bytes without the stage
    }
  }
  *info = pi;
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
