// The client gateway over loopback: which ids a connection may claim (one
// per connection and key), the task and update round trip, every kind of
// bad update refused with a reason the client hears, a silent or departed
// client (waited for once per job), refusals answered within a budget and
// counted by reason, messages larger than an update closing their
// connection, and (secured) the coordinator's key list deciding who gets in.
#include "worker/federated/client_gateway.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/wire_limits.h"

namespace geodesic::federated {
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

// Two executors' bound on values; a norm bound of `norm` (0: none).
UpdateLimits Limits(int64_t max_samples, double norm) {
  return {.num_params = kParams, .max_samples = max_samples, .max_norm = norm, .max_value = MaxUpdateValue(2)};
}

// Refusals by reason as the stats file has them.
uint32_t Refused(const ClientGateway& g, const std::string& reason) {
  const stats::GatewayStats s = g.Stats();
  auto it = s.refused_by_reason().find(reason);
  return it == s.refused_by_reason().end() ? 0 : it->second;
}

TEST(ClientUpdateCheckTest, RefusesEachKindOfBadUpdate) {
  wire::ClientUpdate u;
  u.set_samples(64);
  std::vector<float> v(kParams, 0.5f);
  EXPECT_TRUE(CheckClientUpdate(u, v.data(), kParams * 4, Limits(64, 10)).ok());
  auto why = [&](const std::vector<float>& values, size_t bytes, double norm) {
    Status s = CheckClientUpdate(u, values.data(), bytes, Limits(64, norm));
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
  EXPECT_TRUE(CheckClientUpdate(u, v.data(), kParams * 4, Limits(64, 0)).ok());  // 0: no bound
  u.set_samples(65);
  EXPECT_NE(why(v, kParams * 4, 10).find("claims 65 samples"), std::string::npos);
  u.set_samples(0);
  EXPECT_NE(why(v, kParams * 4, 10).find("claims 0 samples"), std::string::npos);
}

// Finite values no push could carry are refused whatever the norm bound
// (none here): 1e30, and -FLT_MAX, whose square overflows float. At the
// bound an update passes; E times the bound is within the shards' limit.
TEST(ClientUpdateCheckTest, RefusesValuesBeyondWhatAPushMayCarryWhateverTheNormBound) {
  wire::ClientUpdate u;
  u.set_samples(64);
  for (float bad : {1e30f, std::numeric_limits<float>::lowest()}) {
    std::vector<float> v(kParams, bad);
    Status s = CheckClientUpdate(u, v.data(), kParams * 4, Limits(64, 0));
    EXPECT_EQ(s.code(), Code::kOutOfRange) << bad;
    EXPECT_EQ(UpdateRefusal(s), wire::REFUSAL_VALUE_TOO_LARGE);
    EXPECT_NE(s.message().find("value 0 is"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("beyond the 2.5e+17"), std::string::npos) << s.message();
  }
  std::vector<float> edge(kParams, -MaxUpdateValue(2));
  EXPECT_TRUE(CheckClientUpdate(u, edge.data(), kParams * 4, Limits(64, 0)).ok());
  for (int e : {1, 2, 3, 7, 64, 1000})
    EXPECT_LE(static_cast<double>(e) * MaxUpdateValue(e), 0.5 * static_cast<double>(kMaxValueMagnitude) * 1.000001);
  EXPECT_EQ(UpdateRefusal(InvalidArgument("x")), wire::REFUSAL_BAD_UPDATE);
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
  EXPECT_EQ(Refused(g, "not_your_client"), 2u);
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
  auto got = g.Await(3, 7, In(2000), Limits(64, 0));
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
  struct Bad {
    std::vector<float> delta;
    int64_t samples;
    wire::Refusal reason;
  };
  const std::vector<Bad> bad = {
      {std::vector<float>(kParams - 1, 0.1f), 10, wire::REFUSAL_BAD_UPDATE},  // wrong shape
      {nan, 10, wire::REFUSAL_BAD_UPDATE},                                    // not finite
      {std::vector<float>(kParams, 100.0f), 10, wire::REFUSAL_BAD_UPDATE},    // absurd norm
      {std::vector<float>(kParams, 0.1f), 1000, wire::REFUSAL_BAD_UPDATE},    // more samples than its round
      {std::vector<float>(kParams, 1e30f), 10, wire::REFUSAL_VALUE_TOO_LARGE},
      {std::vector<float>(kParams, std::numeric_limits<float>::lowest()), 10, wire::REFUSAL_VALUE_TOO_LARGE},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    ASSERT_TRUE(g.Ask(5, static_cast<int64_t>(i), global.data()));
    ASSERT_TRUE(c.Next().has_value());  // the task
    c.Send(5, static_cast<int64_t>(i), bad[i].samples, bad[i].delta);
    auto got = g.Await(5, static_cast<int64_t>(i), In(2000), Limits(64, 5.0));
    EXPECT_EQ(UpdateRefusal(got.status()), bad[i].reason) << i << " " << got.status();
    auto told = c.Next();
    ASSERT_TRUE(told && told->header.has_error_reply()) << i;
    EXPECT_EQ(told->header.error_reply().reason(), bad[i].reason) << i;
    EXPECT_TRUE(g.Attached(5)) << "a refused update does not detach the client";
  }
  EXPECT_EQ(Refused(g, "bad_update"), 4u);
  EXPECT_EQ(Refused(g, "value_too_large"), 2u);
}

TEST(ClientGatewayTest, ASilentOrDepartedClientIsDetachedAndTheWaitEnds) {
  zmq::context_t ctx(1);
  transport::TrafficCounters counters;
  ClientGateway g(ctx, Options(), &counters, RealClock::Get());
  ASSERT_TRUE(g.Start().ok());
  FakeClient c(ctx, g.endpoint()), d(ctx, g.endpoint());
  c.Hello(1);
  ASSERT_TRUE(AttachedSoon(g, 1));
  std::vector<float> global(kParams, 0.0f);
  ASSERT_TRUE(g.Ask(1, 0, global.data()));
  auto got = g.Await(1, 0, In(200), Limits(64, 0));
  EXPECT_EQ(got.status().code(), Code::kUnavailable);
  EXPECT_NE(got.status().message().find("by the deadline"), std::string::npos);
  EXPECT_FALSE(g.Attached(1));
  c.Send(1, 0, 10, std::vector<float>(kParams, 0.1f));  // too late: nobody asks any more
  d.Hello(3);
  ASSERT_TRUE(AttachedSoon(g, 3));
  ASSERT_TRUE(g.Ask(3, 1, global.data()));
  d.Bye(3);
  got = g.Await(3, 1, In(2000), Limits(64, 0));
  EXPECT_EQ(got.status().code(), Code::kUnavailable);
  EXPECT_NE(got.status().message().find("left"), std::string::npos);
  EXPECT_FALSE(g.Attached(3));
  EXPECT_EQ(g.Stats().timeouts(), 1u);
  EXPECT_EQ(g.Stats().updates_dropped(), 1u) << "the late update";
}

// A client that once let a round wait until its deadline is never waited
// for again: asked again, its update is taken if it is there, and
// otherwise Await says so at once (the executor trains it virtually).
TEST(ClientGatewayTest, AClientThatTimedOutIsNeverWaitedForAgain) {
  zmq::context_t ctx(1);
  transport::TrafficCounters counters;
  ClientGateway g(ctx, Options(), &counters, RealClock::Get());
  ASSERT_TRUE(g.Start().ok());
  FakeClient c(ctx, g.endpoint());
  c.Hello(5);
  ASSERT_TRUE(AttachedSoon(g, 5));
  std::vector<float> global(kParams, 0.0f);
  ASSERT_TRUE(g.Ask(5, 0, global.data()));
  EXPECT_EQ(g.Await(5, 0, In(100), Limits(64, 0)).status().code(), Code::kUnavailable);
  for (int64_t round = 1; round <= 3; ++round) {  // silent again: no wait, however far the deadline
    c.Hello(5);
    ASSERT_TRUE(AttachedSoon(g, 5));
    ASSERT_TRUE(g.Ask(5, round, global.data()));
    auto got = g.Await(5, round, In(60000), Limits(64, 0));
    EXPECT_EQ(got.status().code(), Code::kDeadlineExceeded) << got.status();
    EXPECT_NE(got.status().message().find("not waited for"), std::string::npos);
  }
  EXPECT_EQ(g.Stats().timeouts(), 1u);
  EXPECT_EQ(g.Stats().not_waited(), 3u);
  // An update that is there when its turn comes is taken.
  ASSERT_TRUE(g.Ask(5, 4, global.data()));
  ASSERT_TRUE(c.Next().has_value());  // the task
  c.Send(5, 4, 10, std::vector<float>(kParams, 0.5f));
  for (int i = 0; i < 100 && g.updates_waiting() == 0; ++i) {
    g.Poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto got = g.Await(5, 4, In(60000), Limits(64, 0));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->delta[0], 0.5f);
}

// One connection serves one client id: a second hello for another id is
// refused, counted and answered, and the first id stays attached.
TEST(ClientGatewayTest, OneConnectionServesOneClientId) {
  zmq::context_t ctx(1);
  transport::TrafficCounters counters;
  ClientGateway g(ctx, Options(), &counters, RealClock::Get());
  ASSERT_TRUE(g.Start().ok());
  FakeClient c(ctx, g.endpoint()), other(ctx, g.endpoint());
  c.Hello(3);
  ASSERT_TRUE(AttachedSoon(g, 3));
  c.Hello(5);
  auto refused = c.Next(&g);
  ASSERT_TRUE(refused && refused->header.has_error_reply());
  EXPECT_EQ(refused->header.error_reply().reason(), wire::REFUSAL_NOT_YOUR_CLIENT);
  EXPECT_NE(refused->header.error_reply().message().find("this connection serves client 3"), std::string::npos)
      << refused->header.error_reply().message();
  EXPECT_FALSE(g.Attached(5));
  EXPECT_TRUE(g.Attached(3));
  EXPECT_EQ(Refused(g, "not_your_client"), 1u);
  c.Bye(3);  // and after a bye, still the one id
  c.Hello(5);
  ASSERT_TRUE(c.Next(&g).has_value());
  EXPECT_EQ(Refused(g, "not_your_client"), 2u);
  other.Hello(5);  // another connection may
  EXPECT_TRUE(AttachedSoon(g, 5));
}

// 200 refused hellos from one connection: every one counted by its reason,
// 32 answered (the budget per 10 s window), the rest not; an honest client
// beside it is answered as before.
TEST(ClientGatewayTest, RefusalsAreAnsweredWithinABudgetAndCountedByReason) {
  zmq::context_t ctx(1);
  transport::TrafficCounters counters;
  ClientGateway g(ctx, Options(), &counters, RealClock::Get());
  ASSERT_TRUE(g.Start().ok());
  FakeClient flood(ctx, g.endpoint()), honest(ctx, g.endpoint());
  for (int i = 0; i < 200; ++i) flood.Hello(4);  // executor 0's
  for (int i = 0; i < 200 && Refused(g, "not_your_client") < 200; ++i) {
    g.Poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(Refused(g, "not_your_client"), 200u);
  EXPECT_EQ(g.Stats().refusals_unanswered(), 168u);
  int answers = 0;
  while (flood.Next().has_value()) ++answers;  // ends 2 s after the last
  EXPECT_LE(answers, 32);
  EXPECT_GE(answers, 16);  // the socket queues 16 a connection; the rest of the 32 went as it drained
  honest.Hello(12);        // outside the population
  auto told = honest.Next(&g);
  ASSERT_TRUE(told && told->header.has_error_reply());
  EXPECT_EQ(Refused(g, "not_your_client"), 201u);
}

// The socket takes no message larger than one update and its header: a
// larger one closes its connection before it is read, so it is never
// held, counted or taken; the client's next connection is served.
TEST(ClientGatewayTest, MessagesLargerThanAnUpdateCloseTheirConnectionUnread) {
  zmq::context_t ctx(1);
  transport::TrafficCounters counters;
  ClientGateway g(ctx, Options(), &counters, RealClock::Get());
  ASSERT_TRUE(g.Start().ok());
  EXPECT_EQ(g.max_message_bytes(), kParams * 4 + kHeaderRoom);
  FakeClient c(ctx, g.endpoint());
  c.Hello(7);
  ASSERT_TRUE(AttachedSoon(g, 7));
  std::vector<float> global(kParams, 0.0f);
  ASSERT_TRUE(g.Ask(7, 0, global.data()));
  ASSERT_TRUE(c.Next().has_value());  // the task
  c.Send(7, 0, 10, std::vector<float>(kParams + kHeaderRoom / 4 + 1, 0.5f));
  auto got = g.Await(7, 0, In(500), Limits(64, 0));
  EXPECT_EQ(got.status().code(), Code::kUnavailable) << got.status();
  EXPECT_EQ(g.Stats().refused_by_reason_size(), 0);
  EXPECT_EQ(g.Stats().updates_dropped(), 0u);
  c.Hello(7);  // ZeroMQ reconnected: a new connection
  EXPECT_TRUE(AttachedSoon(g, 7));
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
  auto got = g.Await(7, 2, In(2000), Limits(64, 0));
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

// Secured: a key admitted for any id (a token minted with --any-id) serves
// the first id it claims, on every connection it opens.
TEST(ClientGatewayTest, SecuredAKeyForAnyIdServesOneId) {
  zmq::context_t ctx(1);
  transport::TrafficCounters counters;
  auto server = transport::GenerateCurveKeyPair().value();
  auto mine = transport::GenerateCurveKeyPair().value();
  ClientGateway g(ctx, Options(server), &counters, RealClock::Get());
  ASSERT_TRUE(g.Start().ok());
  wire::HeartbeatReply r;
  r.add_authorized_keys(mine.public_key);
  r.add_authorized_ids(-1);
  g.Authorize(r);
  FakeClient first(ctx, g.endpoint(), {.keys = mine, .server_key = server.public_key});
  first.Hello(5);
  ASSERT_TRUE(AttachedSoon(g, 5));
  FakeClient second(ctx, g.endpoint(), {.keys = mine, .server_key = server.public_key});
  second.Hello(7);
  auto refused = second.Next(&g);
  ASSERT_TRUE(refused && refused->header.has_error_reply());
  EXPECT_EQ(refused->header.error_reply().reason(), wire::REFUSAL_NOT_YOUR_CLIENT);
  EXPECT_NE(refused->header.error_reply().message().find("this CURVE key served client 5"), std::string::npos)
      << refused->header.error_reply().message();
  EXPECT_FALSE(g.Attached(7));
  second.Hello(5);  // the same id from its new connection: a new process of that client
  EXPECT_TRUE(AttachedSoon(g, 5));
}

}  // namespace
}  // namespace geodesic::federated
