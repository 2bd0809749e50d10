#include "transport/message.h"

#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <numeric>
#include <thread>

#include <pthread.h>

#include "transport/interrupted.h"
#include "transport/protobuf_log.h"
#include "transport/routes.h"

namespace geodesic::transport {
namespace {

SocketOptions Opts(wire::Role role, int id, const std::string& job = "job") {
  SocketOptions o;
  o.job = job;
  o.role = role;
  o.id = id;
  return o;
}

std::optional<Incoming> ReceiveWithin(Socket& s, int ms) {
  for (int i = 0; i < ms / 10; ++i) {
    if (auto in = s.Receive()) return in;
    s.WaitReadable(10);
  }
  return std::nullopt;
}

class MessageTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(router_.Bind(GetParam()).ok());
    ASSERT_TRUE(dealer_.Connect(router_.endpoint()).ok());
  }
  zmq::context_t ctx_{1};
  TrafficCounters rc_, dc_;
  Socket router_{ctx_, zmq::socket_type::router, Opts(wire::SERVER, 1), &rc_};
  Socket dealer_{ctx_, zmq::socket_type::dealer, Opts(wire::WORKER, 3), &dc_};
};

TEST_P(MessageTest, HeaderAndZeroCopyPayloadsRoundTrip) {
  auto data = std::make_shared<std::vector<float>>(100000);
  std::iota(data->begin(), data->end(), 0.0f);
  std::weak_ptr<std::vector<float>> weak = data;
  wire::Header h;
  h.set_request_id(42);
  h.mutable_push_request()->set_clock(7);
  h.mutable_push_request()->add_chunks()->set_chunk_id(5);
  {
    std::vector<Payload> payloads = {
        Payload{data->data(), data->size() * 4, std::shared_ptr<const void>(data, data->data())},
        CopyPayload("abc", 3)};
    data.reset();
    ASSERT_TRUE(dealer_.Send(h, payloads).ok());
  }
  auto in = ReceiveWithin(router_, 2000);
  ASSERT_TRUE(in.has_value());
  ASSERT_TRUE(in->status.ok()) << in->status;
  const Message& m = in->message;
  EXPECT_FALSE(m.peer.empty());
  EXPECT_EQ(m.header.request_id(), 42u);
  EXPECT_EQ(m.header.sender_role(), wire::WORKER);
  EXPECT_EQ(m.header.sender_id(), 3);
  EXPECT_EQ(m.header.job(), "job");
  EXPECT_EQ(m.header.protocol(), kProtocolVersion);
  EXPECT_EQ(m.header.push_request().clock(), 7);
  ASSERT_EQ(m.frames.size(), 2u);
  std::vector<float> scratch;
  const float* f = m.FrameFloats(0, &scratch);
  EXPECT_EQ(f[0], 0.0f);
  EXPECT_EQ(f[99999], 99999.0f);
  EXPECT_EQ(m.frames[1].to_string(), "abc");
  EXPECT_EQ(dc_.bytes_sent.load(), rc_.bytes_received.load());
  EXPECT_GT(rc_.bytes_received.load(), 400000u);

  // And back on the ROUTER to that peer.
  wire::Header reply;
  reply.mutable_push_ack()->set_clock(7);
  ASSERT_TRUE(router_.Send(reply, {}, m.peer).ok());
  auto back = ReceiveWithin(dealer_, 2000);
  ASSERT_TRUE(back && back->status.ok());
  EXPECT_EQ(back->message.header.push_ack().clock(), 7);
  // ZeroMQ released our buffer once it was sent (over tcp) or once the
  // receiver dropped its frame (inproc passes the buffer itself).
  in.reset();
  for (int i = 0; i < 100 && !weak.expired(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(weak.expired());
}

// Sends raw frames, bypassing Socket's stamping, to test the receive checks.
void SendRaw(Socket& s, const std::vector<std::string>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    zmq::message_t m(frames[i].data(), frames[i].size());
    s.raw().send(m, i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

std::string Serialized(wire::Header h) {
  if (!h.protocol()) h.set_protocol(kProtocolVersion);
  if (h.job().empty()) h.set_job("job");
  return h.SerializeAsString();
}

Status ReceiveStatus(Socket& s) {
  auto in = ReceiveWithin(s, 2000);
  if (!in) return Internal("nothing arrived");
  return in->status;
}

TEST_P(MessageTest, MalformedHeaderIsRefused) {
  SendRaw(dealer_, {"\xff\xff\xff garbage"});
  Status s = ReceiveStatus(router_);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("malformed header"), std::string::npos) << s;
  EXPECT_EQ(rc_.messages_refused.load(), 1u);
}

TEST_P(MessageTest, UnknownMessageTypeIsRefused) {
  // protocol=1, job="job", then field 99 (a body from the future), empty.
  std::string raw = Serialized(wire::Header()) + std::string("\x9a\x06\x00", 3);
  SendRaw(dealer_, {raw});
  Status s = ReceiveStatus(router_);
  EXPECT_NE(s.message().find("unknown message type"), std::string::npos) << s;
}

TEST_P(MessageTest, FrameCountMismatchIsRefused) {
  wire::Header h;
  h.mutable_pull_request();
  h.set_payload_frames(2);
  SendRaw(dealer_, {Serialized(h), "only one"});
  Status s = ReceiveStatus(router_);
  EXPECT_NE(s.message().find("declares 2 payload frames, 1 arrived"), std::string::npos) << s;
}

TEST_P(MessageTest, WrongProtocolOrJobIsRefused) {
  wire::Header h;
  h.mutable_pull_request();
  h.set_protocol(99);
  SendRaw(dealer_, {Serialized(h)});
  EXPECT_NE(ReceiveStatus(router_).message().find("protocol version 99"), std::string::npos);
  wire::Header j;
  j.mutable_pull_request();
  j.set_job("other");
  SendRaw(dealer_, {Serialized(j)});
  EXPECT_NE(ReceiveStatus(router_).message().find("for job 'other'"), std::string::npos);
}

TEST_P(MessageTest, SocketStillServesAfterRefusals) {
  SendRaw(dealer_, {"junk"});
  EXPECT_FALSE(ReceiveStatus(router_).ok());
  wire::Header h;
  h.mutable_status_request();
  ASSERT_TRUE(dealer_.Send(h, {}).ok());
  auto in = ReceiveWithin(router_, 2000);
  ASSERT_TRUE(in && in->status.ok());
  EXPECT_TRUE(in->message.header.has_status_request());
}

TEST_P(MessageTest, RouterSendToUnknownPeerIsUnavailable) {
  wire::Header h;
  h.mutable_push_ack();
  Status s = router_.Send(h, {}, "no-such-peer");
  EXPECT_EQ(s.code(), Code::kUnavailable) << s;
}

INSTANTIATE_TEST_SUITE_P(Transports, MessageTest, ::testing::Values("inproc://message-test", "tcp://127.0.0.1:*"));

TEST(MessageLimitTest, OversizedMessageIsNotDelivered) {
  zmq::context_t ctx(1);
  TrafficCounters rc, dc;
  SocketOptions ro = Opts(wire::SERVER, 0);
  ro.max_message_bytes = 1 << 16;
  Socket router(ctx, zmq::socket_type::router, ro, &rc);
  Socket dealer(ctx, zmq::socket_type::dealer, Opts(wire::WORKER, 0), &dc);
  ASSERT_TRUE(router.Bind("tcp://127.0.0.1:*").ok());
  ASSERT_TRUE(dealer.Connect(router.endpoint()).ok());
  std::vector<char> big(1 << 20, 'x');
  wire::Header h;
  h.mutable_push_request();
  ASSERT_TRUE(dealer.Send(h, {CopyPayload(big.data(), big.size())}).ok());
  // ZeroMQ drops the connection before reading the frame into memory.
  EXPECT_FALSE(ReceiveWithin(router, 500).has_value());
  EXPECT_LT(rc.bytes_received.load(), big.size());
}

// A peer that never reads fills its queue; a never-blocking ROUTER then
// drops what it sends that peer at once (counted) instead of waiting, and
// still serves another peer.
TEST(MessageLimitTest, NeverBlockingRouterDropsForAPeerThatDoesNotRead) {
  zmq::context_t ctx(1);
  TrafficCounters rc, dc;
  SocketOptions ro = Opts(wire::SERVER, 0);
  ro.send_timeout_ms = kNeverBlock;
  ro.high_water_mark = 100;
  Socket router(ctx, zmq::socket_type::router, ro, &rc);
  ASSERT_TRUE(router.Bind("tcp://127.0.0.1:*").ok());
  SocketOptions deaf_options = Opts(wire::WORKER, 0);
  deaf_options.high_water_mark = 100;
  Socket deaf(ctx, zmq::socket_type::dealer, deaf_options, &dc),
      reader(ctx, zmq::socket_type::dealer, Opts(wire::WORKER, 1), &dc);
  ASSERT_TRUE(deaf.Connect(router.endpoint()).ok());
  ASSERT_TRUE(reader.Connect(router.endpoint()).ok());
  wire::Header hello;
  hello.mutable_status_request();
  ASSERT_TRUE(deaf.Send(hello, {}).ok());
  auto in = ReceiveWithin(router, 2000);
  ASSERT_TRUE(in && in->status.ok());
  const std::string deaf_peer = in->message.peer;
  std::vector<char> bytes(64 << 10, 'x');
  wire::Header reply;
  reply.mutable_pull_reply();
  const auto start = std::chrono::steady_clock::now();
  int sent = 0, dropped = 0;
  // The queues (ZeroMQ's and the kernel's on both ends) hold a few MB at most.
  for (int i = 0; i < 20000 && dropped < 100; ++i)
    router.Send(reply, {CopyPayload(bytes.data(), bytes.size())}, deaf_peer).ok() ? ++sent : ++dropped;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(dropped, 100) << "sent " << sent;
  EXPECT_EQ(rc.sends_dropped.load(), 100u);
  EXPECT_LT(seconds, 4.0) << "a full peer must not block the sender";
  ASSERT_TRUE(reader.Send(hello, {}).ok());
  in = ReceiveWithin(router, 2000);
  ASSERT_TRUE(in && in->status.ok());
  EXPECT_TRUE(router.Send(reply, {}, in->message.peer).ok());
  EXPECT_TRUE(ReceiveWithin(reader, 2000).has_value());
}

TEST(MessageTest2, PeerNameSaysClaimRoutingIdAndAddress) {
  zmq::context_t ctx(1);
  TrafficCounters rc, dc;
  Socket router(ctx, zmq::socket_type::router, Opts(wire::SERVER, 0), &rc);
  Socket dealer(ctx, zmq::socket_type::dealer, Opts(wire::WORKER, 7), &dc);
  ASSERT_TRUE(router.Bind("tcp://127.0.0.1:*").ok());
  ASSERT_TRUE(dealer.Connect(router.endpoint()).ok());
  wire::Header h;
  h.mutable_status_request();
  ASSERT_TRUE(dealer.Send(h, {}).ok());
  auto in = ReceiveWithin(router, 2000);
  ASSERT_TRUE(in && in->status.ok());
  const std::string name = PeerName(in->message);
  EXPECT_EQ(name.rfind("worker 7 (peer ", 0), 0u) << name;
  EXPECT_NE(name.find(" at 127.0.0.1)"), std::string::npos) << name;
  Message unnamed;
  EXPECT_EQ(PeerName(unnamed), "unnamed peer");
  unnamed.header.set_sender_role(static_cast<wire::Role>(77));
  unnamed.peer = std::string("\x00\x80", 2);
  EXPECT_EQ(PeerName(unnamed), "role 77 0 (peer 0080)");
}

TEST(MessageTest2, BodyNameAndErrorCodes) {
  wire::Header h;
  h.mutable_pull_reply();
  EXPECT_EQ(BodyName(h), "pull_reply");
  EXPECT_EQ(FromWire(ToWire(Code::kDeadlineExceeded)), Code::kDeadlineExceeded);
  EXPECT_EQ(FromWire(static_cast<wire::ErrorCode>(1000)), Code::kInternal);
}

}  // namespace
}  // namespace geodesic::transport

namespace geodesic::transport {
namespace {

TEST(RoutesTest, ParsesAndRewritesOnlyRoutedEndpoints) {
  auto routes = ParseRoutes({"tcp://127.0.0.1:7001=tcp://127.0.0.1:9001", "tcp://127.0.0.2:7002=tcp://127.0.0.1:9002"});
  ASSERT_TRUE(routes.ok()) << routes.status();
  SetRoutes(*routes);
  EXPECT_EQ(RouteFor("tcp://127.0.0.1:7001"), "tcp://127.0.0.1:9001");
  EXPECT_EQ(RouteFor("tcp://127.0.0.2:7002"), "tcp://127.0.0.1:9002");
  EXPECT_EQ(RouteFor("tcp://127.0.0.1:7003"), "tcp://127.0.0.1:7003");
  SetRoutes({});
  EXPECT_EQ(RouteFor("tcp://127.0.0.1:7001"), "tcp://127.0.0.1:7001");
  for (const char* bad : {"tcp://127.0.0.1:1", "tcp://127.0.0.1:1=", "=tcp://127.0.0.1:1", "udp://x:1=tcp://y:2",
                          "tcp://127.0.0.1:=tcp://127.0.0.1:2"}) {
    auto r = ParseRoutes({bad});
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--route"), std::string::npos) << r.status();
  }
  EXPECT_FALSE(ParseRoutes({"tcp://a:1=tcp://b:2", "tcp://a:1=tcp://c:3"}).ok());  // routed twice
}

std::vector<zmq::message_t> Frames(const wire::Header& h, size_t payload_bytes) {
  std::vector<zmq::message_t> parts;
  parts.emplace_back(h.SerializeAsString());
  if (payload_bytes) parts.emplace_back(payload_bytes);
  return parts;
}

TEST(DecodeFramesTest, ChecksFramingOnBytes) {
  wire::Header h;
  h.set_protocol(kProtocolVersion);
  h.set_job("job");
  h.set_payload_frames(1);
  h.mutable_push_request();
  SocketOptions o = Opts(wire::SERVER, 0);
  o.max_message_bytes = 4096;
  Incoming ok = DecodeFrames(Frames(h, 1024), false, o);
  ASSERT_TRUE(ok.status.ok()) << ok.status;
  EXPECT_EQ(ok.message.frames.size(), 1u);
  Incoming big = DecodeFrames(Frames(h, 8192), false, o);
  EXPECT_NE(big.status.message().find("exceeds the limit of 4096"), std::string::npos) << big.status;
  EXPECT_FALSE(DecodeFrames({}, true, o).status.ok());
  h.set_payload_frames(2);
  EXPECT_NE(DecodeFrames(Frames(h, 16), false, o).status.message().find("declares 2 payload frames"),
            std::string::npos);
}

// A header whose string field is not UTF-8 is refused, and protobuf's own
// ERROR line for it is throttled with ours instead of written per message.
TEST(DecodeFramesTest, NonUtf8HeadersAreRefusedAndProtobufsLinesThrottled) {
  RouteProtobufLogs();
  wire::Header h;
  h.set_protocol(kProtocolVersion);
  h.set_job("\xff\xfe");
  h.mutable_push_request();
  const SocketOptions o = Opts(wire::SERVER, 0);
  const uint64_t before = ProtobufLogsSuppressed();
  for (int i = 0; i < 6; ++i) {
    Incoming got = DecodeFrames(Frames(h, 0), false, o);
    EXPECT_FALSE(got.status.ok());
    EXPECT_FALSE(got.status.message().empty());
  }
  // Seven protobuf lines (one from serializing, six from parsing) within a
  // second or two: at most two pass.
  EXPECT_GE(ProtobufLogsSuppressed() - before, 5u);
}

// Signals arrive while ZeroMQ calls run (the launcher's SIGUSR1 checkpoint
// and SIGUSR2 re-plan requests; libFuzzer's timer): a call then fails with
// EINTR having sent or taken nothing, and is made again. Without that, a
// send failed outright, and a receive interrupted between the frames of one
// message returned it cut short and read its remaining frames as the next
// message.
void NoteSignal(int) {}

// Sends SIGUSR1 to `target` every millisecond until destroyed.
class SignalStorm {
 public:
  explicit SignalStorm(pthread_t target) {
    struct sigaction sa {};
    sa.sa_handler = NoteSignal;  // no SA_RESTART: blocked calls return EINTR
    sigaction(SIGUSR1, &sa, &old_);
    thread_ = std::thread([this, target] {
      for (int i = 0; i < 60000 && !done_.load(); ++i) {
        pthread_kill(target, SIGUSR1);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  ~SignalStorm() {
    done_ = true;
    thread_.join();
    sigaction(SIGUSR1, &old_, nullptr);
  }

 private:
  struct sigaction old_ {};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

TEST(SignalTest, ASignalDuringABlockedSendIsNotAFailure) {
  zmq::context_t ctx(1);
  TrafficCounters rc, dc;
  SocketOptions ro = Opts(wire::SERVER, 1);
  ro.high_water_mark = 1;
  Socket router(ctx, zmq::socket_type::router, ro, &rc);  // does not read until the end
  SocketOptions o = Opts(wire::WORKER, 3);
  o.high_water_mark = 1;
  o.send_timeout_ms = 300;
  Socket dealer(ctx, zmq::socket_type::dealer, o, &dc);
  ASSERT_TRUE(router.Bind("tcp://127.0.0.1:*").ok());
  ASSERT_TRUE(dealer.Connect(router.endpoint()).ok());
  std::vector<char> big(1 << 20);
  wire::Header h;
  h.mutable_push_request()->set_clock(1);
  Status s;
  {
    SignalStorm storm(pthread_self());
    // Fill the queue until a send blocks for its whole timeout (bounded).
    for (int i = 0; i < 1000 && s.ok(); ++i) s = dealer.Send(h, {CopyPayload(big.data(), big.size())});
  }
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("timed out"), std::string::npos) << s;
  EXPECT_EQ(s.message().find("Interrupted"), std::string::npos) << s;
  // And the pair still works once the router reads.
  int got = 0;
  while (ReceiveWithin(router, 200)) ++got;
  EXPECT_GT(got, 0);
}

// bind and connect can fail with EINTR before doing anything (the fuzzer's
// timer hit a connect after 3.5 million inputs); they are made again.
TEST(SignalTest, InterruptedCallsAreMadeAgainAndOtherErrorsPass) {
  int calls = 0;
  EXPECT_EQ(RetryInterrupted([&] {
              if (++calls < 3) throw zmq::error_t(EINTR);
              return 7;
            }),
            7);
  EXPECT_EQ(calls, 3);
  calls = 0;
  EXPECT_THROW(RetryInterrupted([&] {
                 ++calls;
                 throw zmq::error_t(EINVAL);
               }),
               zmq::error_t);
  EXPECT_EQ(calls, 1);  // not retried
  calls = 0;
  EXPECT_THROW(RetryInterrupted(
                   [&] {
                     ++calls;
                     throw zmq::error_t(EINTR);
                   },
                   5),
               zmq::error_t);
  EXPECT_EQ(calls, 5);  // bounded
  calls = 0;
  EXPECT_EQ(RetryInterruptedC([&] {
              if (++calls < 4) {
                errno = EINTR;
                return -1;
              }
              return 0;
            }),
            0);
  EXPECT_EQ(calls, 4);
}

// Binds and connects under a storm of signals all succeed.
TEST(SignalTest, BindAndConnectSurviveASignalStorm) {
  zmq::context_t ctx(1);
  TrafficCounters c;
  int failures = 0;
  SignalStorm storm(pthread_self());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 300 && std::chrono::steady_clock::now() - start < std::chrono::seconds(3); ++i) {
    Socket router(ctx, zmq::socket_type::router, Opts(wire::SERVER, 1), &c);
    Socket dealer(ctx, zmq::socket_type::dealer, Opts(wire::WORKER, 2), &c);
    const std::string inproc = "inproc://storm-" + std::to_string(i);
    failures += !router.Bind(inproc).ok();
    failures += !dealer.Connect(inproc).ok();
  }
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace geodesic::transport

namespace geodesic::transport {
namespace {

// Endpoints may name hosts: a bind resolves the name (ZeroMQ itself binds
// only addresses and interfaces), and a wait says what a name resolves to.
TEST(EndpointNameTest, BindResolvesANameAndRefusesOneThatDoesNotResolve) {
  zmq::context_t ctx(1);
  TrafficCounters counters;
  Socket named(ctx, zmq::socket_type::router, SocketOptions{}, &counters);
  ASSERT_TRUE(named.Bind("tcp://localhost:*").ok());
  EXPECT_EQ(named.endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << named.endpoint();
  Socket nowhere(ctx, zmq::socket_type::router, SocketOptions{}, &counters);
  Status s = nowhere.Bind("tcp://no-such-host.invalid:*");
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_NE(s.message().find("no-such-host.invalid"), std::string::npos) << s;
  EXPECT_NE(s.message().find("does not resolve"), std::string::npos) << s;
}

TEST(EndpointNameTest, AWaitSaysWhatTheNameResolvesTo) {
  EXPECT_EQ(DescribeEndpointHost("tcp://127.0.0.1:5555"), "");
  EXPECT_EQ(DescribeEndpointHost("tcp://*:5555"), "");
  EXPECT_EQ(DescribeEndpointHost("inproc://x"), "");
  EXPECT_EQ(DescribeEndpointHost("tcp://localhost:5555"), " (localhost resolves to 127.0.0.1)");
  EXPECT_NE(DescribeEndpointHost("tcp://no-such-host.invalid:5555").find("no-such-host.invalid does not resolve"),
            std::string::npos);
  // A routed endpoint is waited on through its route (a compose router).
  SetRoutes({{"tcp://coordinator.invalid:7400", "tcp://localhost:7500"}});
  EXPECT_EQ(DescribeEndpointHost("tcp://coordinator.invalid:7400"),
            " (routed to tcp://localhost:7500; localhost resolves to 127.0.0.1)");
  SetRoutes({});
}

}  // namespace
}  // namespace geodesic::transport
