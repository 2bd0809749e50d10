#include "worker/federated/population.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace geodesic::federated {
namespace {

TEST(PopulationTest, ProfilesAreSeededPerClientAndFollowTheirDistributions) {
  const ProfileSpec flat;
  EXPECT_EQ(DrawProfile(flat, 7, 1).uplink_mbit, 20);
  EXPECT_EQ(DrawProfile(flat, 7, 1).step_seconds, 0.05);
  const ProfileSpec spread{.compute_sigma = 0.5, .uplink_sigma = 0.8, .slow_fraction = 0.1};
  EXPECT_EQ(DrawProfile(spread, 7, 1).uplink_mbit, DrawProfile(spread, 7, 1).uplink_mbit);
  EXPECT_NE(DrawProfile(spread, 7, 1).uplink_mbit, DrawProfile(spread, 7, 2).uplink_mbit);
  const int n = 20001;
  std::vector<double> up(n), logs(n);
  int slow = 0;
  for (int c = 0; c < n; ++c) {
    ClientProfile p = DrawProfile(spread, c, 3);
    up[c] = p.uplink_mbit;
    logs[c] = std::log(p.uplink_mbit);
    slow += DrawProfile({.slow_fraction = 0.1}, c, 3).step_seconds == 0.25;
  }
  std::nth_element(up.begin(), up.begin() + n / 2, up.end());
  EXPECT_NEAR(up[n / 2], 20, 20 * 0.03);
  double mean = 0, sq = 0;
  for (double l : logs) mean += l / n;
  for (double l : logs) sq += (l - mean) * (l - mean) / n;
  EXPECT_NEAR(std::sqrt(sq), 0.8, 0.8 * 0.03);
  EXPECT_NEAR(slow / double(n), 0.1, 0.01);
}

TEST(PopulationTest, ClientSecondsAddDownloadComputeUploadAndLatency) {
  const ClientProfile p{.step_seconds = 0.1, .uplink_mbit = 8, .downlink_mbit = 80, .latency_ms = 25};
  // 0.05 s of latency, 1 MB down at 80 Mbit/s, 10 steps, 1 MB up at 8 Mbit/s.
  EXPECT_DOUBLE_EQ(ClientSeconds(p, 10, 1e6, 1e6), 0.05 + 0.1 + 1.0 + 1.0);
}

// A round takes the first per_round clients to finish by the deadline and
// never lasts past it; without one it waits for the clients still in it.
TEST(PopulationTest, RoundsCloseAtPerRoundUpdatesOrTheDeadline) {
  const std::vector<Candidate> six = {{.client = 0, .seconds = 4}, {.client = 1, .seconds = 1},
                                      {.client = 2, .seconds = 9}, {.client = 3, .seconds = 2, .dropped = true},
                                      {.client = 4, .seconds = 3}, {.client = 5, .seconds = 3}};
  RoundClose r = CloseRound(six, 3, 0);  // over-selected: the first three to answer
  EXPECT_EQ(r.accepted, (std::vector<int64_t>{1, 4, 5}));
  EXPECT_EQ(r.dropped, 1);
  EXPECT_EQ(r.late, 2);
  EXPECT_EQ(r.seconds, 3);
  r = CloseRound(six, 5, 5);  // the deadline cuts client 2: the round waits until it, no longer
  EXPECT_EQ(r.accepted, (std::vector<int64_t>{1, 4, 5, 0}));
  EXPECT_EQ(r.late, 1);
  EXPECT_EQ(r.seconds, 5);
  r = CloseRound(six, 10, 0);  // no deadline: until the last client still in it
  EXPECT_EQ(r.accepted.size(), 5u);
  EXPECT_EQ(r.seconds, 9);
  EXPECT_TRUE(CloseRound({{.client = 0, .seconds = 2, .dropped = true}}, 1, 7).accepted.empty());
  EXPECT_EQ(CloseRound({{.client = 0, .seconds = 2, .dropped = true}}, 1, 7).seconds, 7);
}

TEST(PopulationTest, AvailabilityAndDropoutHaveTheirRates) {
  const ProfileSpec spec{.availability = 0.7, .dropout = 0.2};
  int available = 0, dropped = 0;
  for (int c = 0; c < 1000; ++c)
    for (int r = 0; r < 100; ++r) {
      available += Available(spec, c, r, 5);
      dropped += DropsOut(spec, c, r, 5);
    }
  EXPECT_NEAR(available / 1e5, 0.7, 0.01);
  EXPECT_NEAR(dropped / 1e5, 0.2, 0.01);
  EXPECT_EQ(Available(spec, 3, 4, 5), Available(spec, 3, 4, 5));
  EXPECT_TRUE(Available(ProfileSpec{}, 3, 4, 5));
  EXPECT_FALSE(DropsOut(ProfileSpec{}, 3, 4, 5));
}

TEST(PopulationTest, UniformSelectionIsFairSeededAndWithoutRepeats) {
  const std::vector<int64_t> samples(100, 600);
  const SelectionSpec sel{.per_round = 10};
  std::vector<int> times(100, 0);
  for (int r = 0; r < 2000; ++r) {
    auto chosen = SelectClients(sel, {}, samples, r, 9);
    ASSERT_EQ(chosen.size(), 10u);
    EXPECT_EQ(std::set<int64_t>(chosen.begin(), chosen.end()).size(), 10u);
    for (int64_t c : chosen) ++times[c];
  }
  for (int c = 0; c < 100; ++c) EXPECT_NEAR(times[c], 200, 70) << c;  // 5 binomial sigmas
  EXPECT_EQ(SelectClients(sel, {}, samples, 4, 9), SelectClients(sel, {}, samples, 4, 9));
  EXPECT_NE(SelectClients(sel, {}, samples, 4, 9), SelectClients(sel, {}, samples, 5, 9));
}

TEST(PopulationTest, OverSelectionTakesOnlyAvailableClients) {
  const std::vector<int64_t> samples(100, 600);
  EXPECT_EQ(SelectClients({.per_round = 10, .over_selection = 0.3}, {}, samples, 0, 1).size(), 13u);
  const ProfileSpec scarce{.availability = 0.05};
  for (int r = 0; r < 20; ++r) {
    auto chosen = SelectClients({.per_round = 10, .over_selection = 0.3}, scarce, samples, r, 1);
    int available = 0;
    for (int c = 0; c < 100; ++c) available += Available(scarce, c, r, 1);
    EXPECT_EQ(static_cast<int>(chosen.size()), std::min(13, available));
    for (int64_t c : chosen) EXPECT_TRUE(Available(scarce, c, r, 1));
  }
}

// One client a round, weighted: client i is chosen with probability w_i / Σw.
TEST(PopulationTest, WeightedSelectionFollowsTheSamples) {
  std::vector<int64_t> samples = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0};
  std::vector<int> times(samples.size(), 0);
  for (int r = 0; r < 20000; ++r)
    for (int64_t c : SelectClients({.per_round = 1, .weighted = true}, {}, samples, r, 2)) ++times[c];
  for (int c = 0; c < 10; ++c) EXPECT_NEAR(times[c] / 20000.0, samples[c] / 55.0, 0.012) << c;
  EXPECT_EQ(times[10], 0);  // no samples, never chosen
}

}  // namespace
}  // namespace geodesic::federated
