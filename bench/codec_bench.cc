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
#include "compression/codec.h"

namespace geodesic::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

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

}  // namespace

Status RunCodecBench(const BenchOptions& options, const std::atomic<bool>* stop) {
  const std::vector<std::string> names = {"fp32",      "fp16",      "bf16",       "int8",           "int4",
                                          "sign",      "topk:0.01", "randk:0.01", "fp16+zstd",      "bf16+zstd",
                                          "int8+zstd", "int4+zstd", "sign+zstd",  "topk:0.01+zstd", "randk:0.01+zstd"};
  for (int mb : options.sizes_mb) {
    if (mb <= 0) return InvalidArgument("--mb must be positive");
    const uint64_t n = static_cast<uint64_t>(mb) << 18;  // MiB of float32
    const double bytes = 4.0 * static_cast<double>(n);
    const std::vector<float> grad = Gradient(n);
    std::vector<float> sent(n), decoded(n), copy(n);
    std::vector<uint8_t> payload, scratch;
    // Touch every page once so the first round does not pay for faults.
    std::memcpy(copy.data(), grad.data(), bytes);
    std::fill(sent.begin(), sent.end(), 0.0f);
    std::fill(decoded.begin(), decoded.end(), 0.0f);

    if (!options.json)
      std::printf("%-22s %8s %8s %8s %8s %8s %8s %10s  (%d MiB, one thread)\n", "codec", "enc GB/s", "dec GB/s",
                  "memcpy", "enc/mcp", "dec/mcp", "ratio", "bytes", mb);
    for (const std::string& name : names) {
      if (stop && stop->load()) return Cancelled("stopped");
      GD_ASSIGN_OR_RETURN(compression::CodecSpec spec, compression::ParseCodecSpec(name));
      compression::Encoder encoder(spec, 1);
      compression::PayloadInfo info;
      std::vector<double> t_copy, t_enc, t_dec;
      Status status;
      const auto deadline = Clock::now() + std::chrono::duration<double>(options.seconds);
      while (t_enc.size() < 3 || Clock::now() < deadline) {
        if (stop && stop->load()) return Cancelled("stopped");
        t_copy.push_back(Seconds([&] { std::memcpy(copy.data(), grad.data(), bytes); }));
        t_enc.push_back(Seconds([&] { status = encoder.Encode(grad.data(), n, &payload, &info, sent.data()); }));
        GD_RETURN_IF_ERROR(status.Annotate(name + " encode"));
        t_dec.push_back(Seconds(
            [&] { status = compression::Decode(info, payload.data(), payload.size(), n, decoded.data(), &scratch); }));
        GD_RETURN_IF_ERROR(status.Annotate(name + " decode"));
      }
      if (std::memcmp(sent.data(), decoded.data(), bytes) != 0)
        return Internal(name + ": the decoded values differ from what the encoder said it sent");
      const double copy_gbps = bytes / Median(t_copy) / 1e9;
      const double enc_gbps = bytes / Median(t_enc) / 1e9;
      const double dec_gbps = bytes / Median(t_dec) / 1e9;
      const double ratio = bytes / static_cast<double>(std::max<size_t>(payload.size(), 1));
      if (options.json) {
        json r = {{"codec", spec.Name()},
                  {"mb", mb},
                  {"encode_gbps", enc_gbps},
                  {"decode_gbps", dec_gbps},
                  {"memcpy_gbps", copy_gbps},
                  {"encode_ratio", enc_gbps / copy_gbps},
                  {"decode_ratio", dec_gbps / copy_gbps},
                  {"ratio_bytes", ratio},
                  {"encoded_bytes", payload.size()},
                  {"encode_ms", Median(t_enc) * 1e3},
                  {"decode_ms", Median(t_dec) * 1e3},
                  {"rounds", t_enc.size()}};
        std::cout << r.dump() << std::endl;
      } else {
        std::printf("%-22s %8.2f %8.2f %8.2f %8.2f %8.2f %8.1f %10zu  enc %.1f ms\n", spec.Name().c_str(), enc_gbps,
                    dec_gbps, copy_gbps, enc_gbps / copy_gbps, dec_gbps / copy_gbps, ratio, payload.size(),
                    Median(t_enc) * 1e3);
        std::fflush(stdout);
      }
    }
  }
  return Status::Ok();
}

}  // namespace geodesic::bench
