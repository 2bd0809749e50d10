// BatchSampler: the order in which a worker visits its partition. Each epoch
// is a fresh seeded shuffle of the partition, cut into full batches (a last
// partial batch is skipped), so a run is reproducible from (seed, worker)
// and tests can recompute any worker's batches. Torch-free; not synchronized.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace geodesic::worker {

class BatchSampler {
 public:
  BatchSampler(std::vector<int64_t> indices, int batch_size, uint64_t seed);

  // Indices (into the full training set) of the next batch.
  const std::vector<int64_t>& Next();
  int64_t epoch() const { return epoch_; }

 private:
  void Shuffle();

  std::vector<int64_t> indices_;
  std::vector<int64_t> batch_;
  int batch_size_;
  std::mt19937_64 rng_;
  size_t pos_ = 0;
  int64_t epoch_ = 0;
};

// The sampler seed of worker `worker` in a job seeded `job_seed`.
uint64_t SamplerSeed(uint64_t job_seed, int worker);

}  // namespace geodesic::worker
