#include "compression/pull_compressor.h"

#include <algorithm>
#include <cstring>

namespace geodesic::compression {
namespace {

SharedBytes Fp32Payload(const ChunkValues& values) {
  return SharedBytes{values.data.get(), values.n * sizeof(float),
                     std::shared_ptr<const void>(values.data, values.data.get())};
}

SharedBytes Owned(std::shared_ptr<std::vector<uint8_t>> out) {
  return SharedBytes{out->data(), out->size(), std::shared_ptr<const void>(out, out->data())};
}

}  // namespace

PullCompressor::WorkerState& PullCompressor::StateOf(int worker, const CodecSpec& codec) {
  WorkerState& w = copies_[worker];
  if (!w.encoder || w.codec_name != codec.Name()) {
    w.encoder = std::make_unique<Encoder>(codec, seed_ * 1000003 + static_cast<uint64_t>(worker));
    w.codec_name = codec.Name();
  }
  return w;
}

void PullCompressor::Assume(int worker, const CodecSpec& codec, uint32_t chunk, const ChunkValues& values) {
  if (!codec.lossy()) return;
  Copy& copy = StateOf(worker, codec).chunks[chunk];
  copy.valid = true;
  copy.seq = 0;
  copy.values.assign(values.data.get(), values.data.get() + values.n);
}

StatusOr<SharedBytes> PullCompressor::Encode(int worker, const CodecSpec& codec, uint32_t chunk,
                                             const ChunkValues& values, bool full, wire::ChunkData* d) {
  const uint64_t n = values.n;
  d->set_codec(wire::FP32);
  d->set_delta(false);
  if (!codec.lossy() && codec.zstd_level == 0) return Fp32Payload(values);  // plain values, zero-copy

  if (!codec.lossy()) {
    // fp32 + zstd: lossless, so the values themselves, compressed.
    Encoder enc(codec, seed_);
    auto out = std::make_shared<std::vector<uint8_t>>();
    PayloadInfo info;
    GD_RETURN_IF_ERROR(enc.Encode(values.data.get(), n, out.get(), &info, nullptr));
    info.ToWire(d);
    return Owned(std::move(out));
  }

  WorkerState& w = StateOf(worker, codec);
  Copy& copy = w.chunks[chunk];
  auto send_values = [&]() {
    copy.valid = true;
    copy.seq = 0;
    copy.values.assign(values.data.get(), values.data.get() + n);
    return Fp32Payload(values);
  };
  if (full || !copy.valid || copy.values.size() != n) return send_values();

  delta_.resize(n);
  sent_.resize(n);
  const float* now = values.data.get();
  for (uint64_t i = 0; i < n; ++i) delta_[i] = now[i] - copy.values[i];
  auto out = std::make_shared<std::vector<uint8_t>>();
  PayloadInfo info;
  GD_RETURN_IF_ERROR(w.encoder->Encode(delta_.data(), n, out.get(), &info, sent_.data()));
  if (out->size() >= n * sizeof(float)) return send_values();  // the change is no cheaper than the values
  // The worker will add exactly `sent_`; so does our copy of what it holds.
  for (uint64_t i = 0; i < n; ++i) copy.values[i] += sent_[i];
  info.ToWire(d);
  d->set_delta(true);
  d->set_base_seq(copy.seq);
  ++copy.seq;
  return Owned(std::move(out));
}

void PullCompressor::ForgetWorkersBut(const std::vector<int>& live) {
  for (auto it = copies_.begin(); it != copies_.end();) {
    if (it->first >= 0 && std::find(live.begin(), live.end(), it->first) == live.end())
      it = copies_.erase(it);
    else
      ++it;
  }
}

}  // namespace geodesic::compression
