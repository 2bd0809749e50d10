#include "common/draws.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace geodesic {
namespace {

// The keys and first values are pinned: a change here changes every
// seeded partition, selection and noise, so it must be deliberate.
TEST(DrawsTest, KeysAndCounterStreamsArePinned) {
  EXPECT_EQ(Mix64(0), 0u);
  EXPECT_EQ(DrawKey({7}), Mix64(7));
  EXPECT_EQ(DrawKey({7, 3}), Mix64(Mix64(7) ^ 3));
  EXPECT_NE(DrawKey({7, 3}), DrawKey({3, 7}));
  CounterSource s(DrawKey({1, 2, 3}));
  const uint64_t first = s();
  EXPECT_EQ(first, Mix64(DrawKey({1, 2, 3}) + kGolden64));
  EXPECT_NE(s(), first);
}

TEST(DrawsTest, UniformIsInsideTheOpenUnitInterval) {
  CounterDraws d{CounterSource(5)};
  double lo = 1, hi = 0, sum = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = d.Uniform();
    lo = std::min(lo, u), hi = std::max(hi, u), sum += u;
  }
  EXPECT_GT(lo, 0.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_NEAR(sum / n, 0.5, 0.005);
}

TEST(DrawsTest, NormalAndGammaHaveTheirMoments) {
  Draws<std::mt19937_64> d(std::mt19937_64(11));
  const int n = 200000;
  double s = 0, sq = 0, g = 0, gs = 0;
  for (int i = 0; i < n; ++i) {
    const double x = d.Normal(), y = d.Gamma(0.3);
    s += x, sq += x * x, g += y, gs += y * y;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.01);
  EXPECT_NEAR(g / n, 0.3, 0.005);                      // Gamma(k, 1): mean k
  EXPECT_NEAR(gs / n - (g / n) * (g / n), 0.3, 0.01);  // variance k
}

TEST(DrawsTest, ShuffleIsAPermutationAndFollowsTheSeed) {
  std::vector<int> a(1000), b;
  for (int i = 0; i < 1000; ++i) a[i] = i;
  b = a;
  Draws<std::mt19937_64>(std::mt19937_64(3)).Shuffle(a);
  Draws<std::mt19937_64>(std::mt19937_64(3)).Shuffle(b);
  EXPECT_EQ(a, b);
  EXPECT_EQ(std::set<int>(a.begin(), a.end()).size(), 1000u);
  EXPECT_NE(a[0] * 1000 + a[1], 1);  // moved
}

}  // namespace
}  // namespace geodesic
