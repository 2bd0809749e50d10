#include "common/histogram.h"

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

}  // namespace
}  // namespace geodesic
