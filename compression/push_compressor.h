// PushCompressor: a worker's compression policy for its pushes, apart from
// how they travel. Given the flat gradient of a step, it applies momentum
// correction (push velocities, DGC), error feedback (keep what a lossy codec
// dropped for later pushes), the sparsity warm-up, and picks one top-k
// threshold across every top-k chunk of the model; then it encodes each
// chunk with its destination's codec.
//
// Destinations are numbered 0..n-1 by the caller (PsClient: its shards in
// order); each has a codec and the chunks it receives now. Chunks are
// `chunk_elems` values of a flat vector of `num_params` (the last may be
// shorter), as cluster::ChunkLayout cuts it. Plain values in, bytes out:
// no sockets. Not synchronized: the training thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "compression/codec.h"

namespace geodesic::compression {

struct PushCompressorOptions {
  bool error_feedback = true;  // keep what lossy push codecs drop for later pushes
  // > 0: momentum correction: push the velocity v = momentum * v + g
  // instead of g, zeroing v where a sparse codec sent a value.
  double local_momentum = 0;
  // Sparse codecs start at 25% of the values and reach their fraction
  // (geometrically) after this many clocks.
  int64_t sparsity_warmup_steps = 0;
  uint64_t seed = 1;  // stochastic rounding and random-k
  int sender = 0;     // this worker's id, mixed into the seeds
};

class PushCompressor {
 public:
  PushCompressor(PushCompressorOptions options, uint64_t num_params, uint64_t chunk_elems);

  // Destination `dest` (numbered 0..n-1, `dest_id` its id in seeds) uses
  // `spec`; fp32 without zstd means no encoding (the caller sends raw).
  void SetCodec(size_t dest, int dest_id, const CodecSpec& spec);
  // The chunks `dest` receives now (ascending).
  void SetChunks(size_t dest, std::vector<uint32_t> chunks);
  // Whether `dest`'s pushes go through Encode (a lossy codec or zstd).
  bool encodes(size_t dest) const { return dest < dests_.size() && dests_[dest].encoder != nullptr; }

  // Starts step `clock`'s push of `grad` (num_params values). Returns the
  // values to send raw to destinations that do not encode: `grad` itself,
  // or with momentum correction the velocities, then kept alive by *owner.
  // Only chunks in [first_chunk, end_chunk) are pushed (training.fragments):
  // error feedback and the top-k threshold look at those alone, so the
  // others keep their residuals and top-k keeps its fraction of what is sent.
  const float* Prepare(int64_t clock, const float* grad, std::shared_ptr<const void>* owner, uint32_t first_chunk = 0,
                       uint32_t end_chunk = UINT32_MAX);
  // Encodes chunk `chunk` of `dest` for the push Prepare started.
  Status Encode(size_t dest, int64_t clock, uint32_t chunk, std::vector<uint8_t>* bytes, PayloadInfo* info);

  const ErrorFeedback& error_feedback() const { return feedback_; }
  // The warm-up's fraction for `spec` at `clock` (see the options).
  double SparseFraction(const CodecSpec& spec, int64_t clock) const;

 private:
  struct Dest {
    int id = 0;
    CodecSpec spec;                    // fp32 unless the job says otherwise
    std::unique_ptr<Encoder> encoder;  // for lossy or zstd pushes
    double encoder_fraction = 0;       // sparse codecs: the fraction `encoder` uses now
    std::vector<uint32_t> chunks;
  };
  uint64_t Begin(uint32_t chunk) const { return uint64_t{chunk} * chunk_elems_; }
  uint64_t Size(uint32_t chunk) const;
  const float* CorrectMomentum(const float* grad, std::shared_ptr<const void>* owner);
  // Error feedback for every encoded chunk of `grad` in the push, into corrected_all_.
  void CorrectErrors(const float* grad);
  bool InPush(uint32_t chunk) const { return chunk >= first_chunk_ && chunk < end_chunk_; }
  // One threshold for every top-k chunk: topk_fraction_ per chunk.
  void PickTopKThreshold(int64_t clock);
  uint64_t DestSeed(const Dest& d) const;

  PushCompressorOptions options_;
  uint64_t num_params_ = 0, chunk_elems_ = 1;
  std::vector<Dest> dests_;
  ErrorFeedback feedback_;
  std::unordered_map<uint32_t, std::vector<float>> velocity_;  // momentum correction, per chunk
  std::shared_ptr<std::vector<float>> velocity_out_;           // this step's velocities, as sent
  std::vector<float> corrected_all_, sent_all_;                // lossy pushes, over the whole flat vector
  std::vector<float> magnitudes_;                              // top-k threshold scratch
  std::unordered_map<uint32_t, double> topk_fraction_;
  uint32_t first_chunk_ = 0, end_chunk_ = UINT32_MAX;  // the chunks Prepare's push sends
};

}  // namespace geodesic::compression
