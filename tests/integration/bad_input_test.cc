// A real coordinator and server shard, fed malformed and hostile messages by
// this test acting as worker 0: each is refused with a clear error, counted,
// changes nothing, and the shard keeps serving.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <zmq.hpp>

#include "cluster/member_client.h"
#include "common/clock.h"
#include "tests/integration/harness.h"
#include "transport/message.h"

namespace geodesic {
namespace {

using testing::Process;
using testing::TempDir;

const char* kJob = R"(
name: badinput
regions:
  local: {servers: 1, workers: 1}
model: {name: synthetic, synthetic_params: 1000}
wire: {chunk_bytes: 1024, max_message_bytes: 1048576}
membership: {heartbeat_ms: 100, lease_ms: 60000, rpc_timeout_s: 10}
)";

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteText(dir_ / "job.yaml", kJob);
    coordinator_ = std::make_unique<Process>(
        std::vector<std::string>{"coordinator", "--job", dir_ / "job.yaml", "--endpoint-file", dir_ / "coord",
                                 "--no-evaluator", "--stats-file", dir_ / "coordinator.json"},
        dir_ / "coordinator.log");
    ASSERT_TRUE(testing::WaitForFile(dir_ / "coord", 20));
    endpoint_ = testing::ReadText(dir_ / "coord");
    server_ = std::make_unique<Process>(
        std::vector<std::string>{"server", "--job", dir_ / "job.yaml", "--id", "0", "--coordinator", endpoint_,
                                 "--stats-file", dir_ / "server.json"},
        dir_ / "server.log");
    cluster::MemberOptions mo = testing::TestWorker("badinput", endpoint_, 1000);
    member_ = std::make_unique<cluster::MemberClient>(ctx_, mo, &counters_, RealClock::Get());
    auto joined = member_->Join(&stop_);
    ASSERT_TRUE(joined.ok()) << joined.status() << "\n" << testing::ReadText(dir_ / "server.log");
    assignment_ = *joined;
    member_->Start(nullptr);
    ASSERT_EQ(assignment_.servers_size(), 1);
    ASSERT_EQ(assignment_.shard_map().owner_size(), 4);  // 1000 floats in chunks of 256
    socket_ = std::make_unique<transport::Socket>(
        ctx_, zmq::socket_type::dealer, transport::SocketOptions{.job = "badinput", .role = wire::WORKER, .id = 0},
        &counters_);
    ASSERT_TRUE(socket_->Connect(assignment_.servers(0).endpoint()).ok());
  }

  void TearDown() override {
    member_.reset();
    server_->Signal(SIGTERM);
    coordinator_->Signal(SIGTERM);
    EXPECT_EQ(server_->Wait(10), 0) << testing::ReadText(dir_ / "server.log");
    EXPECT_EQ(coordinator_->Wait(10), 0);
  }

  wire::Header Await() {
    for (int i = 0; i < 500; ++i) {
      if (auto in = socket_->Receive()) {
        EXPECT_TRUE(in->status.ok()) << in->status;
        return in->message.header;
      }
      socket_->WaitReadable(10);
    }
    ADD_FAILURE() << "no reply from the server within 5 s";
    return {};
  }

  // Sends and expects an ErrorReply containing `needle`.
  void ExpectRefused(const wire::Header& h, const std::vector<transport::Payload>& payloads,
                     const std::string& needle) {
    ASSERT_TRUE(socket_->Send(h, payloads).ok());
    wire::Header r = Await();
    ASSERT_TRUE(r.has_error_reply()) << "expected a refusal mentioning '" << needle << "', got "
                                     << transport::BodyName(r);
    EXPECT_NE(r.error_reply().message().find(needle), std::string::npos) << r.error_reply().message();
  }

  void SendRaw(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      zmq::message_t m(frames[i].data(), frames[i].size());
      socket_->raw().send(m, i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }

  static wire::Header Push(int64_t clock, std::vector<uint32_t> chunks, uint64_t elems = 256) {
    wire::Header h;
    h.set_request_id(clock + 1000);
    auto* p = h.mutable_push_request();
    p->set_clock(clock);
    for (uint32_t c : chunks) {
      auto* d = p->add_chunks();
      d->set_chunk_id(c);
      d->set_codec(wire::FP32);
      d->set_num_elems(elems);
    }
    return h;
  }

  // Valid initial values (0.5) for all four chunks, as worker 0.
  void InitAll() {
    std::vector<float> init(1000, 0.5f);
    wire::Header ih;
    std::vector<transport::Payload> ip;
    for (uint32_t c = 0; c < 4; ++c) {
      auto* d = ih.mutable_init_request()->add_chunks();
      d->set_chunk_id(c);
      d->set_codec(wire::FP32);
      uint64_t n = c < 3 ? 256 : 232;
      d->set_num_elems(n);
      ip.push_back(transport::CopyPayload(init.data() + 256 * c, n * 4));
    }
    ASSERT_TRUE(socket_->Send(ih, ip).ok());
    ASSERT_TRUE(Await().has_init_ack());
  }

  std::vector<float> PullChunk0() {
    wire::Header h;
    h.mutable_pull_request()->set_clock(0);
    h.mutable_pull_request()->add_chunk_ids(0);
    EXPECT_TRUE(socket_->Send(h, {}).ok());
    for (int i = 0; i < 500; ++i) {
      if (auto in = socket_->Receive()) {
        EXPECT_TRUE(in->message.header.has_pull_reply()) << transport::BodyName(in->message.header);
        if (in->message.frames.empty()) return {};
        const auto& f = in->message.frames[0];
        const float* v = static_cast<const float*>(f.data());
        return std::vector<float>(v, v + f.size() / 4);
      }
      socket_->WaitReadable(10);
    }
    ADD_FAILURE() << "pull not answered";
    return {};
  }

  TempDir dir_;
  zmq::context_t ctx_{1};
  transport::TrafficCounters counters_;
  std::atomic<bool> stop_{false};
  std::string endpoint_;
  void SendEveryMalformedMessage();

  std::unique_ptr<Process> coordinator_, server_;
  std::unique_ptr<cluster::MemberClient> member_;
  wire::RegisterReply assignment_;
  std::unique_ptr<transport::Socket> socket_;
};

// Every kind of malformed message, each refused with the reason named
// (16 refusals in all; the test counts them in the shard's stats).
void BadInputTest::SendEveryMalformedMessage() {
  std::vector<float> good(256, 1.0f), bad = good;
  bad[17] = std::numeric_limits<float>::quiet_NaN();
  auto payload = [](const std::vector<float>& v, size_t bytes) { return transport::CopyPayload(v.data(), bytes); };

  // Garbage that is not a protobuf header at all.
  SendRaw({"\xff\xff\xff\xff not a header"});
  EXPECT_NE(Await().error_reply().message().find("malformed header"), std::string::npos);
  // A header whose body is a type from the future.
  wire::Header empty;
  empty.set_protocol(transport::kProtocolVersion);
  empty.set_job("badinput");
  empty.set_sender_role(wire::WORKER);
  SendRaw({empty.SerializeAsString() + std::string("\x9a\x06\x00", 3)});
  EXPECT_NE(Await().error_reply().message().find("unknown message type"), std::string::npos);
  // Wrong payload size for the codec.
  ExpectRefused(Push(0, {0}), {payload(good, 1000)}, "must be 1024 bytes");
  // A shape that is not the chunk's.
  ExpectRefused(Push(0, {0}, 128), {payload(good, 512)}, "has 256 values");
  // Chunk ids that do not exist.
  ExpectRefused(Push(0, {99}), {payload(good, 1024)}, "chunk 99 does not exist");
  // NaN in a gradient.
  ExpectRefused(Push(0, {0}), {payload(bad, 1024)}, "values that are not finite");
  // An unknown codec.
  wire::Header codec = Push(0, {0});
  codec.mutable_push_request()->mutable_chunks(0)->set_codec(static_cast<wire::Codec>(42));
  ExpectRefused(codec, {payload(good, 1024)}, "unknown codec");
  // More chunks described than frames sent.
  ExpectRefused(Push(0, {0, 1}), {payload(good, 1024)}, "2 chunks described but 1 payload frames");
  // The same chunk twice.
  ExpectRefused(Push(0, {0, 0}), {payload(good, 1024), payload(good, 1024)}, "appears twice");
  // Compressed garbage: an int8 payload with a bad block size, and a top-k
  // payload whose index runs past the chunk.
  wire::Header q8 = Push(0, {0});
  q8.mutable_push_request()->mutable_chunks(0)->set_codec(wire::INT8);
  q8.mutable_push_request()->mutable_chunks(0)->set_block(3);
  ExpectRefused(q8, {payload(good, 260)}, "chunk 0");
  wire::Header tk = Push(0, {0});
  tk.mutable_push_request()->mutable_chunks(0)->set_codec(wire::TOPK);
  tk.mutable_push_request()->mutable_chunks(0)->set_kept(1);
  const uint8_t topk_bytes[] = {0xff, 0x0f, 0, 0, 0x80, 0x3f};  // index 2047 of 256, value 1.0
  ExpectRefused(tk, {transport::CopyPayload(topk_bytes, sizeof(topk_bytes))}, "chunk 0");
  // A pull for a chunk that is not there, and a negative clock.
  wire::Header pull;
  pull.mutable_pull_request()->add_chunk_ids(4);
  ExpectRefused(pull, {}, "chunk 4 does not exist");
  ExpectRefused(Push(-1, {0}), {payload(good, 1024)}, "negative clock");
  // A message type the server does not serve.
  wire::Header hb;
  hb.mutable_heartbeat();
  ExpectRefused(hb, {}, "does not serve heartbeat");
  // Replication ops are for a shard's backup, from its primary only: a
  // primary (or an unreplicated shard) takes none, whoever sends them.
  wire::Header rep;
  rep.mutable_replicate_request()->set_seq(1);
  rep.mutable_replicate_request()->set_worker(0);
  *rep.mutable_replicate_request()->mutable_push() = Push(0, {0}).push_request();
  ExpectRefused(rep, {payload(good, 1024)}, "takes no replication");
}

TEST_F(BadInputTest, EveryMalformedMessageIsRefusedCountedAndHarmless) {
  InitAll();
  if (HasFatalFailure()) return;
  SendEveryMalformedMessage();
  std::vector<float> good(256, 1.0f);
  auto payload = [](const std::vector<float>& v, size_t bytes) { return transport::CopyPayload(v.data(), bytes); };

  // Nothing of that reached the parameters.
  std::vector<float> now = PullChunk0();
  ASSERT_EQ(now.size(), 256u);
  for (float v : now) ASSERT_EQ(v, 0.5f);

  // The shard still takes a good push (lr 0.05, momentum buffer = grad).
  ASSERT_TRUE(socket_->Send(Push(0, {0}), {payload(good, 1024)}).ok());
  wire::Header ack = Await();
  ASSERT_TRUE(ack.has_push_ack()) << transport::BodyName(ack) << " " << ack.DebugString();
  EXPECT_EQ(ack.push_ack().result(), wire::APPLIED);
  // The same push again (a retry): acknowledged as a duplicate, not applied twice.
  ASSERT_TRUE(socket_->Send(Push(0, {0}), {payload(good, 1024)}).ok());
  EXPECT_EQ(Await().push_ack().result(), wire::DUPLICATE);
  now = PullChunk0();
  ASSERT_EQ(now.size(), 256u);
  EXPECT_FLOAT_EQ(now[0], 0.5f - 0.05f);

  // A worker whose loss went NaN skips its push: the clock advances, nothing is applied.
  wire::Header skip;
  skip.mutable_push_request()->set_clock(1);
  skip.mutable_push_request()->set_skipped(true);
  ASSERT_TRUE(socket_->Send(skip, {}).ok());
  EXPECT_EQ(Await().push_ack().result(), wire::APPLIED);
  ExpectRefused(skip, {payload(good, 1024)}, "carries no payloads");
  now = PullChunk0();
  ASSERT_EQ(now.size(), 256u);
  EXPECT_FLOAT_EQ(now[0], 0.5f - 0.05f);

  // The stats file counts every refusal by reason.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  auto stats = testing::ReadJson(dir_ / "server.json");
  ASSERT_TRUE(stats.is_object()) << testing::ReadText(dir_ / "server.log");
  auto reasons = stats["refused_by_reason"];
  for (const char* r : {"malformed", "unknown_type", "bad_payload_size", "wrong_shape", "chunk_out_of_range",
                        "non_finite", "unknown_codec", "frame_count", "duplicate_chunk", "bad_clock",
                        "unsupported_type", "bad_payload", "not_backup"})
    EXPECT_GE(reasons.value(r, 0), 1) << r << " in " << reasons.dump();
  EXPECT_EQ(stats.value("messages_refused", 0), 16);
  EXPECT_EQ(stats.value("duplicates", 0), 1);
}

long RssKiB(pid_t pid) {
  std::string status = testing::ReadText("/proc/" + std::to_string(pid) + "/status");
  auto at = status.find("VmRSS:");
  return at == std::string::npos ? -1 : std::stol(status.substr(at + 6));
}

// A raw DEALER sends messages over wire.max_message_bytes (1 MiB here):
// ZeroMQ drops the connection before reading them, so the receiver's memory
// does not grow, nothing is handled, and it keeps answering everyone else.
TEST_F(BadInputTest, OversizedMessagesAreDroppedUnread) {
  const std::string big(32 << 20, 'x');
  const std::string server_endpoint = assignment_.servers(0).endpoint();
  using Target = std::pair<const std::string*, pid_t>;
  for (const Target& target : {Target{&server_endpoint, server_->pid()}, Target{&endpoint_, coordinator_->pid()}}) {
    const long rss_before = RssKiB(target.second);
    ASSERT_GT(rss_before, 0);
    for (int i = 0; i < 8; ++i) {
      zmq::socket_t raw(ctx_, zmq::socket_type::dealer);
      raw.set(zmq::sockopt::linger, 2000);
      raw.connect(*target.first);
      wire::Header h;
      h.set_protocol(transport::kProtocolVersion);
      h.set_job("badinput");
      h.set_sender_role(wire::WORKER);
      h.set_payload_frames(1);
      h.mutable_status_request();
      zmq::message_t head(h.SerializeAsString()), payload(big.data(), big.size());
      ASSERT_TRUE(raw.send(head, zmq::send_flags::sndmore));
      ASSERT_TRUE(raw.send(payload, zmq::send_flags::none));
      raw.close();  // waits (linger) while ZeroMQ pushes the bytes
    }
    const long rss_after = RssKiB(target.second);
    // 256 MiB were offered; a receiver that read them would have grown by at least 32 MiB.
    EXPECT_LT(rss_after - rss_before, 16 << 10) << "RSS " << rss_before << " -> " << rss_after << " KiB";
  }
  // Both still serve: the coordinator answers a status request, the shard a pull.
  transport::Socket status(ctx_, zmq::socket_type::dealer,
                           transport::SocketOptions{.job = "badinput", .role = wire::CLIENT, .id = 0}, &counters_);
  ASSERT_TRUE(status.Connect(endpoint_).ok());
  wire::Header req;
  req.mutable_status_request();
  ASSERT_TRUE(status.Send(req, {}).ok());
  ASSERT_TRUE(status.WaitReadable(5000));
  auto reply = status.Receive();
  ASSERT_TRUE(reply && reply->status.ok());
  EXPECT_TRUE(reply->message.header.has_status_reply());
  std::vector<float> init(256, 0.25f);
  wire::Header ih;
  auto* d = ih.mutable_init_request()->add_chunks();
  d->set_chunk_id(0);
  d->set_codec(wire::FP32);
  d->set_num_elems(256);
  ASSERT_TRUE(socket_->Send(ih, {transport::CopyPayload(init.data(), 1024)}).ok());
  EXPECT_TRUE(Await().has_init_ack());
  EXPECT_EQ(PullChunk0(), init);
}

TEST_F(BadInputTest, MessageForAnotherJobIsRefused) {
  transport::Socket other(ctx_, zmq::socket_type::dealer,
                          transport::SocketOptions{.job = "someone-else", .role = wire::WORKER, .id = 0}, &counters_);
  ASSERT_TRUE(other.Connect(assignment_.servers(0).endpoint()).ok());
  wire::Header h;
  h.mutable_pull_request()->add_chunk_ids(0);
  ASSERT_TRUE(other.Send(h, {}).ok());
  for (int i = 0; i < 500; ++i) {
    if (auto in = other.Receive()) {
      // The reply is stamped with the server's job, which our socket refuses in turn.
      EXPECT_FALSE(in->status.ok());
      return;
    }
    other.WaitReadable(10);
  }
  ADD_FAILURE() << "no reply to a message for another job";
}

// Issue 14: on a plaintext job a pull as worker -7 or 2^31-1 was answered
// with parameters, and a heartbeat at clock 2^40 was believed. Both are
// refused by reason and counted; the job is unaffected.
TEST_F(BadInputTest, NonMembersAndWildClocksAreRefusedOnAPlaintextJob) {
  InitAll();
  if (HasFatalFailure()) return;
  for (int id : {-7, 2147483647}) {
    transport::Socket as(ctx_, zmq::socket_type::dealer,
                         transport::SocketOptions{.job = "badinput", .role = wire::WORKER, .id = id}, &counters_);
    ASSERT_TRUE(as.Connect(assignment_.servers(0).endpoint()).ok());
    wire::Header h;
    h.mutable_pull_request()->set_clock(0);
    ASSERT_TRUE(as.Send(h, {}).ok());
    std::optional<transport::Incoming> in;
    for (int i = 0; i < 500 && !in; ++i)
      if (!(in = as.Receive())) as.WaitReadable(10);
    ASSERT_TRUE(in && in->status.ok()) << "no reply to a pull as worker " << id;
    ASSERT_TRUE(in->message.header.has_error_reply()) << transport::BodyName(in->message.header);
    EXPECT_EQ(in->message.header.error_reply().reason(), wire::REFUSAL_BAD_SENDER);
    EXPECT_TRUE(in->message.frames.empty());
  }
  // The coordinator: a heartbeat of worker 0 (a member) at clock 2^40.
  transport::Socket coord(ctx_, zmq::socket_type::dealer,
                          transport::SocketOptions{.job = "badinput", .role = wire::WORKER, .id = 0}, &counters_);
  ASSERT_TRUE(coord.Connect(endpoint_).ok());
  auto ask = [&](const wire::Header& h) {
    EXPECT_TRUE(coord.Send(h, {}).ok());
    for (int i = 0; i < 500; ++i) {
      if (auto in = coord.Receive()) return in->message.header;
      coord.WaitReadable(10);
    }
    ADD_FAILURE() << "the coordinator did not answer";
    return wire::Header{};
  };
  wire::Header hb;
  hb.mutable_heartbeat()->set_clock(int64_t{1} << 40);
  wire::Header r = ask(hb);
  ASSERT_TRUE(r.has_error_reply()) << transport::BodyName(r);
  EXPECT_EQ(r.error_reply().reason(), wire::REFUSAL_BAD_CLOCK);
  wire::Header status;
  status.mutable_status_request();
  r = ask(status);
  ASSERT_EQ(r.status_reply().workers_size(), 1);
  EXPECT_LT(r.status_reply().workers(0).clock(), int64_t{1} << 40);
  EXPECT_TRUE(r.status_reply().workers(0).live());
  // The shard serves members, and counted both refusals.
  EXPECT_EQ(PullChunk0(), std::vector<float>(256, 0.5f));
  // Both write their stats every 2 s.
  auto refused = [](const nlohmann::json& stats, const char* reason) {
    if (!stats.is_object() || !stats.contains("refused_by_reason")) return 0;
    return stats["refused_by_reason"].value(reason, 0);
  };
  nlohmann::json shard, coordinator;
  for (int i = 0; i < 50 && (refused(shard, "bad_sender") < 2 || refused(coordinator, "bad_clock") < 1); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    shard = testing::ReadJson(dir_ / "server.json");
    coordinator = testing::ReadJson(dir_ / "coordinator.json");
  }
  EXPECT_EQ(refused(shard, "bad_sender"), 2) << shard.dump();
  EXPECT_EQ(refused(coordinator, "bad_clock"), 1) << coordinator.dump();
}

}  // namespace
}  // namespace geodesic
