// Statistics of repeated measurements, shared by the benches (one
// definition each: the bench library is compiled in unity batches, where
// two files' helpers of one name would collide). Internal to bench/. Pure
// functions.
#pragma once

#include <algorithm>
#include <vector>

namespace geodesic::bench {

// The middle sample, or the mean of the two middle ones for an even count;
// 0 for none.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The middle sample, or the upper of the two middle ones for an even count
// (the codec and transport benches' statistic); 0 for none.
inline double UpperMedian(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace geodesic::bench
