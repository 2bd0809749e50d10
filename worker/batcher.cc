#include "worker/batcher.h"

#include <algorithm>

namespace geodesic::worker {

BatchSampler::BatchSampler(std::vector<int64_t> indices, int batch_size, uint64_t seed)
    : indices_(std::move(indices)), batch_size_(std::max(1, batch_size)), rng_(seed) {
  // A partition smaller than one batch is trained on whole.
  if (static_cast<int64_t>(indices_.size()) < batch_size_) batch_size_ = static_cast<int>(indices_.size());
  Shuffle();
}

void BatchSampler::Shuffle() {
  for (int64_t i = static_cast<int64_t>(indices_.size()) - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng_() % static_cast<uint64_t>(i + 1));
    std::swap(indices_[i], indices_[j]);
  }
  pos_ = 0;
}

const std::vector<int64_t>& BatchSampler::Next() {
  if (pos_ + batch_size_ > indices_.size()) {
    ++epoch_;
    Shuffle();
  }
  batch_.assign(indices_.begin() + static_cast<std::ptrdiff_t>(pos_),
                indices_.begin() + static_cast<std::ptrdiff_t>(pos_ + batch_size_));
  pos_ += batch_size_;
  return batch_;
}

uint64_t SamplerSeed(uint64_t job_seed, int worker) {
  return job_seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(worker) * 1000003ull + 17;
}

}  // namespace geodesic::worker
