// libFuzzer target for the bf16 decoder (see decoder_fuzzer.h; run by scripts/fuzz.sh).
#include "tests/compression/fuzz/decoder_fuzzer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return geodesic::compression::fuzz::FuzzDecoder(geodesic::wire::BF16, data, size);
}
