// AggregatorLinks (worker/aggregator_links.h): each message goes where it
// is served, both links connect per shard, arrivals from either reach the
// client, and traffic counts both.
#include "worker/aggregator_links.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/worker/fake_shard_links.h"

namespace geodesic::worker {
namespace {

wire::Header Push(bool skipped) {
  wire::Header h;
  h.mutable_push_request()->set_clock(3);
  h.mutable_push_request()->set_skipped(skipped);
  return h;
}

wire::Header Pull(bool final) {
  wire::Header h;
  h.mutable_pull_request()->set_clock(final ? 0 : 4);
  h.mutable_pull_request()->set_final(final);
  return h;
}

wire::Header Init(bool offer) {
  wire::Header h;
  h.mutable_init_request()->set_offer(offer);
  return h;
}

struct Links {
  FakeClock clock;
  FakeShardLinks* direct = new FakeShardLinks(&clock);
  FakeShardLinks* via = new FakeShardLinks(&clock);
  bool gone = false;
  AggregatorLinks links{std::unique_ptr<ShardLinks>(direct), std::unique_ptr<ShardLinks>(via),
                        ShardAddress{.id = 0, .endpoint = "tcp://agg:1", .curve_key = {}}, [this] { return gone; }};
};

TEST(AggregatorLinksTest, EachMessageGoesWhereItIsServed) {
  Links l;
  ASSERT_TRUE(l.links.Connect(0, {.id = 5, .endpoint = "tcp://shard:5", .curve_key = {}}).ok());
  ASSERT_TRUE(l.links.Connect(1, {.id = 6, .endpoint = "tcp://shard:6", .curve_key = {}}).ok());
  EXPECT_EQ(l.direct->connects,
            (std::vector<std::pair<size_t, std::string>>{{0, "tcp://shard:5"}, {1, "tcp://shard:6"}}));
  EXPECT_EQ(l.via->connects, (std::vector<std::pair<size_t, std::string>>{{0, "tcp://agg:1"}, {1, "tcp://agg:1"}}));

  for (const wire::Header& h : {Push(false), Pull(false)}) ASSERT_TRUE(l.links.Send(1, h, {}).ok());
  EXPECT_EQ(l.via->sent.size(), 2u) << "gradients and training pulls go to the aggregator";
  EXPECT_TRUE(l.direct->sent.empty());
  for (const wire::Header& h : {Init(true), Init(false), Pull(true)}) ASSERT_TRUE(l.links.Send(0, h, {}).ok());
  EXPECT_EQ(l.direct->sent.size(), 3u) << "initial values and the final read go to the shard";
  EXPECT_EQ(l.via->sent.size(), 2u);
  ASSERT_TRUE(l.links.Send(1, Push(true), {}).ok());
  EXPECT_EQ(l.direct->sent.size(), 4u) << "a skipped clock is recorded by the shard...";
  EXPECT_EQ(l.via->sent.size(), 3u) << "... and noted by the aggregator";
  EXPECT_EQ(l.via->sent.back().si, 1u);
  // training.fragments: the chunks outside the clock's fragment are skipped
  // at the shard alone; the aggregator waits only for the fragment's.
  wire::Header skip_chunks = Push(true);
  skip_chunks.mutable_push_request()->add_chunks()->set_chunk_id(3);
  EXPECT_EQ(AggregatorLinks::RouteOf(skip_chunks), AggregatorLinks::Route::kShard);
  ASSERT_TRUE(l.links.Send(1, skip_chunks, {}).ok());
  EXPECT_EQ(l.direct->sent.size(), 5u);
  EXPECT_EQ(l.via->sent.size(), 3u);
}

TEST(AggregatorLinksTest, ArrivalsFromEitherLinkReachTheClientAndTrafficCountsBoth) {
  Links l;
  ASSERT_TRUE(l.links.Connect(0, {.id = 0, .endpoint = "tcp://shard:0", .curve_key = {}}).ok());
  wire::Header ack;
  ack.mutable_push_ack()->set_clock(1);
  wire::Header init_ack;
  init_ack.mutable_init_ack();
  l.via->Reply(0, ack);
  l.direct->Reply(0, init_ack);
  std::vector<std::string> got;
  l.links.Poll(100, [&](size_t si, transport::Message& m) {
    EXPECT_EQ(si, 0u);
    got.push_back(transport::BodyName(m.header));
  });
  EXPECT_EQ(got, (std::vector<std::string>{"init_ack", "push_ack"}));
  const_cast<transport::TrafficCounters&>(l.direct->traffic(0)).bytes_sent = 10;
  const_cast<transport::TrafficCounters&>(l.via->traffic(0)).bytes_sent = 32;
  const_cast<transport::TrafficCounters&>(l.via->traffic(0)).bytes_received = 7;
  EXPECT_EQ(l.links.traffic(0).bytes_sent, 42u);
  EXPECT_EQ(l.links.traffic(0).bytes_received, 7u);
}

TEST(AggregatorLinksTest, OnceTheAggregatorIsGoneEverythingGoesToTheShards) {
  Links l;
  ASSERT_TRUE(l.links.Connect(0, {.id = 0, .endpoint = "tcp://shard:0", .curve_key = {}}).ok());
  EXPECT_FALSE(l.links.TakeRerouted());
  ASSERT_TRUE(l.links.Send(0, Push(false), {}).ok());
  EXPECT_EQ(l.via->sent.size(), 1u);
  l.gone = true;
  EXPECT_TRUE(l.links.TakeRerouted()) << "the client must send again what the aggregator left unanswered";
  EXPECT_FALSE(l.links.TakeRerouted()) << "once";
  EXPECT_TRUE(l.links.fallen_back());
  for (const wire::Header& h : {Push(false), Pull(false), Push(true)}) ASSERT_TRUE(l.links.Send(0, h, {}).ok());
  EXPECT_EQ(l.via->sent.size(), 1u) << "nothing more to the aggregator";
  EXPECT_EQ(l.direct->sent.size(), 3u);
  l.gone = false;  // a restarted aggregator is not taken back
  ASSERT_TRUE(l.links.Send(0, Push(false), {}).ok());
  EXPECT_EQ(l.direct->sent.size(), 4u);
}

}  // namespace
}  // namespace geodesic::worker
