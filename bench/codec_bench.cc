// `geodesic bench codecs`: encode and decode speed of every codec on one
// thread, side by side with memcpy of the same buffer.
//
// The input is a float32 gradient of --mb MiB: normal values (sigma 1e-3)
// with one value in 10,000 a hundred times larger, from a fixed seed. Each
// round times memcpy of the buffer, an encode (with `sent`, as error
// feedback uses it) and a decode; rounds repeat for --seconds per codec
// (at least 3) and each figure is the median, so machine noise hits the
// codec and its memcpy baseline alike. GB/s counts 1e9 float32 input bytes
// per second; *_ratio is a speed over the memcpy speed of the same rounds.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "bench/bench.h"
#include "bench/stats.h"
#include "compression/codec.h"

namespace geodesic::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

template <typename F>
double Seconds(F&& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<float> Gradient(uint64_t n) {
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  std::vector<float> g(n);
  for (auto& v : g) v = normal(rng);
  for (uint64_t i = 0; i < n; i += 10007) g[i] *= 100.0f;
  return g;
}

// The buffers of one size: the input gradient and what the rounds write.
struct Buffers {
  explicit Buffers(uint64_t n)
      : n(n), bytes(4.0 * static_cast<double>(n)), grad(Gradient(n)), sent(n), decoded(n), copy(n) {
    // Touch every page once so the first round does not pay for faults.
    std::memcpy(copy.data(), grad.data(), bytes);
    std::fill(sent.begin(), sent.end(), 0.0f);
    std::fill(decoded.begin(), decoded.end(), 0.0f);
  }
  const uint64_t n;
  const double bytes;
  const std::vector<float> grad;
  std::vector<float> sent, decoded, copy;
  std::vector<uint8_t> payload, scratch;
};

// Round times of one codec (seconds).
struct Timings {
  std::vector<double> copy, enc, dec;
};

// Rounds of memcpy, encode and decode for --seconds (at least 3), then the
// check that the decoded values are what the encoder said it sent.
StatusOr<Timings> Measure(const std::string& name, const compression::CodecSpec& spec, Buffers& b, double seconds,
                          const std::atomic<bool>* stop) {
  compression::Encoder encoder(spec, 1);
  compression::PayloadInfo info;
  Timings t;
  Status status;
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (t.enc.size() < 3 || Clock::now() < deadline) {
    if (stop && stop->load()) return Cancelled("stopped");
    t.copy.push_back(Seconds([&] { std::memcpy(b.copy.data(), b.grad.data(), b.bytes); }));
    t.enc.push_back(Seconds([&] { status = encoder.Encode(b.grad.data(), b.n, &b.payload, &info, b.sent.data()); }));
    GD_RETURN_IF_ERROR(status.Annotate(name + " encode"));
    t.dec.push_back(Seconds([&] {
      status = compression::Decode(info, b.payload.data(), b.payload.size(), b.n, b.decoded.data(), &b.scratch);
    }));
    GD_RETURN_IF_ERROR(status.Annotate(name + " decode"));
  }
  if (std::memcmp(b.sent.data(), b.decoded.data(), b.bytes) != 0)
    return Internal(name + ": the decoded values differ from what the encoder said it sent");
  return t;
}

void Report(const compression::CodecSpec& spec, int mb, const Buffers& b, const Timings& t, bool as_json) {
  const double copy_gbps = b.bytes / UpperMedian(t.copy) / 1e9;
  const double enc_gbps = b.bytes / UpperMedian(t.enc) / 1e9;
  const double dec_gbps = b.bytes / UpperMedian(t.dec) / 1e9;
  const double ratio = b.bytes / static_cast<double>(std::max<size_t>(b.payload.size(), 1));
  if (as_json) {
    json r = {{"codec", spec.Name()},
              {"mb", mb},
              {"encode_gbps", enc_gbps},
              {"decode_gbps", dec_gbps},
              {"memcpy_gbps", copy_gbps},
              {"encode_ratio", enc_gbps / copy_gbps},
              {"decode_ratio", dec_gbps / copy_gbps},
              {"ratio_bytes", ratio},
              {"encoded_bytes", b.payload.size()},
              {"encode_ms", UpperMedian(t.enc) * 1e3},
              {"decode_ms", UpperMedian(t.dec) * 1e3},
              {"rounds", t.enc.size()}};
    std::cout << r.dump() << std::endl;
  } else {
    std::printf("%-22s %8.2f %8.2f %8.2f %8.2f %8.2f %8.1f %10zu  enc %.1f ms\n", spec.Name().c_str(), enc_gbps,
                dec_gbps, copy_gbps, enc_gbps / copy_gbps, dec_gbps / copy_gbps, ratio, b.payload.size(),
                UpperMedian(t.enc) * 1e3);
    std::fflush(stdout);
  }
}

}  // namespace

Status RunCodecBench(const BenchOptions& options, const std::atomic<bool>* stop) {
  const std::vector<std::string> names = {"fp32",      "fp16",      "bf16",       "int8",           "int4",
                                          "sign",      "topk:0.01", "randk:0.01", "fp16+zstd",      "bf16+zstd",
                                          "int8+zstd", "int4+zstd", "sign+zstd",  "topk:0.01+zstd", "randk:0.01+zstd"};
  for (int mb : options.sizes_mb) {
    if (mb <= 0) return InvalidArgument("--mb must be positive");
    Buffers buffers(static_cast<uint64_t>(mb) << 18);  // MiB of float32
    if (!options.json)
      std::printf("%-22s %8s %8s %8s %8s %8s %8s %10s  (%d MiB, one thread)\n", "codec", "enc GB/s", "dec GB/s",
                  "memcpy", "enc/mcp", "dec/mcp", "ratio", "bytes", mb);
    for (const std::string& name : names) {
      if (stop && stop->load()) return Cancelled("stopped");
      GD_ASSIGN_OR_RETURN(compression::CodecSpec spec, compression::ParseCodecSpec(name));
      GD_ASSIGN_OR_RETURN(Timings t, Measure(name, spec, buffers, options.seconds, stop));
      Report(spec, mb, buffers, t, options.json);
    }
  }
  return Status::Ok();
}

}  // namespace geodesic::bench
