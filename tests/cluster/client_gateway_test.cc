// The client gateway over loopback: which ids a connection may claim, the
// task and update round trip, every kind of bad update refused with a
// reason the client hears, a silent or departed client, and (secured) the
// coordinator's key list deciding who gets in.
#include "cluster/client_gateway.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace geodesic::cluster {
namespace {

constexpr int64_t kParams = 6;

GatewayOptions Options(transport::CurveKeyPair keys = {}) {
  return {.job = "gw",
          .executor = 1,
          .executors = 2,
          .clients = 10,
          .num_params = kParams,
          .partition_digest = "abcd",
          .keys = std::move(keys)};
}

// A real client's end of the connection, driven by hand.
class FakeClient {
 public:
  FakeClient(zmq::context_t& ctx, const std::string& endpoint, transport::CurveSocket curve = {})
      : socket_(ctx, zmq::socket_type::dealer,
                transport::SocketOptions{.job = "gw", .role = wire::CLIENT, .id = 0, .curve = std::move(curve)},
                &counters_) {
    EXPECT_TRUE(socket_.Connect(endpoint).ok());
  }
  void Hello(int64_t client) {
    wire::Header h;
    h.mutable_client_hello()->set_client(client);
    ASSERT_TRUE(socket_.Send(std::move(h), {}).ok());
  }
  void Bye(int64_t client) {
    wire::Header h;
    h.mutable_client_bye()->set_client(client);
    ASSERT_TRUE(socket_.Send(std::move(h), {}).ok());
  }
  void Send(int64_t client, int64_t round, int64_t samples, std::vector<float> delta) {
    wire::Header h;
    h.mutable_client_update()->set_client(client);
    h.mutable_client_update()->set_round(round);
    h.mutable_client_update()->set_samples(samples);
    h.set_payload_frames(1);
    ASSERT_TRUE(socket_.Send(std::move(h), {transport::CopyPayload(delta.data(), delta.size() * 4)}).ok());
  }
  // The next message within 2 s, polling `gateway` (if any) meanwhile.
  std::optional<transport::Message> Next(ClientGateway* gateway = nullptr) {
    for (int i = 0; i < 40; ++i) {
      if (gateway) gateway->Poll();
      if (auto in = socket_.Receive(); in && in->status.ok()) return std::move(in->message);
      socket_.WaitReadable(50);
    }
    return std::nullopt;
  }

 private:
  transport::TrafficCounters counters_;
  transport::Socket socket_;
};

// Polls until `client` is attached, at most 2 s.
bool AttachedSoon(ClientGateway& g, int64_t client) {
  for (int i = 0; i < 100 && !g.Attached(client); ++i) {
    g.Poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return g.Attached(client);
}

TimePoint In(int ms) { return RealClock::Get()->Now() + std::chrono::milliseconds(ms); }

TEST(ClientUpdateCheckTest, RefusesEachKindOfBadUpdate) {
  wire::ClientUpdate u;
  u.set_samples(64);
  std::vector<float> v(kParams, 0.5f);
  EXPECT_TRUE(CheckClientUpdate(u, v.data(), kParams * 4, kParams, 64, 10).ok());
  auto why = [&](const std::vector<float>& values, size_t bytes, double norm) {
    Status s = CheckClientUpdate(u, values.data(), bytes, kParams, 64, norm);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    return s.message();
  };
  EXPECT_NE(why(v, (kParams - 1) * 4, 10).find("the model has 6 parameters"), std::string::npos);
  EXPECT_NE(why(v, kParams * 4 + 2, 10).find("bytes"), std::string::npos);
  auto nan = v;
  nan[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(why(nan, kParams * 4, 10).find("value 3 is not finite"), std::string::npos);
  auto inf = v;
  inf[0] = -std::numeric_limits<float>::infinity();
  EXPECT_NE(why(inf, kParams * 4, 10).find("not finite"), std::string::npos);
  EXPECT_NE(why(v, kParams * 4, 1.0).find("over federated.max_update_norm"), std::string::npos);
  EXPECT_TRUE(CheckClientUpdate(u, v.data(), kParams * 4, kParams, 64, 0).ok());  // 0: no bound
  u.set_samples(65);
  EXPECT_NE(why(v, kParams * 4, 10).find("claims 65 samples"), std::string::npos);
  u.set_samples(0);
  EXPECT_NE(why(v, kParams * 4, 10).find("claims 0 samples"), std::string::npos);
}

TEST(ClientGatewayTest, ServesOnlyItsOwnClientsAndTakesTheirUpdates) {
  zmq::context_t ctx(1);
  transport::TrafficCounters counters;
  ClientGateway g(ctx, Options(), &counters, RealClock::Get());
  ASSERT_TRUE(g.Start().ok());
  FakeClient c(ctx, g.endpoint());
  c.Hello(4);  // executor 0's
  auto refused = c.Next(&g);
  ASSERT_TRUE(refused && refused->header.has_error_reply());
  EXPECT_EQ(refused->header.error_reply().reason(), wire::REFUSAL_NOT_YOUR_CLIENT);
  c.Hello(11);  // outside the population
  refused = c.Next(&g);
  ASSERT_TRUE(refused && refused->header.has_error_reply()) << "no refusal";
  EXPECT_EQ(g.refused_hellos(), 2u);
  c.Hello(3);
  ASSERT_TRUE(AttachedSoon(g, 3));
  EXPECT_FALSE(g.Attached(4));

  std::vector<float> global(kParams, 1.0f);
  ASSERT_TRUE(g.Ask(3, 7, global.data()));
  auto task = c.Next();
  ASSERT_TRUE(task && task->header.has_client_task());
  EXPECT_EQ(task->header.client_task().round(), 7);
  EXPECT_EQ(task->header.client_task().partition_digest(), "abcd");
  ASSERT_EQ(task->frames.size(), 1u);
  EXPECT_EQ(task->frames[0].size(), kParams * 4u);
  c.Send(3, 6, 10, std::vector<float>(kParams, 9.0f));  // another round's: dropped
  c.Send(3, 7, 10, std::vector<float>(kParams, 0.25f));
  auto got = g.Await(3, 7, In(2000), 64, 0);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->delta, std::vector<float>(kParams, 0.25f));
  EXPECT_EQ(got->info.samples(), 10);
}

TEST(ClientGatewayTest, BadUpdatesAreRefusedAndTheClientIsTold) {
  zmq::context_t ctx(1);
  transport::TrafficCounters counters;
  ClientGateway g(ctx, Options(), &counters, RealClock::Get());
  ASSERT_TRUE(g.Start().ok());
  FakeClient c(ctx, g.endpoint());
  c.Hello(5);
  ASSERT_TRUE(AttachedSoon(g, 5));
  std::vector<float> global(kParams, 0.0f);
  std::vector<float> nan(kParams, 0.1f);
  nan[2] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::pair<std::vector<float>, int64_t>> bad = {
      {std::vector<float>(kParams - 1, 0.1f), 10},  // wrong shape
      {nan, 10},                                    // not finite
      {std::vector<float>(kParams, 100.0f), 10},    // absurd norm
      {std::vector<float>(kParams, 0.1f), 1000},    // more samples than its round
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    ASSERT_TRUE(g.Ask(5, static_cast<int64_t>(i), global.data()));
    ASSERT_TRUE(c.Next().has_value());  // the task
    c.Send(5, static_cast<int64_t>(i), bad[i].second, bad[i].first);
    auto got = g.Await(5, static_cast<int64_t>(i), In(2000), 64, 5.0);
    EXPECT_EQ(got.status().code(), Code::kInvalidArgument) << i;
    auto told = c.Next();
    ASSERT_TRUE(told && told->header.has_error_reply()) << i;
    EXPECT_EQ(told->header.error_reply().reason(), wire::REFUSAL_BAD_UPDATE);
    EXPECT_TRUE(g.Attached(5)) << "a refused update does not detach the client";
  }
}

TEST(ClientGatewayTest, ASilentOrDepartedClientIsDetachedAndTheWaitEnds) {
  zmq::context_t ctx(1);
  transport::TrafficCounters counters;
  ClientGateway g(ctx, Options(), &counters, RealClock::Get());
  ASSERT_TRUE(g.Start().ok());
  FakeClient c(ctx, g.endpoint());
  c.Hello(1);
  ASSERT_TRUE(AttachedSoon(g, 1));
  std::vector<float> global(kParams, 0.0f);
  ASSERT_TRUE(g.Ask(1, 0, global.data()));
  auto got = g.Await(1, 0, In(200), 64, 0);
  EXPECT_EQ(got.status().code(), Code::kUnavailable);
  EXPECT_NE(got.status().message().find("by the deadline"), std::string::npos);
  EXPECT_FALSE(g.Attached(1));
  c.Send(1, 0, 10, std::vector<float>(kParams, 0.1f));  // too late: nobody asks any more
  c.Hello(1);
  ASSERT_TRUE(AttachedSoon(g, 1));
  ASSERT_TRUE(g.Ask(1, 1, global.data()));
  c.Bye(1);
  got = g.Await(1, 1, In(2000), 64, 0);
  EXPECT_EQ(got.status().code(), Code::kUnavailable);
  EXPECT_NE(got.status().message().find("left"), std::string::npos);
  EXPECT_FALSE(g.Attached(1));
}

TEST(ClientGatewayTest, UpdatesFromAnotherConnectionAreIgnored) {
  zmq::context_t ctx(1);
  transport::TrafficCounters counters;
  ClientGateway g(ctx, Options(), &counters, RealClock::Get());
  ASSERT_TRUE(g.Start().ok());
  FakeClient real(ctx, g.endpoint()), other(ctx, g.endpoint());
  real.Hello(7);
  ASSERT_TRUE(AttachedSoon(g, 7));
  std::vector<float> global(kParams, 0.0f);
  ASSERT_TRUE(g.Ask(7, 2, global.data()));
  other.Send(7, 2, 10, std::vector<float>(kParams, 5.0f));
  other.Bye(7);
  real.Send(7, 2, 10, std::vector<float>(kParams, 0.5f));
  auto got = g.Await(7, 2, In(2000), 64, 0);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->delta[0], 0.5f);
}

// Secured: no hello counts until the coordinator lists the key (the
// client hears why and may retry on the same connection), and a key
// listed for one client id cannot claim another.
TEST(ClientGatewayTest, SecuredGatewaysAdmitOnlyListedKeysForTheirIds) {
  zmq::context_t ctx(1);
  transport::TrafficCounters counters;
  auto server = transport::GenerateCurveKeyPair().value();
  auto mine = transport::GenerateCurveKeyPair().value();
  ClientGateway g(ctx, Options(server), &counters, RealClock::Get());
  ASSERT_TRUE(g.Start().ok());
  FakeClient c(ctx, g.endpoint(), {.keys = mine, .server_key = server.public_key});
  c.Hello(5);
  auto unlisted = c.Next(&g);
  ASSERT_TRUE(unlisted && unlisted->header.has_error_reply());
  EXPECT_EQ(unlisted->header.error_reply().reason(), wire::REFUSAL_UNAUTHORIZED);
  EXPECT_FALSE(g.Attached(5)) << "a key the coordinator did not list got in";
  wire::HeartbeatReply r;
  r.add_authorized_keys(mine.public_key);
  r.add_authorized_ids(5);
  g.Authorize(r);
  c.Hello(3);  // the token names client 5
  auto refused = c.Next(&g);
  ASSERT_TRUE(refused && refused->header.has_error_reply());
  EXPECT_NE(refused->header.error_reply().message().find("token is for client 5"), std::string::npos);
  c.Hello(5);
  EXPECT_TRUE(AttachedSoon(g, 5));
}

}  // namespace
}  // namespace geodesic::cluster
