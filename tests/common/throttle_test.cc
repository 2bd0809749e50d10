#include "common/throttle.h"

#include <gtest/gtest.h>

namespace geodesic {
namespace {

TEST(ThrottleTest, LetsOneThroughPerPeriodAndCountsTheRest) {
  FakeClock clock;
  Throttle t(std::chrono::seconds(1));
  uint64_t skipped = 99;
  EXPECT_TRUE(t.Due(clock.Now(), &skipped));
  EXPECT_EQ(skipped, 0u);
  EXPECT_FALSE(t.Due(clock.Now(), &skipped));
  clock.Advance(std::chrono::milliseconds(999));
  EXPECT_FALSE(t.Due(clock.Now(), &skipped));
  clock.Advance(std::chrono::milliseconds(1));
  EXPECT_TRUE(t.Due(clock.Now(), &skipped));
  EXPECT_EQ(skipped, 2u);
}

}  // namespace
}  // namespace geodesic
