// ChunkCodec: a PsClient's compression policy, both ways, apart from the
// transport. Pushes: compression::PushCompressor's policy (momentum
// correction, error feedback, the global top-k threshold, the warm-up)
// and each shard's push codec; chunks for a shard without a codec go as
// plain fp32, zero-copy. Pulls: a chunk's payload (full values, or a
// change to the copy we hold, under the shard's pull codec) is decoded into
// the caller's buffer, keeping per chunk the version we hold and how many
// changes our copy took since full values; a change made for another copy
// is not applied and the chunk must be asked for again in full (a
// resync). A zero-copy read checks instead that a frame can be read in
// place. Plain values and bytes, no sockets; torch-free.
//
// Shards are numbered by their index in the PsClient (ShardRoutes). Not
// synchronized: the PsClient's thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>
#include <zmq.hpp>

#include "cluster/chunking.h"
#include "common/status.h"
#include "compression/codec.h"
#include "compression/push_compressor.h"
#include "proto/geodesic.pb.h"
#include "transport/message.h"

namespace geodesic::worker {

class ChunkCodec {
 public:
  ChunkCodec(compression::PushCompressorOptions options, const cluster::ChunkLayout& layout);

  // Shard `si` (server id `id`) takes pushes in `spec`; fp32 by default.
  void SetCodec(size_t si, int id, const compression::CodecSpec& spec) { compressor_->SetCodec(si, id, spec); }
  // The chunks shard `si` owns now.
  void SetChunks(size_t si, const std::vector<uint32_t>& chunks) { compressor_->SetChunks(si, chunks); }

  // Starts clock `clock`'s push of `grad` (only the chunks in `only`, when
  // set); returns the values to send raw (see PushCompressor::Prepare).
  const float* Prepare(int64_t clock, const float* grad, std::shared_ptr<const void>* owner,
                       const std::optional<cluster::ChunkRange>& only);
  // Describes the chunks `batch` of the push Prepare started, for shard
  // `si`, and adds their payloads: zero-copy views of `values` under
  // `owner` for a shard without a codec, encoded bytes otherwise.
  Status AddPush(size_t si, int64_t clock, const std::vector<uint32_t>& batch, const float* values,
                 const std::shared_ptr<const void>& owner,
                 google::protobuf::RepeatedPtrField<wire::ChunkData>* descriptors,
                 std::vector<transport::Payload>* payloads);
  // Describes `batch` as fp32 values at `base` (with the versions we hold)
  // and adds them: zero-copy under `owner`, or copied if it is null.
  void AddValues(const std::vector<uint32_t>& batch, const float* base, const std::shared_ptr<const void>& owner,
                 google::protobuf::RepeatedPtrField<wire::ChunkData>* descriptors,
                 std::vector<transport::Payload>* payloads) const;

  // Decodes pulled chunk `d` (its size already checked) into its place in
  // `dest`. False, with nothing written, when it is a change for a copy we
  // do not hold: ask for the chunk's full values (counted, logged).
  // InvalidArgument for a payload that does not decode or a change that
  // would make a value non-finite (nothing written either).
  StatusOr<bool> Decode(float* dest, const wire::ChunkData& d, const zmq::message_t& frame);
  // InvalidArgument unless a pulled chunk (its size already checked) can be
  // read in place: plain fp32, every value finite.
  static Status CheckBorrowable(const wire::ChunkData& d, const zmq::message_t& frame);
  // A chunk read in place: we hold its version now.
  void Borrowed(const wire::ChunkData& d) { versions_[d.chunk_id()] = d.version(); }
  // We hold `chunk`'s initial values as its shard does (InitAck.held_chunks):
  // version 0, and the shard's changes start from them.
  void HoldInitial(uint32_t chunk) {
    versions_[chunk] = 0;
    copy_seq_[chunk] = 0;
  }
  // Chunks that changed owner: their new owner keeps no copy of ours.
  void ForgetCopies(const std::vector<uint32_t>& chunks);

  // The version of `chunk` we hold (0 before any pull).
  uint64_t version(uint32_t chunk) const { return versions_[chunk]; }
  uint64_t resyncs() const { return resyncs_; }
  double residual_norm() const;

 private:
  Status Encode(size_t si, int64_t clock, const std::vector<uint32_t>& batch,
                google::protobuf::RepeatedPtrField<wire::ChunkData>* descriptors,
                std::vector<transport::Payload>* payloads);
  Status AddChange(float* out, const wire::ChunkData& d, const zmq::message_t& frame);

  cluster::ChunkLayout layout_;
  std::unique_ptr<compression::PushCompressor> compressor_;
  std::vector<uint64_t> versions_;  // per chunk: version of the values we hold
  std::vector<int64_t> copy_seq_;   // per chunk: changes applied since full values (-1: none)
  std::vector<float> scratch_;
  std::vector<uint8_t> zstd_scratch_;
  uint64_t resyncs_ = 0;
  // The last resync warning (one a burst: a reroute answers every chunk
  // with a change for the old copy) and the count it reported.
  std::chrono::steady_clock::time_point resync_logged_at_{};
  uint64_t resyncs_logged_ = 0;
};

}  // namespace geodesic::worker
