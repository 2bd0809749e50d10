// Writes the seed corpus of the decoder fuzzers: for every codec, valid
// payloads (with and without zstd, short and odd-sized) and round-trip
// inputs, each behind the header decoder_fuzzer.h describes. The files in
// tests/compression/fuzz/corpus/ came from `fuzz_seeds tests/compression/fuzz/corpus`.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "tests/compression/fuzz/decoder_fuzzer.h"

using namespace geodesic;
using namespace geodesic::compression;

namespace {

void Put(std::vector<uint8_t>* v, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  v->insert(v->end(), b, b + n);
}

std::vector<uint8_t> Header(uint8_t flags, uint16_t block, uint16_t n, uint16_t kept, uint32_t raw, uint8_t share) {
  std::vector<uint8_t> h = {flags};
  Put(&h, &block, 2);
  Put(&h, &n, 2);
  Put(&h, &kept, 2);
  Put(&h, &raw, 4);
  h.push_back(share);
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  const char* codecs[] = {"fp32",         "fp16",          "bf16",     "int8:block=16",
                          "int4:block=9", "sign:block=13", "topk:0.2", "randk:0.2"};
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const char* name : codecs) {
    for (bool zstd : {false, true}) {
      auto spec = ParseCodecSpec(std::string(name) + (zstd ? "+zstd:1" : ""));
      if (!spec.ok()) return 1;
      const std::string dir = std::string(argv[1]) + "/" + CodecName(spec->codec);
      std::filesystem::create_directories(dir);
      int file = zstd ? 10 : 0;
      for (uint16_t n : {0, 1, 7, 40}) {
        std::vector<float> x(n);
        for (auto& v : x) v = zstd ? static_cast<float>(rng() % 3) : normal(rng);
        Encoder enc(*spec, 1);
        std::vector<uint8_t> payload;
        PayloadInfo info;
        if (!enc.Encode(x.data(), n, &payload, &info, nullptr).ok()) return 1;
        std::vector<uint8_t> input = Header(info.zstd ? fuzz::kZstd : 0, static_cast<uint16_t>(info.block), n,
                                            static_cast<uint16_t>(info.kept), static_cast<uint32_t>(info.raw_bytes), 0);
        Put(&input, payload.data(), payload.size());
        std::ofstream(dir + "/seed" + std::to_string(file++), std::ios::binary)
            .write(reinterpret_cast<const char*>(input.data()), static_cast<std::streamsize>(input.size()));
      }
      // A round-trip input: 24 floats.
      std::vector<uint8_t> input = Header(fuzz::kRoundTrip | (zstd ? fuzz::kZstd : 0), 5, 0, 0, 7, 60);
      for (int i = 0; i < 24; ++i) {
        const float v = normal(rng);
        Put(&input, &v, 4);
      }
      std::ofstream(dir + "/seed" + std::to_string(file++), std::ios::binary)
          .write(reinterpret_cast<const char*>(input.data()), static_cast<std::streamsize>(input.size()));
    }
  }
  return 0;
}
