#include "transport/refusal_limiter.h"

#include <gtest/gtest.h>

namespace geodesic::transport {
namespace {

RefusalLimits Small() {
  return RefusalLimits{
      .answers_per_peer = 3, .window = std::chrono::seconds(10), .max_peers = 4, .log_every = std::chrono::seconds(1)};
}

TEST(RefusalLimiterTest, APeerGetsItsBudgetOfAnswersPerWindow) {
  FakeClock clock;
  RefusalLimiter limiter(&clock, Small());
  std::vector<bool> answered, muted;
  for (int i = 0; i < 5; ++i) {
    auto v = limiter.Note("flood", wire::REFUSAL_MALFORMED);
    answered.push_back(v.answer);
    muted.push_back(v.muted);
  }
  EXPECT_EQ(answered, (std::vector<bool>{true, true, true, false, false}));
  EXPECT_EQ(muted, (std::vector<bool>{false, false, true, false, false}));
  EXPECT_TRUE(limiter.Note("another", wire::REFUSAL_MALFORMED).answer) << "budgets are per peer";
  EXPECT_TRUE(limiter.Note("", wire::REFUSAL_MALFORMED).answer) << "a DEALER's one peer is never muted";
  clock.Advance(std::chrono::seconds(10));
  EXPECT_TRUE(limiter.Note("flood", wire::REFUSAL_MALFORMED).answer) << "a new window";
  EXPECT_EQ(limiter.unanswered(), 2u);
  EXPECT_EQ(limiter.total(), 8u);
  EXPECT_EQ(limiter.by_reason().at(wire::REFUSAL_MALFORMED), 8u);
}

TEST(RefusalLimiterTest, RefusalsMembersActOnAreAlwaysAnswered) {
  FakeClock clock;
  RefusalLimiter limiter(&clock, Small());
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(limiter.Note("w", wire::REFUSAL_MOVED).answer);
    EXPECT_TRUE(limiter.Note("w", wire::REFUSAL_NOT_PRIMARY).answer);
  }
  EXPECT_EQ(limiter.unanswered(), 0u);
}

TEST(RefusalLimiterTest, LogsOneLinePerReasonPerPeriodWithTheSkippedCount) {
  FakeClock clock;
  RefusalLimiter limiter(&clock, Small());
  EXPECT_TRUE(limiter.Note("a", wire::REFUSAL_MALFORMED).log);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(limiter.Note("a", wire::REFUSAL_MALFORMED).log);
  EXPECT_TRUE(limiter.Note("a", wire::REFUSAL_BAD_CLOCK).log) << "reasons are limited apart";
  clock.Advance(std::chrono::seconds(1));
  auto v = limiter.Note("b", wire::REFUSAL_MALFORMED);
  EXPECT_TRUE(v.log);
  EXPECT_EQ(v.unlogged, 4u);
  EXPECT_EQ(UnloggedNote(v.unlogged, wire::REFUSAL_MALFORMED),
            " (and 4 more malformed refusals since the last such line)");
  EXPECT_EQ(UnloggedNote(0, wire::REFUSAL_MALFORMED), "");
}

TEST(RefusalLimiterTest, RemembersABoundedNumberOfPeers) {
  FakeClock clock;
  RefusalLimiter limiter(&clock, Small());
  // Many connections, each a new routing id: memory stays bounded, and a
  // peer forgotten starts a new budget.
  for (int i = 0; i < 1000; ++i)
    for (int k = 0; k < 4; ++k) (void)limiter.Note("p" + std::to_string(i), wire::REFUSAL_MALFORMED);
  EXPECT_EQ(limiter.unanswered(), 1000u);
  EXPECT_EQ(limiter.total(), 4000u);
}

}  // namespace
}  // namespace geodesic::transport
