// PsClient against shards played by the test (inproc ROUTERs): what a
// refused push does to the waits (docs/wire.md "Refused pushes").
#include "worker/ps_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "cluster/chunking.h"
#include "transport/message.h"
#include "worker/zmq_shard_links.h"

namespace geodesic::worker {
namespace {

constexpr int64_t kParams = 16;

// Two shards of one 8-value chunk each; the test answers for them.
class PsClientRefusalTest : public ::testing::Test {
 protected:
  PsClientRefusalTest() {
    const cluster::ShardMap map = cluster::PlaceChunks(cluster::ChunkLayout(kParams, 8), 2);
    wire::RegisterReply assignment;
    *assignment.mutable_shard_map() = map.ToWire();
    for (int s = 0; s < 2; ++s) {
      shards_.push_back(std::make_unique<transport::Socket>(
          ctx_, zmq::socket_type::router, transport::SocketOptions{.job = "job", .role = wire::SERVER, .id = s},
          &counters_));
      const std::string endpoint = "inproc://ps-client-test-" + std::to_string(s);
      EXPECT_TRUE(shards_.back()->Bind(endpoint).ok());
      auto* server = assignment.add_servers();
      server->set_id(s);
      server->set_endpoint(endpoint);
      server->set_region("r");
    }
    PsClientOptions options;
    options.job = "job";
    options.retry_after_s = 0.05;
    options.timing.rpc_timeout_s = 30;
    client_ = MakePsClient(ctx_, options, assignment, {}, &counters_, RealClock::Get());
    EXPECT_TRUE(client_->Connect().ok());
  }

  // The next push request shard `s` receives (bounded wait).
  std::optional<transport::Message> NextPush(int s) {
    for (int i = 0; i < 200; ++i) {
      if (!shards_[s]->WaitReadable(10)) continue;
      auto in = shards_[s]->Receive();
      if (in && in->status.ok() && in->message.header.has_push_request()) return std::move(in->message);
    }
    return std::nullopt;
  }

  void Refuse(int s, const transport::Message& push, wire::Refusal reason) {
    wire::Header h;
    h.set_request_id(push.header.request_id());
    h.mutable_error_reply()->set_code(wire::INVALID_ARGUMENT);
    h.mutable_error_reply()->set_reason(reason);
    h.mutable_error_reply()->set_message("refused by the test");
    ASSERT_TRUE(shards_[s]->Send(h, {}, push.peer).ok());
  }

  void Ack(int s, const transport::Message& push) {
    wire::Header h;
    h.set_request_id(push.header.request_id());
    h.mutable_push_ack()->set_clock(push.header.push_request().clock());
    h.mutable_push_ack()->set_applied_chunks(push.header.push_request().chunks_size());
    ASSERT_TRUE(shards_[s]->Send(h, {}, push.peer).ok());
  }

  Status PushClock(int64_t clock) {
    auto grad = std::make_shared<std::vector<float>>(kParams, 0.5f);
    return client_->Push(clock, {.values = grad->data(), .owner = std::shared_ptr<const void>(grad, grad->data())});
  }

  zmq::context_t ctx_{1};
  transport::TrafficCounters counters_;
  std::vector<std::unique_ptr<transport::Socket>> shards_;
  std::unique_ptr<PsClient> client_;
  std::atomic<bool> stop_{false};
};

// A push refused for its values (a diverged model) was counted as
// acknowledged: the shard never completed that clock, and every worker of a
// BSP job waited 120 s for a pull that could not come. Now the waits fail at
// once with the refusal, marked job-fatal.
TEST_F(PsClientRefusalTest, APushRefusedForItsValuesFailsEveryWaitAtOnce) {
  ASSERT_TRUE(PushClock(0).ok());
  auto p0 = NextPush(0), p1 = NextPush(1);
  ASSERT_TRUE(p0 && p1);
  Ack(0, *p0);
  Refuse(1, *p1, wire::REFUSAL_VALUE_TOO_LARGE);
  const auto start = std::chrono::steady_clock::now();
  StatusOr<double> waited = client_->WaitAcks(0, &stop_);
  ASSERT_FALSE(waited.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(waited.status().detail(), Detail::kJobFatal) << waited.status();
  EXPECT_NE(waited.status().message().find("push at clock 0 refused (value_too_large)"), std::string::npos)
      << waited.status();
  EXPECT_NE(waited.status().message().find("the model diverged"), std::string::npos) << waited.status();
  EXPECT_EQ(client_->Stats().pushes_refused, 1u);
  // Later calls fail with it too; nothing more is sent.
  EXPECT_EQ(PushClock(1).detail(), Detail::kJobFatal);
  ASSERT_TRUE(client_->Pull(1).ok());
  std::vector<float> params(kParams);
  EXPECT_FALSE(client_->WaitPull(1, {.params = params.data(), .stop = &stop_}).ok());
}

// A refusal that is not about the values (a malformed push: a bug) fails
// the waits too, but is not job-fatal: the launcher goes on without the
// worker as for any worker error.
TEST_F(PsClientRefusalTest, AnyOtherFinalRefusalFailsTheWaitsButIsNotJobFatal) {
  ASSERT_TRUE(PushClock(0).ok());
  auto p0 = NextPush(0), p1 = NextPush(1);
  ASSERT_TRUE(p0 && p1);
  Ack(0, *p0);
  Refuse(1, *p1, wire::REFUSAL_BAD_CLOCK);
  StatusOr<double> waited = client_->WaitAcks(0, &stop_);
  ASSERT_FALSE(waited.ok());
  EXPECT_EQ(waited.status().detail(), Detail::kNone) << waited.status();
  EXPECT_NE(waited.status().message().find("bad_clock"), std::string::npos) << waited.status();
}

// A backup not yet promoted (not_primary) and a chunk that moved keep the
// push pending: it is sent again and acknowledged then.
TEST_F(PsClientRefusalTest, NotPrimaryAndMovedKeepThePushAndSendItAgain) {
  for (wire::Refusal r : {wire::REFUSAL_NOT_PRIMARY, wire::REFUSAL_MOVED}) {
    const int64_t clock = r == wire::REFUSAL_MOVED ? 1 : 0;
    ASSERT_TRUE(PushClock(clock).ok());
    auto p0 = NextPush(0), p1 = NextPush(1);
    ASSERT_TRUE(p0 && p1);
    Ack(0, *p0);
    Refuse(1, *p1, r);
    client_->PullArrived(-2);  // reads the replies
    // The retry interval is 50 ms; the resend arrives and is acknowledged.
    std::thread answer([&] {
      if (auto again = NextPush(1)) Ack(1, *again);
    });
    StatusOr<double> waited = client_->WaitAcks(0, &stop_);
    answer.join();
    ASSERT_TRUE(waited.ok()) << waited.status();
    EXPECT_EQ(client_->Stats().pushes_refused, 0u);
    EXPECT_TRUE(client_->Stats().push_error.ok());
  }
}

}  // namespace
}  // namespace geodesic::worker
