#include "server/pull_service.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/server/fake_links.h"

namespace geodesic::server {
namespace {

// One shard of one 4 MiB chunk behind a real ROUTER; a DEALER peer in
// another context that reads its replies or not.
class PullServiceTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kValues = 1 << 20;

  PullServiceTest()
      : shard_(ShardOptions{}, cluster::ChunkLayout(kValues, kValues), {0}),
        router_(ctx_, zmq::socket_type::router,
                transport::SocketOptions{
                    .job = "p", .role = wire::SERVER, .id = 0, .send_timeout_ms = transport::kNeverBlock},
                &counters_),
        replies_(&router_),
        pulls_(job_, 0, RealClock::Get(), &replies_) {
    std::vector<float> init(kValues, 0.5f);
    EXPECT_TRUE(shard_.Init(0, init.data()));
    clocks_.SetLive({0}, {0});
    pulls_.Start(&shard_, &clocks_, 1);
  }

  // Connects the DEALER and learns its routing id (it says hello once).
  // `queue`: the messages its ZeroMQ takes in ahead of the application (a
  // peer that never reads stops at that many).
  void Connect(int queue = 10000) {
    dealer_ = std::make_unique<transport::Socket>(
        peer_ctx_, zmq::socket_type::dealer,
        transport::SocketOptions{.job = "p", .role = wire::CLIENT, .id = 0, .high_water_mark = queue}, &peer_counters_);
    if (queue < 10) dealer_->raw().set(zmq::sockopt::rcvbuf, 64 << 10);
    ASSERT_TRUE(router_.Bind("tcp://127.0.0.1:*").ok());
    ASSERT_TRUE(dealer_->Connect(router_.endpoint()).ok());
    wire::Header h;
    h.mutable_status_request();
    ASSERT_TRUE(dealer_->Send(h, {}).ok());
    for (int i = 0; i < 300 && peer_.empty(); ++i)
      if (router_.WaitReadable(10))
        if (auto in = router_.Receive(); in && in->status.ok()) peer_ = in->message.peer;
    ASSERT_FALSE(peer_.empty());
  }

  // A tool's pull of the whole shard at clock 0, from the DEALER.
  void Pull() {
    transport::Message m;
    m.peer = peer_;
    m.header.set_sender_role(wire::CLIENT);
    m.header.set_sender_id(0);
    m.header.mutable_pull_request()->set_clock(0);
    pulls_.Take(m, {0});
  }

  // Reads one reply at the DEALER (bounded: `ms`).
  bool ReadReply(int ms = 5000) {
    for (int i = 0; i < ms / 10; ++i)
      if (dealer_->WaitReadable(10))
        if (auto in = dealer_->Receive(); in && in->status.ok() && in->message.header.has_pull_reply()) return true;
    return false;
  }

  zmq::context_t ctx_{1}, peer_ctx_{1};
  transport::TrafficCounters counters_, peer_counters_;
  JobSpec job_;
  ShardState shard_;
  ClockTable clocks_{0};
  transport::Socket router_;
  std::unique_ptr<transport::Socket> dealer_;
  transport::RouterReplies replies_;
  PullService pulls_;
  std::string peer_;
};

TEST_F(PullServiceTest, APeerThatReadsGetsEveryReply) {
  Connect();
  EXPECT_EQ(pulls_.unread_limit(), 16u << 20) << "four times 4 MiB of parameters";
  for (int i = 0; i < 20; ++i) {
    Pull();
    ASSERT_TRUE(ReadReply()) << i;
  }
  EXPECT_EQ(pulls_.withheld(), 0u);
  EXPECT_EQ(counters_.sends_dropped.load(), 0u);
}

TEST_F(PullServiceTest, APeerThatNeverReadsIsNotSentMoreThanTheLimit) {
  Connect(/*queue=*/1);
  // 100 pulls of 4 MiB each that are never read: the first few fill the
  // connection's kernel buffers and then ZeroMQ's queue up to the limit;
  // the rest are dropped before a reply is built.
  for (int i = 0; i < 100; ++i) {
    Pull();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // ZeroMQ's I/O thread writes meanwhile
  }
  EXPECT_GE(pulls_.withheld(), 80u);
  EXPECT_EQ(counters_.sends_dropped.load(), pulls_.withheld());
  EXPECT_LE(counters_.messages_sent.load(), 20u);
  // Once the peer reads what it was sent, it is served again.
  int read = 0;
  while (ReadReply(500)) ++read;
  EXPECT_EQ(read, static_cast<int>(100 - pulls_.withheld()));
  Pull();
  EXPECT_TRUE(ReadReply());
}

// Holds, releases and resends, in-process: a fake reply sink and clock, a
// shard of two 4 KiB chunks (one reply message each) and two workers under
// BSP.
ShardOptions Bsp(int32_t id) {
  ShardOptions o;
  o.shard_id = id;
  o.staleness_bound = 0;
  return o;
}

class PullHoldTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kChunk = 1024;

  PullHoldTest()
      : shard_(Bsp(0), cluster::ChunkLayout(2 * kChunk, kChunk), {0, 1}), pulls_(job_, 0, &clock_, &replies_) {
    job_.wire.message_bytes = kChunk * sizeof(float);
    clocks_.SetLive({0, 1}, {0, 0});
    pulls_.Start(&shard_, &clocks_, 1);
  }

  void InitAll() {
    std::vector<float> init(kChunk, 0.25f);
    ASSERT_TRUE(shard_.Init(0, init.data()));
    ASSERT_TRUE(shard_.Init(1, init.data()));
  }

  // Worker `w`'s pull at `clock` of both chunks, as request `id`.
  void Pull(int w, int64_t clock, uint64_t id, bool wait_for_own_push = false, uint64_t max_hold_us = 0) {
    transport::Message m;
    m.peer = "peer-" + std::to_string(w);
    m.header.set_sender_role(wire::WORKER);
    m.header.set_sender_id(w);
    m.header.set_request_id(id);
    auto* r = m.header.mutable_pull_request();
    r->set_clock(clock);
    r->set_wait_for_own_push(wait_for_own_push);
    r->set_max_hold_us(max_hold_us);
    pulls_.Take(m, {0, 1});
  }

  // The chunk ids answered so far for request `id`, in order.
  std::vector<uint32_t> Answered(uint64_t id) const {
    std::vector<uint32_t> chunks;
    for (const auto& s : replies_.sent)
      if (s.header.request_id() == id)
        for (const auto& d : s.header.pull_reply().chunks()) chunks.push_back(d.chunk_id());
    return chunks;
  }

  JobSpec job_;
  FakeClock clock_;
  testing::FakeReplies replies_;
  ShardState shard_;
  ClockTable clocks_{0};
  PullService pulls_;
};

TEST_F(PullHoldTest, APullTheBoundAllowsIsAnsweredAtOnceOneMessagePerChunk) {
  InitAll();
  Pull(0, 0, 7);
  ASSERT_EQ(replies_.sent.size(), 2u) << "message_bytes fits one 4 KiB chunk per message";
  for (const auto& s : replies_.sent) {
    EXPECT_EQ(s.peer, "peer-0");
    EXPECT_EQ(s.header.pull_reply().clock(), 0);
    ASSERT_EQ(s.payloads.size(), 1u);
    EXPECT_EQ(s.payloads[0].size(), kChunk * sizeof(float)) << "exact values: no codec loaded";
  }
  EXPECT_EQ(Answered(7), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(pulls_.held(), 0u);
}

TEST_F(PullHoldTest, APullOfChunksWithoutInitialValuesWaitsForTheirInit) {
  Pull(0, 0, 1);
  EXPECT_TRUE(replies_.sent.empty());
  EXPECT_EQ(pulls_.held(), 1u);
  InitAll();
  pulls_.ServeHeld();
  EXPECT_EQ(Answered(1), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(pulls_.held(), 0u);
}

TEST_F(PullHoldTest, APullAheadOfTheBoundIsHeldUntilTheSlowestWorkerFinishes) {
  InitAll();
  Pull(0, 1, 3);  // BSP: clock 1 is read once both finished clock 0
  EXPECT_EQ(pulls_.held(), 1u);
  clocks_.Finished(0, 0);
  pulls_.ServeHeld();
  EXPECT_TRUE(replies_.sent.empty()) << "worker 1 has not finished clock 0";
  clock_.Advance(std::chrono::milliseconds(250));
  clocks_.Finished(1, 0);
  pulls_.ServeHeld();
  ASSERT_EQ(Answered(3), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(replies_.sent[0].header.pull_reply().held_us(), 250000u)
      << "held from its arrival until the bound let it go";
  EXPECT_EQ(replies_.sent[0].header.pull_reply().min_clock(), 1);
  EXPECT_EQ(pulls_.held(), 0u);
}

TEST_F(PullHoldTest, AResentPullReplacesTheHeldOneAndIsAnsweredOnce) {
  InitAll();
  Pull(0, 1, 3);
  Pull(0, 1, 4);  // the worker asked again
  Pull(1, 1, 5);  // another worker's pull of the same clock is its own
  EXPECT_EQ(pulls_.held(), 2u);
  clocks_.Finished(0, 0);
  clocks_.Finished(1, 0);
  pulls_.ServeHeld();
  EXPECT_TRUE(Answered(3).empty());
  EXPECT_EQ(Answered(4), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(Answered(5), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(replies_.sent.size(), 4u);
}

TEST_F(PullHoldTest, AWorkerWaitingForItsOwnPushIsAnsweredWhenThatPushFinishesItsClock) {
  InitAll();
  clocks_.Finished(1, 0);
  // Under the bound, but worker 0's own push of clock 0 has not arrived:
  // held up to max_hold_us (50 ms), and the loop is told when to wake.
  Pull(0, 1, 9, /*wait_for_own_push=*/true, /*max_hold_us=*/50000);
  EXPECT_EQ(pulls_.held(), 1u);
  EXPECT_EQ(pulls_.WaitMs(1000), 1000) << "the bound holds it: pushes wake the loop, not the hold";
  clocks_.Finished(0, 0);  // the bound allows clock 1 now; the own push is what it waits for
  pulls_.ServeHeld();
  EXPECT_EQ(Answered(9), (std::vector<uint32_t>{0, 1})) << "its own push (clock 0) finished it";
}

TEST_F(PullHoldTest, AnOwnPushHoldExpiresOnTheClock) {
  InitAll();
  // Staleness bound 1: worker 0 may read clock 1 before anyone finished
  // clock 0, but it asks to wait for its own push of clock 0 too.
  ClockTable loose(1);
  loose.SetLive({0, 1}, {0, 0});
  pulls_.Start(&shard_, &loose, 1);
  Pull(0, 1, 9, /*wait_for_own_push=*/true, /*max_hold_us=*/50000);
  EXPECT_EQ(pulls_.held(), 1u);
  EXPECT_EQ(pulls_.WaitMs(1000), 51) << "wake when the 50 ms hold expires";
  clock_.Advance(std::chrono::milliseconds(49));
  pulls_.ServeHeld();
  EXPECT_TRUE(replies_.sent.empty());
  clock_.Advance(std::chrono::milliseconds(1));
  pulls_.ServeHeld();
  ASSERT_EQ(Answered(9), (std::vector<uint32_t>{0, 1})) << "the hold expired: answered without the own push";
  EXPECT_EQ(replies_.sent[0].header.pull_reply().hold_us(), 50000u);
  EXPECT_EQ(pulls_.WaitMs(1000), 1000);
}

TEST_F(PullHoldTest, AReplyThatCannotBeQueuedIsNotRetriedHereAndTheNextPullIsAnswered) {
  InitAll();
  replies_.full = true;
  Pull(0, 0, 1);
  EXPECT_TRUE(replies_.sent.empty());
  EXPECT_EQ(pulls_.held(), 0u) << "the worker asks again (its own resend), the shard keeps nothing";
  replies_.full = false;
  Pull(0, 0, 2);
  EXPECT_EQ(Answered(2), (std::vector<uint32_t>{0, 1}));
}

}  // namespace
}  // namespace geodesic::server
