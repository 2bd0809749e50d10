// A real coordinator and shard of a job with `security.mode: curve`, with
// this test as worker 0 (a proper member: fresh keypair, valid token), as
// intruders (a wrong CURVE key, forged and expired tokens, plaintext), and
// as an eavesdropper on a worker -> shard connection. Intruders get nothing
// and change nothing; the captured bytes hold no plaintext gradient. The
// same capture of a plaintext job is the positive control.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <zmq.hpp>

#include "cluster/member_client.h"
#include "common/clock.h"
#include "tests/integration/harness.h"
#include "transport/message.h"
#include "transport/security.h"

namespace geodesic {
namespace {

using testing::Process;
using testing::TempDir;

// Forwards one TCP connection to `target_port` and records the bytes the
// client sends. Loopback only.
class RecordingRelay {
 public:
  explicit RecordingRelay(int target_port) : target_port_(target_port) {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(listen_, 4), 0);
    socklen_t len = sizeof(a);
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~RecordingRelay() {
    ::shutdown(listen_, SHUT_RDWR);
    ::close(listen_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    thread_.join();
    for (auto& t : pumps_) t.join();
    for (int fd : fds_) ::close(fd);
  }
  std::string endpoint() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
  std::string captured() const {
    std::lock_guard<std::mutex> lock(mu_);
    return captured_;
  }

 private:
  void Run() {
    int client = ::accept(listen_, nullptr, nullptr);
    if (client < 0) return;
    int server = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(target_port_);
    if (::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(client);
      ::close(server);
      return;
    }
    fds_ = {client, server};
    pumps_.emplace_back([this, client, server] { Pump(client, server, true); });
    pumps_.emplace_back([this, client, server] { Pump(server, client, false); });
  }
  void Pump(int from, int to, bool record) {
    char buf[65536];
    while (true) {
      ssize_t n = ::read(from, buf, sizeof(buf));
      if (n <= 0) break;
      if (record) {
        std::lock_guard<std::mutex> lock(mu_);
        captured_.append(buf, n);
      }
      if (::write(to, buf, n) != n) break;
    }
    ::shutdown(to, SHUT_WR);
  }

  int target_port_, port_ = 0, listen_ = -1;
  std::vector<int> fds_;
  std::thread thread_;
  std::vector<std::thread> pumps_;
  mutable std::mutex mu_;
  std::string captured_;
};

std::string JobYaml(bool secure, const std::string& secret_file) {
  return std::string(R"(
name: secjob
regions:
  local: {servers: 1, workers: 1}
model: {name: synthetic, synthetic_params: 1000}
wire: {chunk_bytes: 1024}
membership: {heartbeat_ms: 100, lease_ms: 60000, rpc_timeout_s: 10}
)") + (secure ? "security: {mode: curve, secret_file: " + secret_file + "}\n" : "");
}

class SecurityTest : public ::testing::TestWithParam<bool> {
 protected:
  bool secure() const { return GetParam(); }

  void SetUp() override {
    secret_file_ = dir_ / "secret";
    ASSERT_TRUE(transport::CreateSecretFile(secret_file_).ok());
    secret_ = transport::LoadSecret(secret_file_).value();
    testing::WriteText(dir_ / "job.yaml", JobYaml(secure(), secret_file_));
    std::vector<std::string> cargs = {"coordinator",     "--job",        dir_ / "job.yaml",
                                      "--endpoint-file", dir_ / "coord", "--no-evaluator"};
    if (secure()) cargs.insert(cargs.end(), {"--key-file", dir_ / "coord.key"});
    coordinator_ = std::make_unique<Process>(cargs, dir_ / "coordinator.log");
    ASSERT_TRUE(testing::WaitForFile(dir_ / "coord", 20)) << testing::ReadText(dir_ / "coordinator.log");
    endpoint_ = testing::ReadText(dir_ / "coord");
    std::vector<std::string> sargs = {"server",  "--job",        dir_ / "job.yaml",   "--id", "0", "--coordinator",
                                      endpoint_, "--stats-file", dir_ / "server.json"};
    if (secure()) {
      coordinator_key_ = testing::ReadText(dir_ / "coord.key");
      testing::WriteText(dir_ / "server.token", Token("server", 0, transport::UnixNow() + 600));
      sargs.insert(sargs.end(), {"--coordinator-key-file", dir_ / "coord.key", "--token-file", dir_ / "server.token"});
    }
    server_ = std::make_unique<Process>(sargs, dir_ / "server.log");

    keys_ = transport::GenerateCurveKeyPair().value();
    cluster::MemberOptions mo = testing::TestWorker("secjob", endpoint_, 1000);
    if (secure()) {
      mo.curve = {.keys = keys_, .server_key = coordinator_key_};
      mo.token = Token("worker", 0, transport::UnixNow() + 600);
    }
    member_ = std::make_unique<cluster::MemberClient>(ctx_, mo, &counters_, RealClock::Get());
    auto joined = member_->Join(&stop_);
    ASSERT_TRUE(joined.ok()) << joined.status() << "\n" << testing::ReadText(dir_ / "server.log");
    assignment_ = *joined;
    member_->Start(nullptr);
    ASSERT_EQ(assignment_.servers_size(), 1);
    server_endpoint_ = assignment_.servers(0).endpoint();
    if (secure()) {
      ASSERT_TRUE(transport::IsCurveKey(assignment_.servers(0).curve_public_key()));
    }
    worker_ = Dealer(server_endpoint_, wire::WORKER, 0, MyCurve(assignment_.servers(0).curve_public_key()));
  }

  void TearDown() override {
    member_.reset();
    if (server_) server_->Signal(SIGTERM);
    if (coordinator_) coordinator_->Signal(SIGTERM);
    if (server_) {
      EXPECT_EQ(server_->Wait(10), 0) << testing::ReadText(dir_ / "server.log");
    }
    if (coordinator_) {
      EXPECT_EQ(coordinator_->Wait(10), 0);
    }
  }

  std::string Token(const std::string& role, int id, int64_t expiry) {
    return transport::MintToken(secret_, {.job = "secjob", .role = role, .id = id, .expiry_unix = expiry}).value();
  }
  transport::CurveSocket MyCurve(const std::string& server_key) {
    if (!secure()) return {};
    return {.keys = keys_, .server_key = server_key};
  }
  std::unique_ptr<transport::Socket> Dealer(const std::string& endpoint, wire::Role role, int id,
                                            transport::CurveSocket curve) {
    auto s = std::make_unique<transport::Socket>(
        ctx_, zmq::socket_type::dealer,
        transport::SocketOptions{.job = "secjob", .role = role, .id = id, .curve = curve}, &counters_);
    EXPECT_TRUE(s->Connect(endpoint).ok());
    return s;
  }
  // Sends and waits up to `ms` for the first reply.
  static std::optional<wire::Header> Ask(transport::Socket& s, const wire::Header& h,
                                         const std::vector<transport::Payload>& payloads = {}, int ms = 5000) {
    EXPECT_TRUE(s.Send(h, payloads).ok());
    for (int waited = 0; waited < ms; waited += 10) {
      if (auto in = s.Receive()) {
        EXPECT_TRUE(in->status.ok()) << in->status;
        return in->message.header;
      }
      s.WaitReadable(10);
    }
    return std::nullopt;
  }
  // Gives the shard its initial values (0.5 everywhere) as the proper worker.
  void InitShard() {
    std::vector<float> init(1000, 0.5f);
    std::vector<transport::Payload> payloads;
    wire::Header h;
    for (uint32_t c = 0; c < 4; ++c) {
      auto* d = h.mutable_init_request()->add_chunks();
      d->set_chunk_id(c);
      d->set_codec(wire::FP32);
      d->set_num_elems(c < 3 ? 256 : 232);
      payloads.push_back(transport::CopyPayload(init.data() + 256 * c, d->num_elems() * 4));
    }
    auto ack = Ask(*worker_, h, payloads);
    ASSERT_TRUE(ack && ack->has_init_ack());
  }
  static wire::Header Push(int64_t clock) {
    wire::Header h;
    auto* d = h.mutable_push_request()->add_chunks();
    h.mutable_push_request()->set_clock(clock);
    d->set_chunk_id(0);
    d->set_codec(wire::FP32);
    d->set_num_elems(256);
    return h;
  }
  // Chunk 0's values and version, as the proper worker reads them.
  std::pair<std::vector<float>, uint64_t> ReadChunk0() {
    wire::Header h;
    h.mutable_pull_request()->set_clock(0);
    h.mutable_pull_request()->add_chunk_ids(0);
    h.mutable_pull_request()->set_full(true);
    EXPECT_TRUE(worker_->Send(h, {}).ok());
    for (int i = 0; i < 500; ++i) {
      if (auto in = worker_->Receive()) {
        const auto& m = in->message;
        if (!m.header.has_pull_reply() || m.frames.empty()) return {};
        const float* v = static_cast<const float*>(m.frames[0].data());
        return {std::vector<float>(v, v + m.frames[0].size() / 4), m.header.pull_reply().chunks(0).version()};
      }
      worker_->WaitReadable(10);
    }
    ADD_FAILURE() << "pull not answered";
    return {};
  }
  wire::StatusReply Status() {
    auto s = Dealer(endpoint_, wire::CLIENT, 0, MyCurve(coordinator_key_));
    wire::Header h;
    if (secure()) h.mutable_status_request()->set_token(Token("client", -1, transport::UnixNow() + 60));
    h.mutable_status_request();
    auto r = Ask(*s, h);
    EXPECT_TRUE(r && r->has_status_reply());
    return r ? r->status_reply() : wire::StatusReply{};
  }

  TempDir dir_;
  zmq::context_t ctx_{1};
  transport::TrafficCounters counters_;
  std::atomic<bool> stop_{false};
  std::string secret_file_, secret_, endpoint_, coordinator_key_, server_endpoint_;
  transport::CurveKeyPair keys_;
  std::unique_ptr<Process> coordinator_, server_;
  std::unique_ptr<cluster::MemberClient> member_;
  wire::RegisterReply assignment_;
  std::unique_ptr<transport::Socket> worker_;
};

// The pattern "GDSC" as float32 (about 211.3): finite, and easy to find.
std::vector<float> Pattern() {
  std::vector<float> g(256);
  for (auto& v : g) std::memcpy(&v, "GDSC", 4);
  return g;
}

TEST_P(SecurityTest, CapturedTrafficHasPlaintextGradientsOnlyWithoutSecurity) {
  ASSERT_NO_FATAL_FAILURE(InitShard());

  RecordingRelay relay(std::stoi(server_endpoint_.substr(server_endpoint_.rfind(':') + 1)));
  auto tapped = Dealer(relay.endpoint(), wire::WORKER, 0, MyCurve(assignment_.servers(0).curve_public_key()));
  std::vector<float> g = Pattern();
  auto reply = Ask(*tapped, Push(0), {transport::CopyPayload(g.data(), g.size() * 4)});
  ASSERT_TRUE(reply && reply->has_push_ack()) << (reply ? transport::BodyName(*reply) : "no reply");
  std::string captured = relay.captured();
  EXPECT_GT(captured.size(), 1024u);
  const std::string needle(reinterpret_cast<const char*>(g.data()), 64);
  EXPECT_EQ(captured.find(needle) != std::string::npos, !secure()) << captured.size() << " bytes captured";
  // The job name is in every header: it too is visible only in plaintext.
  EXPECT_EQ(captured.find("secjob") != std::string::npos, !secure());
}

INSTANTIATE_TEST_SUITE_P(PlainAndCurve, SecurityTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Curve" : "Plain"; });

class SecuredJobTest : public SecurityTest {};

TEST_P(SecuredJobTest, IntrudersGetNothingAndChangeNothing) {
  ASSERT_NO_FATAL_FAILURE(InitShard());
  auto [before, version_before] = ReadChunk0();
  ASSERT_EQ(before.size(), 256u);
  wire::StatusReply status_before = Status();
  ASSERT_EQ(status_before.workers_size(), 1);
  ASSERT_TRUE(status_before.workers(0).live());

  const std::string shard_key = assignment_.servers(0).curve_public_key();
  std::vector<float> g = Pattern();
  // 1. A wrong CURVE key (valid, but not authorized) at the shard: the
  //    handshake is refused, nothing arrives, no reply.
  transport::CurveKeyPair stranger = transport::GenerateCurveKeyPair().value();
  auto wrong = Dealer(server_endpoint_, wire::WORKER, 0, {.keys = stranger, .server_key = shard_key});
  EXPECT_FALSE(Ask(*wrong, Push(0), {transport::CopyPayload(g.data(), 1024)}, 1500));
  // 2. Plaintext peers: no reply from the shard or the coordinator.
  auto plain_shard = Dealer(server_endpoint_, wire::WORKER, 0, {});
  EXPECT_FALSE(Ask(*plain_shard, Push(0), {transport::CopyPayload(g.data(), 1024)}, 1500));
  auto plain_coord = Dealer(endpoint_, wire::CLIENT, 0, {});
  wire::Header st;
  st.mutable_status_request();
  EXPECT_FALSE(Ask(*plain_coord, st, {}, 1500));
  // 3. A client that trusts the wrong coordinator key: no reply.
  auto fake_server_key = Dealer(endpoint_, wire::CLIENT, 0, {.keys = stranger, .server_key = stranger.public_key});
  EXPECT_FALSE(Ask(*fake_server_key, st, {}, 1500));

  // 4. At the coordinator (which admits any CURVE client; tokens decide):
  //    forged, expired, misdirected and missing tokens; a member's requests
  //    with another key; a status request without a token.
  auto intruder = Dealer(endpoint_, wire::WORKER, 0, {.keys = stranger, .server_key = coordinator_key_});
  auto expect_error = [&](wire::Header h, wire::ErrorCode code, const std::string& needle) {
    auto r = Ask(*intruder, h);
    ASSERT_TRUE(r.has_value()) << needle;
    ASSERT_TRUE(r->has_error_reply()) << transport::BodyName(*r) << " instead of a refusal for " << needle;
    EXPECT_EQ(r->error_reply().code(), code) << r->error_reply().message();
    EXPECT_NE(r->error_reply().message().find(needle), std::string::npos) << r->error_reply().message();
  };
  auto reg = [&](const std::string& token) {
    wire::Header h;
    auto* r = h.mutable_register_request();
    r->mutable_model()->set_name("synthetic");
    r->mutable_model()->set_num_params(1000);
    r->mutable_model()->set_layout_digest(1);
    r->set_token(token);
    return h;
  };
  std::string valid = Token("worker", 0, transport::UnixNow() + 600);
  std::string forged = valid;
  forged.back() = forged.back() == 'a' ? 'b' : 'a';
  expect_error(reg(forged), wire::UNAUTHENTICATED, "signature does not match");
  expect_error(reg(Token("worker", 0, transport::UnixNow() - 5)), wire::UNAUTHENTICATED, "expired");
  expect_error(reg(Token("server", 0, transport::UnixNow() + 600)), wire::UNAUTHENTICATED, "for role server");
  expect_error(reg(""), wire::UNAUTHENTICATED, "no join token");
  std::string other_secret(64, 'q');
  expect_error(
      reg(transport::MintToken(other_secret,
                               {.job = "secjob", .role = "worker", .id = 0, .expiry_unix = transport::UnixNow() + 600})
              .value()),
      wire::UNAUTHENTICATED, "signature does not match");
  wire::Header hb;
  hb.mutable_heartbeat()->set_clock(1000);
  hb.mutable_heartbeat()->set_done(true);
  expect_error(hb, wire::PERMISSION_DENIED, "another CURVE key");
  expect_error(st, wire::UNAUTHENTICATED, "no join token");

  // 5. A replication op, from an authorized key (worker 0's) claiming to
  //    be the shard's primary: shards take replication from their
  //    primary's key only (a backup learns it from the coordinator).
  {
    auto as_primary = Dealer(server_endpoint_, wire::SERVER, 0, {.keys = keys_, .server_key = shard_key});
    wire::Header op;
    op.mutable_replicate_request()->set_seq(1);
    op.mutable_replicate_request()->set_worker(0);
    *op.mutable_replicate_request()->mutable_push() = Push(0).push_request();
    auto r = Ask(*as_primary, op, {transport::CopyPayload(g.data(), 1024)});
    ASSERT_TRUE(r && r->has_error_reply()) << (r ? transport::BodyName(*r) : "no reply");
    EXPECT_EQ(r->error_reply().code(), wire::PERMISSION_DENIED) << r->error_reply().message();
    EXPECT_NE(r->error_reply().message().find("primary's CURVE key"), std::string::npos) << r->error_reply().message();
  }

  // Nothing changed: the shard's chunk and version, and the membership.
  auto [after, version_after] = ReadChunk0();
  EXPECT_EQ(after, before);
  EXPECT_EQ(version_after, version_before);
  wire::StatusReply status_after = Status();
  ASSERT_EQ(status_after.workers_size(), 1);
  EXPECT_TRUE(status_after.workers(0).live());
  EXPECT_FALSE(status_after.workers(0).done());
  EXPECT_EQ(status_after.workers(0).clock(), status_before.workers(0).clock());
  auto stats = testing::ReadText(dir_ / "coordinator.log");
  EXPECT_NE(stats.find("refused register_request"), std::string::npos);

  // And the proper worker is still served.
  auto reply = Ask(*worker_, Push(0), {transport::CopyPayload(g.data(), 1024)});
  ASSERT_TRUE(reply && reply->has_push_ack());
}

INSTANTIATE_TEST_SUITE_P(Curve, SecuredJobTest, ::testing::Values(true));

const char* kSecureLaunchJob = R"(
name: securelaunch
regions:
  a: {servers: 1, workers: 1}
  b: {servers: 1, workers: 1}
model: {name: synthetic, synthetic_params: 100000}
training: {steps: 30, staleness_bound: 1}
wire: {chunk_bytes: 65536}
membership: {heartbeat_ms: 100, lease_ms: 2000}
wan:
  emulation: proxy
  probe: false
  links:
    - {regions: [a, b], rtt_ms: 10, bandwidth_mbit: 200}
security: {mode: curve, token_ttl_s: 600}
)";

// A whole secured job through `geodesic launch`, across an emulated link
// (the user-space proxy forwards CurveZMQ bytes like any others): it
// finishes; the secret and tokens are 0600 files, and no token is logged.
TEST(SecureLaunchTest, SyntheticJobOverEmulatedLinksFinishes) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kSecureLaunchJob);
  auto r = testing::RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--quiet"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output << testing::ReadText(dir / "run/logs/worker-0.log")
                            << testing::ReadText(dir / "run/logs/coordinator.log");
  EXPECT_NE(r.output.find("all processes joined; training"), std::string::npos) << r.output;
  auto summary = testing::ReadJson(dir / "run/summary.json");
  EXPECT_EQ(summary["status"], "finished") << summary.dump(2);
  struct stat st {};
  ASSERT_EQ(::stat((dir / "run/secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  for (const char* name : {"server-0", "server-1", "worker-0", "worker-1", "evaluator"}) {
    std::string file = dir / ("run/tokens/" + std::string(name) + ".token");
    ASSERT_EQ(::stat(file.c_str(), &st), 0) << file;
    EXPECT_EQ(st.st_mode & 0777, 0600) << file;
  }
  std::string coordinator_log = testing::ReadText(dir / "run/logs/coordinator.log");
  EXPECT_EQ(coordinator_log.find("gdt1."), std::string::npos);
  EXPECT_EQ(coordinator_log.find("refused"), std::string::npos) << coordinator_log;
  EXPECT_NE(testing::ReadText(dir / "run/logs/server-0.log").find("(CurveZMQ)"), std::string::npos);

  // `geodesic token` mints what the coordinator accepts, for this job only.
  auto t = testing::RunGeodesic({"token", "--job", dir / "run/job.yaml", "--role", "worker", "--id", "1", "--ttl", "60",
                                 "--secret-file", dir / "run/secret"},
                                20);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  std::string token = t.output.substr(0, t.output.find('\n'));
  std::string secret = transport::LoadSecret(dir / "run/secret").value();
  EXPECT_TRUE(transport::VerifyToken(secret, token, "securelaunch", "worker", 1, transport::UnixNow()).ok()) << token;
  EXPECT_FALSE(transport::VerifyToken(secret, token, "securelaunch", "worker", 0, transport::UnixNow()).ok());
  EXPECT_FALSE(transport::VerifyToken(secret, token, "securelaunch", "worker", 1, transport::UnixNow() + 61).ok());
  // Without a secret, or for a plaintext job: a clear error.
  auto no_secret = testing::RunGeodesic({"token", "--job", dir / "job.yaml", "--role", "worker"}, 20);
  EXPECT_NE(no_secret.exit_code, 0);
  EXPECT_NE(no_secret.output.find("--secret-file"), std::string::npos) << no_secret.output;
}

// A secured job's coordinator killed with SIGKILL restarts from its saved
// state with the keypair its members know (coordinator.keypair, 0600) and
// the keys they registered with; a worker killed after that rejoins through
// the restarted coordinator (a fresh key, a token check, the shards told to
// admit the new key) and the job finishes.
TEST(SecureLaunchTest, AKilledCoordinatorRestartsWithItsKeysAndAdmitsARejoin) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kSecureLaunchJob);
  auto r = testing::RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--set", "training.steps=600",
                                 "--kill", "coordinator:0@1.5", "--kill", "worker:1@5", "--restart-workers", "--quiet"},
                                180);
  ASSERT_EQ(r.exit_code, 0) << r.output << testing::ReadText(dir / "run/logs/coordinator.log");
  auto s = testing::ReadJson(dir / "run/summary.json");
  EXPECT_EQ(s["status"], "finished") << s.dump(2);
  ASSERT_EQ(s["recoveries"].size(), 2u) << s["recoveries"].dump(2);
  std::map<std::string, nlohmann::json> rec;
  for (const auto& x : s["recoveries"]) rec[x["target"].get<std::string>()] = x;
  ASSERT_TRUE(rec.count("coordinator") && rec.count("worker-1")) << s["recoveries"].dump(2);
  EXPECT_TRUE(rec["coordinator"].contains("seconds_to_first_status")) << rec["coordinator"].dump();
  EXPECT_TRUE(rec["worker-1"].contains("seconds_to_first_step")) << rec["worker-1"].dump();
  const std::string restarted = testing::ReadText(rec["coordinator"]["log"].get<std::string>());
  EXPECT_NE(restarted.find("continuing the job from"), std::string::npos) << restarted;
  // Members' keys held: nobody was refused for a key or a token (the
  // rejoining worker is told to wait while its dead predecessor's lease
  // runs out, AlreadyExists, which is not that).
  EXPECT_EQ(restarted.find("PermissionDenied"), std::string::npos) << restarted;
  EXPECT_EQ(restarted.find("Unauthenticated"), std::string::npos) << restarted;
  // The rejoined worker trained, through shards that admitted its new key.
  EXPECT_NE(testing::ReadText(rec["worker-1"]["log"].get<std::string>()).find("done:"), std::string::npos);
  EXPECT_GT(s["step_time_breakdown"]["worker-1"]["steps"].get<int64_t>(), 0);
  // One keypair throughout: the published key is the kept pair's.
  struct stat st {};
  ASSERT_EQ(::stat((dir / "run/coordinator.keypair").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  auto kept = transport::LoadOrCreateKeyPair(dir / "run/coordinator.keypair");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(testing::ReadText(dir / "run/coordinator.key"), kept->public_key);
}

// Replication in a secured job: each backup joins with its shard's token,
// admits replication ops from its primary's key only, and every process
// that may serve the shard (the backups too) admits the workers' keys
// before they start. A SIGKILLed primary fails over to its backup, the
// workers reconnect to it with its key, and nothing acknowledged is lost.
TEST(SecureLaunchTest, AReplicatedSecuredJobFailsOverAndLosesNothing) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kSecureLaunchJob);
  auto r = testing::RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--set", "training.steps=600",
                                 "--set", "replication.backups=1", "--kill", "server:0@2", "--quiet"},
                                180);
  ASSERT_EQ(r.exit_code, 0) << r.output << testing::ReadText(dir / "run/logs/backup-0.log");
  auto s = testing::ReadJson(dir / "run/summary.json");
  EXPECT_EQ(s["status"], "finished") << s.dump(2);
  ASSERT_EQ(s["recoveries"].size(), 1u) << s["recoveries"].dump(2);
  EXPECT_EQ(s["recoveries"][0]["target"], "server-0");
  EXPECT_EQ(s["recoveries"][0]["failover"], true);
  EXPECT_EQ(s["replication"]["promoted"], nlohmann::json::array({0})) << s["replication"].dump();
  testing::ExpectEveryPushAccountedFor(s, {});
  for (const char* name : {"backup-0", "backup-1"}) {
    const std::string log = testing::ReadText(dir / ("run/logs/" + std::string(name) + ".log"));
    EXPECT_NE(log.find("(CurveZMQ)"), std::string::npos) << name << ":\n" << log;
    EXPECT_EQ(log.find("refused"), std::string::npos) << name << ":\n" << log;
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "run/tokens/backup-0.token"));
}

}  // namespace
}  // namespace geodesic
