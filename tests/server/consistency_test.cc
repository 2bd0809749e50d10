#include "server/consistency.h"

#include <gtest/gtest.h>

namespace geodesic::server {
namespace {

TEST(ClockTableTest, BoundAllowsReadsUpToSClocksAhead) {
  ClockTable t(2);
  t.SetLive({0, 1, 2}, {0, 0, 0});
  EXPECT_TRUE(t.CanRead(2));  // 2 - 0 <= 2
  EXPECT_FALSE(t.CanRead(3));
  t.Finished(0, 0);
  t.Finished(1, 0);
  EXPECT_FALSE(t.CanRead(3));  // worker 2 still at 0
  EXPECT_EQ(t.SlowestWorker(), 2);
  t.Finished(2, 0);
  EXPECT_EQ(t.MinClock(), 1);
  EXPECT_TRUE(t.CanRead(3));
}

TEST(ClockTableTest, BspWaitsForEveryone) {
  ClockTable t(0);
  t.SetLive({0, 1}, {0, 0});
  EXPECT_TRUE(t.CanRead(0));
  t.Finished(0, 0);
  EXPECT_FALSE(t.CanRead(1));
  t.Finished(1, 0);
  EXPECT_TRUE(t.CanRead(1));
}

TEST(ClockTableTest, DeadWorkerLeavesTheBound) {
  ClockTable t(1);
  t.SetLive({0, 1, 2}, {0, 0, 0});
  for (int c = 0; c < 5; ++c) {
    t.Finished(0, c);
    t.Finished(1, c);
  }
  EXPECT_FALSE(t.CanRead(5));  // worker 2 never moved
  t.SetLive({0, 1}, {5, 5});   // its lease expired
  EXPECT_TRUE(t.CanRead(5));
  EXPECT_TRUE(t.CanRead(6));
  EXPECT_EQ(t.MinClock(), 5);
  EXPECT_FALSE(t.IsLive(2));
}

TEST(ClockTableTest, CoordinatorClocksSeedOnlyUnseenWorkers) {
  ClockTable t(0);
  t.SetLive({0}, {0});
  t.Finished(0, 0);
  // The coordinator thinks worker 0 is at 9 (its pushes may still be in
  // flight to us): our own count wins. A new worker 1 starts at 9.
  t.SetLive({0, 1}, {9, 9});
  EXPECT_EQ(t.ClockOf(0), 1);
  EXPECT_EQ(t.ClockOf(1), 9);
}

TEST(ClockTableTest, HugeBoundIsFullyAsynchronousWithoutOverflow) {
  ClockTable t(int64_t{1} << 40);
  t.SetLive({0, 1}, {0, 0});
  EXPECT_TRUE(t.CanRead(int64_t{1} << 39));
  ClockTable none(0);
  EXPECT_TRUE(none.CanRead(100));  // no live workers: nothing to wait for
}

// A worker that left the live set and comes back (it died and rejoined)
// starts where the coordinator started it; a live worker's clock moves only
// with its own pushes, whatever the coordinator says.
TEST(ClockTableTest, AWorkerComingBackTakesTheCoordinatorsClock) {
  ClockTable t(0);
  t.SetLive({0, 1}, {0, 0});
  t.Finished(0, 9);
  t.Finished(1, 4);
  t.SetLive({0}, {10});         // worker 1's lease ran out
  t.SetLive({0, 1}, {10, 10});  // it rejoined at the live clock
  EXPECT_EQ(t.ClockOf(1), 10);
  EXPECT_TRUE(t.CanRead(10));
  t.SetLive({0, 1}, {25, 25});  // both live: the coordinator's clock is not trusted
  EXPECT_EQ(t.ClockOf(0), 10);
  EXPECT_EQ(t.ClockOf(1), 10);
}

// The frontier is the highest minimum the live set has reached: a rejoin
// seeded behind it (the coordinator's view lags) lowers MinClock, not it;
// a worker that jumps ahead of it still moves it once the slowest does.
TEST(ClockTableTest, TheFrontierNeverFallsWhenARejoinIsSeededBehind) {
  ClockTable t(0);
  EXPECT_EQ(t.Frontier(), ClockTable::kNoWorkers);
  t.SetLive({0, 1}, {0, 0});
  EXPECT_EQ(t.Frontier(), 0);
  for (int64_t c = 0; c < 12; ++c) t.Finished(0, c), t.Finished(1, c);
  EXPECT_EQ(t.Frontier(), 12);
  t.SetLive({0}, {12});  // worker 1 died at clock 12; worker 0 goes on
  for (int64_t c = 12; c < 41; ++c) t.Finished(0, c);
  EXPECT_EQ(t.Frontier(), 41);
  t.SetLive({0, 1}, {41, 10});  // worker 1 rejoins where it was
  EXPECT_EQ(t.MinClock(), 12);
  EXPECT_EQ(t.Frontier(), 41);
  t.Finished(1, 50);  // it skips ahead past the others
  EXPECT_EQ(t.MinClock(), 41);
  t.Finished(0, 44);
  EXPECT_EQ(t.Frontier(), 45);
}

}  // namespace
}  // namespace geodesic::server
