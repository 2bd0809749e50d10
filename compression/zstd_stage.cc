// The optional zstd stage over a codec's bytes. One compression and one
// decompression context per thread, reused (creating a context allocates
// and clears its tables, which costs more than compressing a small chunk).
//
// A receiver trusts nothing in the frame: it must be one frame, exactly the
// payload, recording its content size, and that size must equal raw_bytes
// (which codec.cc has already bounded by what the codec can produce). The
// output buffer has exactly raw_bytes, and zstd never writes past the
// capacity it is given, so a "zstd bomb" cannot make the receiver allocate
// or write more than a valid payload would.
#include <zstd.h>

#include <memory>
#include <string>

#include "compression/internal/codecs.h"

namespace geodesic::compression::internal {
namespace {

struct CCtxFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DCtxFree {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

ZSTD_CCtx* ThreadCCtx() {
  static thread_local std::unique_ptr<ZSTD_CCtx, CCtxFree> ctx(ZSTD_createCCtx());
  return ctx.get();
}
ZSTD_DCtx* ThreadDCtx() {
  static thread_local std::unique_ptr<ZSTD_DCtx, DCtxFree> ctx(ZSTD_createDCtx());
  return ctx.get();
}

}  // namespace

uint64_t ZstdBound(uint64_t raw_bytes) { return ZSTD_compressBound(raw_bytes); }

Status ZstdCompress(const uint8_t* src, uint64_t size, int level, std::vector<uint8_t>* out) {
  ZSTD_CCtx* ctx = ThreadCCtx();
  if (!ctx) return Internal("zstd: cannot create a compression context");
  out->resize(ZSTD_compressBound(size));
  // The one-shot API records the content size in the frame header.
  const size_t r = ZSTD_compressCCtx(ctx, out->data(), out->size(), src, size, level);
  if (ZSTD_isError(r)) return Internal(std::string("zstd compression failed: ") + ZSTD_getErrorName(r));
  out->resize(r);
  return Status::Ok();
}

Status ZstdDecompress(const void* data, uint64_t size, uint64_t raw_bytes, std::vector<uint8_t>* scratch) {
  const unsigned long long content = ZSTD_getFrameContentSize(data, size);
  if (content == ZSTD_CONTENTSIZE_ERROR) return DataLoss("zstd stage: the payload does not start with a zstd frame");
  if (content == ZSTD_CONTENTSIZE_UNKNOWN)
    return InvalidArgument("zstd stage: the frame does not record its content size");
  if (content != raw_bytes)
    return InvalidArgument("zstd stage: the frame holds " + std::to_string(content) + " bytes, the header says " +
                           std::to_string(raw_bytes));
  const size_t frame = ZSTD_findFrameCompressedSize(data, size);
  if (ZSTD_isError(frame)) return DataLoss(std::string("zstd stage: corrupt frame: ") + ZSTD_getErrorName(frame));
  if (frame != size)
    return InvalidArgument("zstd stage: the frame is " + std::to_string(frame) + " of the payload's " +
                           std::to_string(size) + " bytes (one frame, nothing after it)");
  ZSTD_DCtx* ctx = ThreadDCtx();
  if (!ctx) return Internal("zstd: cannot create a decompression context");
  scratch->resize(raw_bytes);
  const size_t r = ZSTD_decompressDCtx(ctx, scratch->data(), raw_bytes, data, size);
  if (ZSTD_isError(r)) return DataLoss(std::string("zstd stage: corrupt frame: ") + ZSTD_getErrorName(r));
  if (r != raw_bytes)
    return DataLoss("zstd stage: the frame decompressed to " + std::to_string(r) + " bytes, not " +
                    std::to_string(raw_bytes));
  return Status::Ok();
}

}  // namespace geodesic::compression::internal
