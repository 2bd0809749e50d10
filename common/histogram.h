// A histogram of small non-negative integers (staleness in updates), with
// exact counts for 0..kBuckets-1 and one overflow bucket. Value type; not
// synchronized.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace geodesic {

class IntHistogram {
 public:
  static constexpr int kBuckets = 64;

  void Add(int64_t value, uint64_t count = 1);
  void Merge(const IntHistogram& other);
  uint64_t total() const { return total_; }
  int64_t max() const { return max_; }
  double Mean() const;
  // The smallest value v with at least q of the mass at or below v.
  int64_t Quantile(double q) const;
  // Non-zero buckets; the overflow bucket is keyed kBuckets.
  std::map<int64_t, uint64_t> NonZero() const;

 private:
  std::array<uint64_t, kBuckets + 1> counts_{};
  uint64_t total_ = 0;
  int64_t max_ = 0;
  double sum_ = 0;
};

// Durations in fixed buckets from 1 ms to 10 s (and one over), for latency
// histograms. Value type; not synchronized.
class DurationHistogram {
 public:
  // Upper bounds (s), ascending; the last bucket is everything above.
  static const std::vector<double>& Bounds();

  void Observe(double seconds);
  // (upper bound, observations at or below it) per bound, then (+inf, all).
  std::vector<std::pair<double, uint64_t>> Cumulative() const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<uint64_t> counts_ = std::vector<uint64_t>(Bounds().size() + 1, 0);
  uint64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace geodesic
