// The codec families behind codec.h. codec.cc checks sizes and parameters
// and handles the zstd stage; the functions here see raw payload bytes of
// exactly the right size (dense codecs) or a checked bound (sparse ones).
//
// Encoders return how many input values (blocks, for INT8, INT4 and SIGN)
// they could not represent finitely (NaN, Inf, or beyond the format's
// range); the payload is then not to be sent. Decoders validate every value they read; with `add` they validate
// the whole payload before touching `out`, so a refused payload leaves
// `out` unchanged (without `add`, `out` is unspecified after an error).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace geodesic::compression::internal {

// float16.cc: FP32, FP16, BF16. `sent` may be null.
uint64_t EncodeFp32(const float* x, uint64_t n, uint8_t* out, float* sent);
uint64_t EncodeFp16(const float* x, uint64_t n, uint8_t* out, float* sent);
uint64_t EncodeBf16(const float* x, uint64_t n, uint8_t* out, float* sent);
Status DecodeFp32(const uint8_t* p, uint64_t n, float* out, bool add);
Status DecodeFp16(const uint8_t* p, uint64_t n, float* out, bool add);
Status DecodeBf16(const uint8_t* p, uint64_t n, float* out, bool add);

// quantize.cc: INT8, INT4 (stochastic rounding keyed by `key`) and SIGN.
// Payload sizes for n values in blocks of `block`.
uint64_t Int8Bytes(uint64_t n, uint32_t block);
uint64_t Int4Bytes(uint64_t n, uint32_t block);
uint64_t SignBytes(uint64_t n, uint32_t block);
uint64_t EncodeInt8(const float* x, uint64_t n, uint32_t block, uint64_t key, uint8_t* out, float* sent);
uint64_t EncodeInt4(const float* x, uint64_t n, uint32_t block, uint64_t key, uint8_t* out, float* sent);
uint64_t EncodeSign(const float* x, uint64_t n, uint32_t block, uint8_t* out, float* sent);
Status DecodeInt8(const uint8_t* p, uint64_t n, uint32_t block, float* out, bool add);
Status DecodeInt4(const uint8_t* p, uint64_t n, uint32_t block, float* out, bool add);
Status DecodeSign(const uint8_t* p, uint64_t n, uint32_t block, float* out, bool add);

// sparse.cc: TOPK and RANDK (k <= n < 2^32 when encoding). Each replaces
// *out with the payload. `scratch` is reused between calls.
uint64_t SparseMaxBytes(uint64_t n, uint64_t k);
uint64_t EncodeTopK(const float* x, uint64_t n, uint64_t k, std::vector<uint32_t>* scratch, std::vector<uint8_t>* out,
                    float* sent);
uint64_t EncodeRandK(const float* x, uint64_t n, uint64_t k, uint64_t key, std::vector<uint32_t>* scratch,
                     std::vector<uint8_t>* out, float* sent);
Status DecodeSparse(const char* codec, const uint8_t* p, uint64_t size, uint64_t n, uint64_t k, float* out, bool add);

// zstd_stage.cc. Compress replaces *out. Decompress checks the frame (one
// frame, content size recorded and equal to raw_bytes) and never writes more
// than raw_bytes into *scratch; a corrupt frame is DataLoss.
uint64_t ZstdBound(uint64_t raw_bytes);
Status ZstdCompress(const uint8_t* src, uint64_t size, int level, std::vector<uint8_t>* out);
Status ZstdDecompress(const void* data, uint64_t size, uint64_t raw_bytes, std::vector<uint8_t>* scratch);

}  // namespace geodesic::compression::internal
