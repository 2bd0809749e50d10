#include "common/histogram.h"

#include <algorithm>
#include <limits>

namespace geodesic {

void IntHistogram::Add(int64_t value, uint64_t count) {
  if (value < 0) value = 0;
  counts_[std::min<int64_t>(value, kBuckets)] += count;
  total_ += count;
  max_ = std::max(max_, value);
  sum_ += static_cast<double>(value) * static_cast<double>(count);
}

void IntHistogram::Merge(const IntHistogram& other) {
  for (int i = 0; i <= kBuckets; ++i) counts_[i] += other.counts_[i];
  total_ += other.total_;
  max_ = std::max(max_, other.max_);
  sum_ += other.sum_;
}

double IntHistogram::Mean() const { return total_ ? sum_ / static_cast<double>(total_) : 0.0; }

int64_t IntHistogram::Quantile(double q) const {
  if (total_ == 0) return 0;
  uint64_t need = static_cast<uint64_t>(q * static_cast<double>(total_));
  if (need == 0) need = 1;
  uint64_t acc = 0;
  for (int i = 0; i <= kBuckets; ++i) {
    acc += counts_[i];
    if (acc >= need) return i == kBuckets ? max_ : i;
  }
  return max_;
}

std::map<int64_t, uint64_t> IntHistogram::NonZero() const {
  std::map<int64_t, uint64_t> out;
  for (int i = 0; i <= kBuckets; ++i)
    if (counts_[i]) out[i] = counts_[i];
  return out;
}

const std::vector<double>& DurationHistogram::Bounds() {
  static const std::vector<double> bounds = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10};
  return bounds;
}

void DurationHistogram::Observe(double seconds) {
  const auto& b = Bounds();
  counts_[static_cast<size_t>(std::lower_bound(b.begin(), b.end(), seconds) - b.begin())]++;
  ++count_;
  sum_ += seconds;
}

std::vector<std::pair<double, uint64_t>> DurationHistogram::Cumulative() const {
  std::vector<std::pair<double, uint64_t>> out;
  uint64_t total = 0;
  for (size_t i = 0; i < Bounds().size(); ++i) out.emplace_back(Bounds()[i], total += counts_[i]);
  out.emplace_back(std::numeric_limits<double>::infinity(), count_);
  return out;
}

}  // namespace geodesic
