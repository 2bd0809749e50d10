#include "common/histogram.h"

#include <cmath>

#include <gtest/gtest.h>

namespace geodesic {
namespace {

TEST(HistogramTest, CountsQuantilesAndOverflow) {
  IntHistogram h;
  for (int i = 0; i < 10; ++i) h.Add(i);
  h.Add(1000);
  h.Add(-3);  // clamped to 0
  EXPECT_EQ(h.total(), 12u);
  EXPECT_EQ(h.max(), 1000);
  EXPECT_EQ(h.Quantile(0.5), 4);
  EXPECT_EQ(h.Quantile(1.0), 1000);
  auto nz = h.NonZero();
  EXPECT_EQ(nz[0], 2u);
  EXPECT_EQ(nz[IntHistogram::kBuckets], 1u);
  IntHistogram g;
  g.Add(2, 5);
  h.Merge(g);
  EXPECT_EQ(h.total(), 17u);
  EXPECT_EQ(h.NonZero()[2], 6u);
}

TEST(DurationHistogramTest, BucketsAreCumulativeAndEndWithEverything) {
  DurationHistogram h;
  for (double s : {0.0005, 0.001, 0.0015, 0.3, 42.0}) h.Observe(s);
  auto c = h.Cumulative();
  ASSERT_EQ(c.size(), DurationHistogram::Bounds().size() + 1);
  EXPECT_EQ(c[0], (std::pair<double, uint64_t>{0.001, 2})) << "at or below 1 ms";
  EXPECT_EQ(c[1].second, 3u);
  EXPECT_EQ(c[8], (std::pair<double, uint64_t>{0.5, 4}));
  EXPECT_EQ(c[12].second, 4u) << "42 s is over the last bound";
  EXPECT_TRUE(std::isinf(c.back().first));
  EXPECT_EQ(c.back().second, 5u);
  EXPECT_EQ(h.count(), 5u);
  EXPECT_NEAR(h.sum(), 42.303, 1e-9);
}

}  // namespace
}  // namespace geodesic
