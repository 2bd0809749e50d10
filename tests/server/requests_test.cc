#include "server/requests.h"

#include <gtest/gtest.h>

#include <cstring>

namespace geodesic::server {
namespace {

// One shard owning both chunks (8 values each) of a 16-value model, two workers.
class RequestsTest : public ::testing::Test {
 protected:
  static ShardOptions BoundTwo() {
    ShardOptions o;
    o.staleness_bound = 2;
    return o;
  }
  RequestsTest() : shard_(BoundTwo(), cluster::ChunkLayout(16, 8), {0, 1}) {
    clocks_.SetLive({0, 1}, {0, 0});
    std::vector<float> init(8, 0.5f);
    EXPECT_TRUE(shard_.Init(0, init.data()));
    EXPECT_TRUE(shard_.Init(1, init.data()));
  }

  // A push of worker 0 at `clock`: chunk 0, all values `v`.
  static transport::Message Push(int64_t clock, float v) {
    transport::Message m;
    m.header.set_sender_role(wire::WORKER);
    m.header.set_sender_id(0);
    auto* p = m.header.mutable_push_request();
    p->set_clock(clock);
    auto* d = p->add_chunks();
    d->set_chunk_id(0);
    d->set_codec(wire::FP32);
    d->set_num_elems(8);
    std::vector<float> g(8, v);
    m.frames.emplace_back(g.data(), g.size() * sizeof(float));
    return m;
  }

  ShardContext Ctx() {
    return ShardContext{.shard = &shard_, .clocks = &clocks_, .server_id = 0, .num_workers = 2, .decoder = &decoder_};
  }

  ShardState shard_;
  ClockTable clocks_{2};
  RequestDecoder decoder_;
};

TEST_F(RequestsTest, GoodPushIsApplied) {
  Handled h = ApplyPush(Ctx(), Push(0, 1.0f));
  ASSERT_TRUE(h.status.ok()) << h.status;
  EXPECT_EQ(h.reply.push_ack().result(), wire::APPLIED);
  EXPECT_EQ(shard_.updates_applied(), 1u);
}

// Regression: finite gradients near FLT_MAX overflowed the
// parameters to infinity after a few steps.
TEST_F(RequestsTest, HugeFiniteGradientIsRefusedWhole) {
  for (int clock = 0; clock < 4; ++clock) {
    Handled h = ApplyPush(Ctx(), Push(clock, 3e38f));
    EXPECT_EQ(h.reason, wire::REFUSAL_VALUE_TOO_LARGE) << h.status;
    EXPECT_EQ(h.status.code(), Code::kInvalidArgument);
  }
  EXPECT_EQ(shard_.updates_applied(), 0u);
  EXPECT_EQ(shard_.Read(0).values[0], 0.5f);
}

// Regression: clock INT64_MAX overflowed clock + 1 (UB) in
// the clock table.
TEST_F(RequestsTest, ClockBeyondAnyJobIsRefused) {
  Handled h = ApplyPush(Ctx(), Push(INT64_MAX, 1.0f));
  EXPECT_EQ(h.reason, wire::REFUSAL_BAD_CLOCK);
  EXPECT_EQ(shard_.LastClock(0, 0), -1);
}

// Regression: a pull with a negative clock was served as a "final" read,
// skipping the staleness bound.
TEST_F(RequestsTest, PullWithNegativeClockIsRefused) {
  transport::Message m;
  m.header.set_sender_role(wire::WORKER);
  m.header.mutable_pull_request()->set_clock(-5);
  wire::Refusal reason = wire::REFUSAL_UNSPECIFIED;
  std::vector<uint32_t> chunks;
  Status s = ValidatePull(shard_, 0, m, &reason, &chunks);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(reason, wire::REFUSAL_BAD_CLOCK);
  m.header.mutable_pull_request()->set_clock(3);
  ASSERT_TRUE(ValidatePull(shard_, 0, m, &reason, &chunks).ok());
  EXPECT_EQ(chunks, (std::vector<uint32_t>{0, 1}));
}

}  // namespace
}  // namespace geodesic::server
