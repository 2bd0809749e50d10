#include "transport/outbox.h"

#include <gtest/gtest.h>

namespace geodesic::transport {
namespace {

wire::Header Push(uint64_t id) {
  wire::Header h;
  h.mutable_push_request()->set_clock(static_cast<int64_t>(id));
  return h;
}

TEST(OutboxTest, AnEntryIsDueOnlyAfterRetryAfterSinceItLastWent) {
  FakeClock clock;
  Outbox<uint64_t> box({.retry_after = Millis(100)});
  box.Add(7, 1, Push(7), {}, clock.Now());
  EXPECT_TRUE(box.Due(clock.Now()).empty());
  clock.Advance(Millis(99));
  EXPECT_TRUE(box.Due(clock.Now()).empty());
  clock.Advance(Millis(1));
  auto due = box.Due(clock.Now());
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].first, 7u);
  EXPECT_EQ(due[0].second->dest, 1);
  EXPECT_EQ(due[0].second->resends, 1);
  EXPECT_TRUE(box.Due(clock.Now()).empty()) << "a resend restarts the wait";
}

TEST(OutboxTest, AcksRemoveAndDuplicateAcksAreHarmless) {
  FakeClock clock;
  Outbox<uint64_t> box({.retry_after = Millis(10)});
  for (uint64_t k = 1; k <= 5; ++k) box.Add(k, 0, Push(k), {}, clock.Now());
  EXPECT_TRUE(box.Ack(2));
  EXPECT_FALSE(box.Ack(2));
  EXPECT_EQ(box.AckThrough(3), 2u);  // 1 and 3
  EXPECT_EQ(box.size(), 2u);
  clock.Advance(Millis(10));
  auto due = box.Due(clock.Now());
  ASSERT_EQ(due.size(), 2u);
  EXPECT_EQ(due[0].first, 4u);
  EXPECT_EQ(due[1].first, 5u);
}

TEST(OutboxTest, ResendMakesEverythingDueButAtMostOncePerGap) {
  FakeClock clock;
  Outbox<uint64_t> box({.retry_after = Millis(1000), .min_resend_gap = Millis(50)});
  box.Add(1, 0, Push(1), {}, clock.Now());
  box.Add(2, 0, Push(2), {}, clock.Now());
  EXPECT_TRUE(box.Resend(clock.Now()));
  EXPECT_EQ(box.Due(clock.Now()).size(), 2u);
  EXPECT_FALSE(box.Resend(clock.Now() + Millis(49)));
  EXPECT_TRUE(box.Due(clock.Now() + Millis(49)).empty());
  EXPECT_TRUE(box.Resend(clock.Now() + Millis(50)));
  EXPECT_EQ(box.Due(clock.Now() + Millis(50)).size(), 2u);
}

}  // namespace
}  // namespace geodesic::transport
