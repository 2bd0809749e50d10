// Codec names: "<codec>[:params][+zstd[:level]]" <-> CodecSpec.
#include <charconv>
#include <cmath>
#include <string_view>

#include "compression/codec.h"

namespace geodesic::compression {
namespace {

constexpr char kKnown[] =
    "known codecs: fp32 (or none), fp16, bf16, int8[:block=N], int4[:block=N], sign[:block=N], topk:F, randk:F "
    "(N in [8, 65536], default 256; F, the share of values sent, in (0, 1]), each optionally followed by "
    "+zstd[:LEVEL] (LEVEL in [1, 19], default 3)";
constexpr uint32_t kMinBlock = 8, kMaxBlock = 65536;
constexpr int kDefaultZstdLevel = 3, kMaxZstdLevel = 19;

enum class Param { kNone, kBlock, kFraction };
struct Entry {
  std::string_view name;
  wire::Codec codec;
  Param param;
};
constexpr Entry kCodecs[] = {
    {"fp32", wire::FP32, Param::kNone},       {"none", wire::FP32, Param::kNone},
    {"fp16", wire::FP16, Param::kNone},       {"bf16", wire::BF16, Param::kNone},
    {"int8", wire::INT8, Param::kBlock},      {"int4", wire::INT4, Param::kBlock},
    {"sign", wire::SIGN, Param::kBlock},      {"topk", wire::TOPK, Param::kFraction},
    {"randk", wire::RANDK, Param::kFraction},
};

template <typename T>
bool ParseNumber(std::string_view s, T* v) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

std::string CodecName(wire::Codec codec) {
  for (const Entry& e : kCodecs)
    if (e.codec == codec && e.name != "none") return std::string(e.name);
  return "codec#" + std::to_string(static_cast<int>(codec));
}

std::string CodecSpec::Name() const {
  std::string name = CodecName(codec);
  if (codec == wire::INT8 || codec == wire::INT4 || codec == wire::SIGN) name += ":block=" + std::to_string(block);
  if (sparse()) {
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, fraction);  // shortest text that reads back exactly
    name += ':';
    name.append(buf, ec == std::errc() ? end : buf);
  }
  if (zstd_level) name += "+zstd:" + std::to_string(zstd_level);
  return name;
}

StatusOr<CodecSpec> ParseCodecSpec(const std::string& text) {
  auto fail = [&](const std::string& what) { return InvalidArgument("codec '" + text + "': " + what + "; " + kKnown); };
  std::string_view all(text);
  const size_t plus = all.find('+');
  std::string_view head = all.substr(0, plus);
  const size_t colon = head.find(':');
  const std::string_view name = head.substr(0, colon);
  const bool has_param = colon != std::string_view::npos;
  const std::string_view param = has_param ? head.substr(colon + 1) : std::string_view();

  const Entry* entry = nullptr;
  for (const Entry& e : kCodecs)
    if (e.name == name) entry = &e;
  if (!entry) return fail("unknown codec '" + std::string(name) + "'");

  CodecSpec spec;
  spec.codec = entry->codec;
  switch (entry->param) {
    case Param::kNone:
      if (has_param) return fail(std::string(name) + " takes no parameters");
      break;
    case Param::kBlock:
      if (has_param) {
        constexpr std::string_view kKey = "block=";
        uint32_t block = 0;
        if (!param.starts_with(kKey) || !ParseNumber(param.substr(kKey.size()), &block) || block < kMinBlock ||
            block > kMaxBlock)
          return fail("expected block=N with N an integer in [8, 65536], got '" + std::string(param) + "'");
        spec.block = block;
      }
      break;
    case Param::kFraction: {
      double f = 0;
      if (!has_param)
        return fail(std::string(name) + " needs the share of values to send, e.g. " + std::string(name) + ":0.01");
      if (!ParseNumber(param, &f) || !std::isfinite(f) || f <= 0 || f > 1)
        return fail("the share of values sent must be a number in (0, 1], got '" + std::string(param) + "'");
      spec.fraction = f;
      break;
    }
  }

  if (plus != std::string_view::npos) {
    std::string_view stage = all.substr(plus + 1);
    if (stage.find('+') != std::string_view::npos) return fail("at most one stage (+zstd) may follow the codec");
    const size_t c = stage.find(':');
    if (stage.substr(0, c) != "zstd")
      return fail("unknown stage '" + std::string(stage.substr(0, c)) + "' (the only stage is zstd)");
    spec.zstd_level = kDefaultZstdLevel;
    if (c != std::string_view::npos) {
      int level = 0;
      if (!ParseNumber(stage.substr(c + 1), &level) || level < 1 || level > kMaxZstdLevel)
        return fail("zstd level must be an integer in [1, 19], got '" + std::string(stage.substr(c + 1)) + "'");
      spec.zstd_level = level;
    }
  }
  return spec;
}

}  // namespace geodesic::compression
