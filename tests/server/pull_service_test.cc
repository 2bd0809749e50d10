#include "server/pull_service.h"

#include <gtest/gtest.h>

#include <thread>

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
        pulls_(job_, 0, RealClock::Get(), &router_) {
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

}  // namespace
}  // namespace geodesic::server
