#include "worker/chunk_codec.h"

#include <cmath>

#include "common/log.h"

namespace geodesic::worker {

ChunkCodec::ChunkCodec(compression::PushCompressorOptions options, const cluster::ChunkLayout& layout)
    : layout_(layout),
      compressor_(std::make_unique<compression::PushCompressor>(options, layout.num_params(), layout.chunk_elems())),
      versions_(layout.num_chunks(), 0),
      copy_seq_(layout.num_chunks(), -1) {}

const float* ChunkCodec::Prepare(int64_t clock, const float* grad, std::shared_ptr<const void>* owner,
                                 const std::optional<cluster::ChunkRange>& only) {
  return only ? compressor_->Prepare(clock, grad, owner, only->begin, only->end)
              : compressor_->Prepare(clock, grad, owner);
}

Status ChunkCodec::AddPush(size_t si, int64_t clock, const std::vector<uint32_t>& batch, const float* values,
                           const std::shared_ptr<const void>& owner,
                           google::protobuf::RepeatedPtrField<wire::ChunkData>* descriptors,
                           std::vector<transport::Payload>* payloads) {
  if (compressor_->encodes(si)) return Encode(si, clock, batch, descriptors, payloads);
  AddValues(batch, values, owner, descriptors, payloads);  // fp32, zero-copy
  return Status::Ok();
}

Status ChunkCodec::Encode(size_t si, int64_t clock, const std::vector<uint32_t>& batch,
                          google::protobuf::RepeatedPtrField<wire::ChunkData>* descriptors,
                          std::vector<transport::Payload>* payloads) {
  for (uint32_t c : batch) {
    auto bytes = std::make_shared<std::vector<uint8_t>>();
    compression::PayloadInfo info;
    GD_RETURN_IF_ERROR(compressor_->Encode(si, clock, c, bytes.get(), &info));
    auto* d = descriptors->Add();
    d->set_chunk_id(c);
    d->set_num_elems(layout_.Size(c));
    d->set_version(versions_[c]);
    info.ToWire(d);
    payloads->push_back(
        transport::Payload{bytes->data(), bytes->size(), std::shared_ptr<const void>(bytes, bytes->data())});
  }
  return Status::Ok();
}

void ChunkCodec::AddValues(const std::vector<uint32_t>& batch, const float* base,
                           const std::shared_ptr<const void>& owner,
                           google::protobuf::RepeatedPtrField<wire::ChunkData>* descriptors,
                           std::vector<transport::Payload>* payloads) const {
  for (uint32_t c : batch) {
    auto* d = descriptors->Add();
    d->set_chunk_id(c);
    d->set_codec(wire::FP32);
    d->set_num_elems(layout_.Size(c));
    d->set_version(versions_[c]);
    const float* values = base + layout_.Begin(c);
    size_t size = layout_.Size(c) * sizeof(float);
    payloads->push_back(owner ? transport::Payload{values, size, owner} : transport::CopyPayload(values, size));
  }
}

StatusOr<bool> ChunkCodec::Decode(float* dest, const wire::ChunkData& d, const zmq::message_t& frame) {
  const uint32_t c = d.chunk_id();
  float* out = dest + layout_.Begin(c);
  if (d.delta()) {
    if (copy_seq_[c] < 0 || static_cast<uint64_t>(copy_seq_[c]) != d.base_seq()) {
      // The change is for a copy we do not hold (a reply was lost or a
      // resend answered twice): ask for this chunk's values again.
      ++resyncs_;
      // At most a line every 10 s, with the chunks since the last one.
      const auto now = std::chrono::steady_clock::now();
      if (resyncs_logged_ == 0 || now - resync_logged_at_ > std::chrono::seconds(10)) {
        const uint64_t since = resyncs_ - resyncs_logged_;
        GD_LOG(WARNING) << "chunk " << c << ": change " << d.base_seq() << " does not fit our copy " << copy_seq_[c]
                        << "; asking for full values (logged at most every 10 s; "
                        << (since > 1 ? std::to_string(since) + " chunks since the last such line; " : "")
                        << "all counted in pull_resyncs)";
        resync_logged_at_ = now;
        resyncs_logged_ = resyncs_;
      }
      return false;
    }
    GD_RETURN_IF_ERROR(AddChange(out, d, frame));
    copy_seq_[c] = static_cast<int64_t>(d.base_seq()) + 1;
  } else {
    const compression::PayloadInfo info = compression::PayloadInfo::FromWire(d);
    GD_RETURN_IF_ERROR(compression::Decode(info, frame.data(), frame.size(), d.num_elems(), out, &zstd_scratch_));
    copy_seq_[c] = 0;
  }
  versions_[c] = d.version();
  return true;
}

// Decoded aside first: a change that would make our copy non-finite
// (finite values can still overflow when added) is refused whole.
Status ChunkCodec::AddChange(float* out, const wire::ChunkData& d, const zmq::message_t& frame) {
  const compression::PayloadInfo info = compression::PayloadInfo::FromWire(d);
  scratch_.resize(d.num_elems());
  GD_RETURN_IF_ERROR(
      compression::Decode(info, frame.data(), frame.size(), d.num_elems(), scratch_.data(), &zstd_scratch_));
  for (uint64_t i = 0; i < d.num_elems(); ++i)
    if (!std::isfinite(out[i] + scratch_[i]))
      return InvalidArgument("chunk " + std::to_string(d.chunk_id()) + ": the change from the server makes value " +
                             std::to_string(i) + " non-finite");
  for (uint64_t i = 0; i < d.num_elems(); ++i) out[i] += scratch_[i];
  return Status::Ok();
}

Status ChunkCodec::CheckBorrowable(const wire::ChunkData& d, const zmq::message_t& frame) {
  // Borrowed values are read in place: only fp32 frames qualify (their size
  // was checked on arrival, CheckPulledChunk).
  if (d.codec() != wire::FP32 || d.zstd() || d.delta())
    return InvalidArgument("zero-copy pulls need plain fp32 values");
  uint64_t first = 0;
  if (size_t bad = compression::CountNonFinite(static_cast<const float*>(frame.data()), d.num_elems(), &first))
    return InvalidArgument("server sent chunk " + std::to_string(d.chunk_id()) + " with " + std::to_string(bad) +
                           " non-finite values (first at index " + std::to_string(first) + ")");
  return Status::Ok();
}

void ChunkCodec::ForgetCopies(const std::vector<uint32_t>& chunks) {
  for (uint32_t c : chunks) copy_seq_[c] = -1;
}

double ChunkCodec::residual_norm() const { return std::sqrt(compressor_->error_feedback().ResidualSquaredNorm()); }

}  // namespace geodesic::worker
