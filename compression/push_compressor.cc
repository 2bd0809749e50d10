#include "compression/push_compressor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/log.h"

namespace geodesic::compression {

PushCompressor::PushCompressor(PushCompressorOptions options, uint64_t num_params, uint64_t chunk_elems)
    : options_(options), num_params_(num_params), chunk_elems_(std::max<uint64_t>(chunk_elems, 1)) {}

uint64_t PushCompressor::Size(uint32_t chunk) const {
  const uint64_t b = Begin(chunk);
  return b >= num_params_ ? 0 : std::min(chunk_elems_, num_params_ - b);
}

uint64_t PushCompressor::DestSeed(const Dest& d) const {
  return options_.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(options_.sender) * 31 + d.id;
}

void PushCompressor::SetCodec(size_t dest, int dest_id, const CodecSpec& spec) {
  if (dests_.size() <= dest) dests_.resize(dest + 1);
  Dest& d = dests_[dest];
  d.id = dest_id;
  d.spec = spec;
  d.encoder_fraction = 0;
  d.encoder = spec.lossy() || spec.zstd_level > 0 ? std::make_unique<Encoder>(spec, DestSeed(d)) : nullptr;
}

void PushCompressor::SetChunks(size_t dest, std::vector<uint32_t> chunks) {
  if (dests_.size() <= dest) dests_.resize(dest + 1);
  dests_[dest].chunks = std::move(chunks);
}

double PushCompressor::SparseFraction(const CodecSpec& spec, int64_t clock) const {
  // Sparsity warm-up: from 25% of the values down to the codec's fraction.
  double f = spec.fraction;
  const int64_t w = options_.sparsity_warmup_steps;
  if (w > 0 && clock < w && f < 0.25)
    f = 0.25 * std::pow(f / 0.25, static_cast<double>(clock) / static_cast<double>(w));
  return std::max(f, spec.fraction);
}

const float* PushCompressor::Prepare(int64_t clock, const float* grad, std::shared_ptr<const void>* owner,
                                     uint32_t first_chunk, uint32_t end_chunk) {
  first_chunk_ = first_chunk;
  end_chunk_ = end_chunk;
  if (options_.local_momentum > 0) grad = CorrectMomentum(grad, owner);
  bool lossy = false;
  for (const Dest& d : dests_) lossy |= static_cast<bool>(d.encoder);
  if (lossy) {
    CorrectErrors(grad);
    PickTopKThreshold(clock);
  }
  return grad;
}

const float* PushCompressor::CorrectMomentum(const float* grad, std::shared_ptr<const void>* owner) {
  // Momentum correction: push velocities, held in a fresh buffer that the
  // sends own. The masking after a sparse encode is done in Encode.
  const float mu = static_cast<float>(options_.local_momentum);
  velocity_out_ = std::make_shared<std::vector<float>>(num_params_);
  const uint32_t chunks = static_cast<uint32_t>((num_params_ + chunk_elems_ - 1) / chunk_elems_);
  for (uint32_t c = 0; c < chunks; ++c) {
    const uint64_t n = Size(c), b = Begin(c);
    std::vector<float>& v = velocity_[c];
    if (v.size() != n) v.assign(n, 0.0f);
    float* out = velocity_out_->data() + b;
    for (uint64_t i = 0; i < n; ++i) out[i] = v[i] = mu * v[i] + grad[b + i];
  }
  *owner = std::shared_ptr<const void>(velocity_out_, velocity_out_->data());
  return velocity_out_->data();
}

void PushCompressor::CorrectErrors(const float* grad) {
  corrected_all_.resize(num_params_);
  sent_all_.resize(num_params_);
  // Error feedback first: what each chunk would send if nothing were dropped.
  for (const Dest& d : dests_) {
    if (!d.encoder) continue;
    const bool feedback = options_.error_feedback && d.spec.lossy();
    for (uint32_t c : d.chunks) {
      if (!InPush(c)) continue;
      const uint64_t n = Size(c), b = Begin(c);
      if (feedback)
        feedback_.Correct(c, grad + b, n, corrected_all_.data() + b);
      else
        std::memcpy(corrected_all_.data() + b, grad + b, n * sizeof(float));
    }
  }
}

// Top-k picks its values across the whole model, not chunk by chunk: one
// threshold for every top-k chunk, so a small layer with large gradients
// (the classifier) is not starved by sharing a chunk's quota. Each chunk
// then sends what is above the threshold (at least one value).
void PushCompressor::PickTopKThreshold(int64_t clock) {
  topk_fraction_.clear();
  magnitudes_.clear();
  uint64_t budget = 0;
  for (const Dest& d : dests_) {
    if (!d.encoder || d.spec.codec != wire::TOPK) continue;
    const double f = SparseFraction(d.spec, clock);
    for (uint32_t c : d.chunks) {
      if (!InPush(c)) continue;
      const uint64_t n = Size(c), b = Begin(c);
      budget += static_cast<uint64_t>(std::ceil(f * static_cast<double>(n)));
      for (uint64_t i = 0; i < n; ++i) magnitudes_.push_back(std::fabs(corrected_all_[b + i]));
    }
  }
  if (magnitudes_.empty()) return;
  budget = std::clamp<uint64_t>(budget, 1, magnitudes_.size());
  // An exact order statistic up to a few million values, a sample's beyond.
  std::vector<float>& pool = magnitudes_;
  if (pool.size() > (uint64_t{1} << 22)) {
    const uint64_t stride = pool.size() >> 20;
    size_t w = 0;
    for (size_t i = 0; i < pool.size(); i += stride) pool[w++] = pool[i];
    budget = std::max<uint64_t>(1, budget / stride);
    pool.resize(w);
  }
  auto nth = pool.begin() + static_cast<std::ptrdiff_t>(pool.size() - budget);
  std::nth_element(pool.begin(), nth, pool.end());
  const float threshold = *nth;
  for (const Dest& d : dests_) {
    if (!d.encoder || d.spec.codec != wire::TOPK) continue;
    for (uint32_t c : d.chunks) {
      if (!InPush(c)) continue;
      const uint64_t n = Size(c), b = Begin(c);
      uint64_t above = 0;
      for (uint64_t i = 0; i < n; ++i) above += std::fabs(corrected_all_[b + i]) >= threshold;
      topk_fraction_[c] = static_cast<double>(std::max<uint64_t>(above, 1)) / static_cast<double>(n);
    }
  }
}

Status PushCompressor::Encode(size_t dest, int64_t clock, uint32_t c, std::vector<uint8_t>* bytes, PayloadInfo* info) {
  GD_CHECK(encodes(dest)) << "destination " << dest << " does not encode";
  Dest& d = dests_[dest];
  const bool feedback = options_.error_feedback && d.spec.lossy();
  if (d.spec.codec == wire::RANDK) {
    double f = SparseFraction(d.spec, clock);
    if (f != d.encoder_fraction) {
      CodecSpec spec = d.spec;
      spec.fraction = f;
      d.encoder = std::make_unique<Encoder>(spec, DestSeed(d) + static_cast<uint64_t>(clock));
      d.encoder_fraction = f;
    }
  }
  GD_CHECK(InPush(c)) << "chunk " << c << " is outside the push Prepare started";
  const uint64_t n = Size(c), b = Begin(c);
  const float* values = corrected_all_.data() + b;
  float* sent = sent_all_.data() + b;
  Encoder* encoder = d.encoder.get();
  std::unique_ptr<Encoder> own;
  if (d.spec.codec == wire::TOPK) {
    CodecSpec spec = d.spec;
    spec.fraction = std::min(1.0, topk_fraction_[c]);
    own = std::make_unique<Encoder>(spec, options_.seed + c);
    encoder = own.get();
  }
  GD_RETURN_IF_ERROR(
      encoder->Encode(values, n, bytes, info, feedback ? sent : nullptr).Annotate("chunk " + std::to_string(c)));
  if (feedback) feedback_.Remember(c, values, sent, n);
  if (options_.local_momentum > 0 && d.spec.sparse() && feedback) {
    // Momentum factor masking (DGC): where a value went out, its momentum
    // starts over, so a sent coordinate is not pushed again by momentum alone.
    std::vector<float>& v = velocity_[c];
    for (uint64_t i = 0; i < n; ++i)
      if (sent[i] != 0.0f) v[i] = 0.0f;
  }
  return Status::Ok();
}

}  // namespace geodesic::compression
