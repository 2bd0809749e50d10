// FedBuff's schedule: by hand on two clients, and its invariants on a
// population with stragglers and dropouts.
#include "worker/federated/buffered.h"

#include <gtest/gtest.h>

namespace geodesic::federated {
namespace {

// Client 0 takes 1 s, client 1 takes 3 s, both always in flight, one
// update a step, and updates more than one version old discarded:
//   t=1  client 0 (version 0) -> step 0; it starts again from version 1
//   t=2  client 0 (version 1) -> step 1; again from version 2
//   t=3  client 1 (version 0) is 2 versions old: discarded, restarts;
//        client 0 (version 2) -> step 2
TEST(BufferedScheduleTest, TwoClientsByHand) {
  BufferedSchedule s({.concurrency = 2, .buffer = 1, .max_staleness = 1}, {}, {1.0, 3.0}, 9);
  BufferedStep a = s.Next(), b = s.Next(), c = s.Next();
  ASSERT_EQ(a.accepted.size(), 1u);
  EXPECT_EQ(a.accepted[0].client, 0);
  EXPECT_EQ(a.accepted[0].version, 0);
  EXPECT_DOUBLE_EQ(a.end, 1.0);
  EXPECT_EQ(b.accepted[0].version, 1);
  EXPECT_DOUBLE_EQ(b.end, 2.0);
  EXPECT_DOUBLE_EQ(b.seconds, 1.0);
  EXPECT_EQ(c.accepted[0].client, 0);
  EXPECT_EQ(c.accepted[0].version, 2);
  EXPECT_EQ(c.stale, 1);
  EXPECT_EQ(c.staleness_sum, 0);
  EXPECT_DOUBLE_EQ(c.end, 3.0);
  EXPECT_EQ(s.version(), 3);
}

std::vector<BufferedStep> Steps(uint64_t seed, int count) {
  ProfileSpec profiles{.dropout = 0.2, .slow_fraction = 0.1, .slow_factor = 5};
  std::vector<double> seconds;
  for (int c = 0; c < 200; ++c) seconds.push_back(ClientSeconds(DrawProfile(profiles, c, 1), 10, 4e5, 4e5));
  BufferedSchedule s({.concurrency = 20, .buffer = 10, .max_staleness = 4}, profiles, seconds, seed);
  std::vector<BufferedStep> out;
  for (int i = 0; i < count; ++i) out.push_back(s.Next());
  return out;
}

// Every step has K updates no staler than the bound, time only moves on,
// the same seed gives the same schedule and dropouts come at their rate.
TEST(BufferedScheduleTest, StepsHoldKFreshEnoughUpdatesAndRepeatForASeed) {
  const auto steps = Steps(3, 300), again = Steps(3, 300), other = Steps(4, 300);
  int64_t dropped = 0, started = 0, stale = 0;
  double end = 0;
  bool differs = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const BufferedStep& s = steps[i];
    ASSERT_EQ(s.version, static_cast<int64_t>(i));
    ASSERT_EQ(s.accepted.size(), 10u);
    int64_t staleness = 0;
    for (const Arrival& a : s.accepted) {
      ASSERT_LE(s.version - a.version, 4);
      ASSERT_GE(s.version - a.version, 0);
      staleness += s.version - a.version;
    }
    EXPECT_EQ(staleness, s.staleness_sum);
    EXPECT_GE(s.end, end);
    EXPECT_NEAR(s.seconds, s.end - end, 1e-9);
    end = s.end;
    dropped += s.dropped, started += s.started, stale += s.stale;
    EXPECT_EQ(s.end, again[i].end);
    EXPECT_EQ(s.accepted.front().client, again[i].accepted.front().client);
    differs |= s.accepted.front().client != other[i].accepted.front().client;
  }
  EXPECT_TRUE(differs);
  EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(started), 0.2, 0.03);
  EXPECT_GT(stale, 0);  // the slow clients' updates come too late now and then
}

TEST(BufferedScheduleTest, StaleUpdatesWeighLess) {
  EXPECT_DOUBLE_EQ(StalenessWeight(0), 1.0);
  EXPECT_DOUBLE_EQ(StalenessWeight(3), 0.5);
  EXPECT_DOUBLE_EQ(StalenessWeight(-4), 1.0);  // a version from the future counts as fresh
  EXPECT_LT(StalenessWeight(100), StalenessWeight(99));
}

}  // namespace
}  // namespace geodesic::federated
