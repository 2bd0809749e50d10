// Real federated clients end to end: a secured `geodesic launch` of a job
// with federated.gateway, and tens of `geodesic client` processes joining
// and leaving at random while it trains, each with its own `client` token;
// clients that send updates no push could carry or never answer; hostile
// peers that flood a gateway with refused hellos and oversized messages;
// and `geodesic token`'s id-bound client tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <regex>
#include <thread>

#include "tests/integration/harness.h"
#include "transport/http_endpoint.h"
#include "transport/message.h"
#include "transport/security.h"

namespace geodesic {
namespace {

using testing::Process;
using testing::TempDir;

// 40 clients with label skew over 2 executors; real clients may train any
// of them. CurveZMQ, tokens minted by the launcher's secret.
const char* kGatewayJob = R"(
name: fed
seed: 5
regions:
  a: {servers: 1, workers: 1}
  b: {servers: 1, workers: 1}
model: {name: mlp, mlp_hidden: [64]}
data: {partition: "dirichlet:0.5", batch_size: 32}
training: {staleness_bound: 0}
federated: {clients: 40, per_round: 12, rounds: 24, local_epochs: 1, local_lr: 0.05, gateway: true,
            gateway_timeout_s: 2, max_update_norm: 50}
eval: {test_samples: 2000}
membership: {heartbeat_ms: 100, lease_ms: 2000}
security: {mode: curve}
)";

// Stops the launch (SIGINT: it stops its children) if the test leaves early.
struct StopOnExit {
  Process& p;
  ~StopOnExit() {
    p.Signal(SIGINT);
    p.Wait(60);
  }
};

class RealClientsTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::WriteText(dir_ / "job.yaml", kGatewayJob); }

  // Starts the launch in the background and waits for its coordinator.
  // `secured`: false adds security.mode=none (a plaintext launch).
  std::unique_ptr<Process> Launch(const std::string& run, std::vector<std::string> extra = {}, bool secured = true) {
    std::vector<std::string> args = {"launch", dir_ / "job.yaml", "--run-dir", dir_ / run, "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    if (!secured) args.insert(args.end(), {"--set", "security.mode=none"});
    auto p = std::make_unique<Process>(args, dir_ / (run + "-launch.log"));
    EXPECT_TRUE(testing::WaitForFile(dir_ / (run + "/coordinator.endpoint"), 60))
        << testing::ReadText(dir_ / (run + "-launch.log"));
    endpoint_ = testing::ReadText(dir_ / (run + "/coordinator.endpoint"));
    secret_.clear();
    if (secured) {
      EXPECT_TRUE(testing::WaitForFile(dir_ / (run + "/coordinator.key"), 10));
      secret_ = transport::LoadSecret(dir_ / (run + "/secret")).value();
    }
    run_ = run;
    return p;
  }

  // A `geodesic client` for `id` with a token for `token_id` (-1: any),
  // minted with `secret` (empty: the job's).
  std::unique_ptr<Process> Client(int id, std::vector<std::string> extra, int token_id, std::string secret = "") {
    if (secret_.empty()) return PlainClient(id, std::move(extra));
    const std::string name = "client-" + std::to_string(id) + "-" + std::to_string(spawned_++);
    auto token = transport::MintToken(
        secret.empty() ? secret_ : secret,
        {.job = "fed", .role = "client", .id = token_id, .expiry_unix = transport::UnixNow() + 600});
    EXPECT_TRUE(token.ok()) << token.status();
    testing::WriteText(dir_ / (name + ".token"), token.ok() ? *token : "");
    std::vector<std::string> args = {"client",
                                     "--job",
                                     dir_ / "job.yaml",
                                     "--id",
                                     std::to_string(id),
                                     "--coordinator",
                                     endpoint_,
                                     "--coordinator-key-file",
                                     dir_ / (run_ + "/coordinator.key"),
                                     "--token-file",
                                     dir_ / (name + ".token"),
                                     "--join-timeout",
                                     "60"};
    args.insert(args.end(), extra.begin(), extra.end());
    logs_.push_back(dir_ / (name + ".log"));
    return std::make_unique<Process>(args, logs_.back());
  }

  // A `geodesic client` of a plaintext launch (no token).
  std::unique_ptr<Process> PlainClient(int id, std::vector<std::string> extra) {
    const std::string name = "client-" + std::to_string(id) + "-" + std::to_string(spawned_++);
    std::vector<std::string> args = {"client",        "--job",   dir_ / "job.yaml", "--id", std::to_string(id),
                                     "--coordinator", endpoint_, "--join-timeout",  "60"};
    args.insert(args.end(), extra.begin(), extra.end());
    logs_.push_back(dir_ / (name + ".log"));
    return std::make_unique<Process>(args, logs_.back());
  }

  // Waits (bounded) until client log `i` says it found its gateway.
  void WaitJoined(size_t i) {
    for (int t = 0; t < 300 && testing::ReadText(logs_[i]).find("gateway at") == std::string::npos; ++t)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  TempDir dir_;
  std::string endpoint_, secret_, run_;
  std::vector<std::string> logs_;
  int spawned_ = 0;
};

// Twenty real clients join at random times and leave after a random
// number of rounds. Each trains exactly what the executor would have, so
// the job ends with the same model, bit for bit, as the run without them.
TEST_F(RealClientsTest, TensJoinAndLeaveAtRandomAndTrainAsTheExecutorWould) {
  // A loaded machine may be slow to answer; no update may be missed here.
  const std::vector<std::string> patient = {"--set", "federated.gateway_timeout_s=60"};
  auto launch = Launch("real", patient);
  StopOnExit stop{*launch};
  std::mt19937 rng(11);
  std::vector<std::unique_ptr<Process>> clients;
  for (int id = 0; id < 20; ++id) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 250)(rng)));
    const int tasks = std::uniform_int_distribution<int>(1, 3)(rng);
    clients.push_back(Client(id, {"--max-tasks", std::to_string(tasks)}, id));
  }
  ASSERT_EQ(launch->Wait(150), 0) << testing::ReadText(dir_ / (run_ + "-launch.log"));
  int exited = 0;
  for (auto& c : clients) exited += c->Wait(30) == 0;
  EXPECT_EQ(exited, 20) << testing::ReadText(logs_.front());
  auto s = testing::ReadJson(dir_ / "real/summary.json");
  std::printf("real client updates: %s of %s\n", s["federated"]["real_client_updates"].dump().c_str(),
              s["federated"]["clients_trained"].dump().c_str());
  EXPECT_GE(s["federated"]["real_client_updates"].get<int64_t>(), 20);
  EXPECT_EQ(s["federated"]["client_updates_refused"], 0);
  EXPECT_EQ(s["federated"]["clients_dropped"], 0);
  EXPECT_EQ(s["federated"]["clients_trained"], 288);  // 24 rounds x 12 clients, real or virtual
  // The same job with no real client.
  std::vector<std::string> args = {"launch", dir_ / "job.yaml", "--run-dir", dir_ / "alone", "--quiet"};
  args.insert(args.end(), patient.begin(), patient.end());
  auto alone = testing::RunGeodesic(args, 150);
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  EXPECT_EQ(testing::ReadText(dir_ / "real/final_params.bin"), testing::ReadText(dir_ / "alone/final_params.bin"));
}

// A process's peak resident memory so far (VmHWM).
long PeakRssKiB(pid_t pid) {
  const std::string status = testing::ReadText("/proc/" + std::to_string(pid) + "/status");
  const auto at = status.find("VmHWM:");
  return at == std::string::npos ? -1 : std::stol(status.substr(at + 6));
}

// The sum of "N refused" over the clients' exit lines.
int64_t RefusedInLogs(const std::vector<std::string>& logs) {
  int64_t refused = 0;
  const std::regex line(R"((\d+) update\(s\) sent, (\d+) refused)");
  for (const auto& log : logs) {
    std::smatch m;
    const std::string text = testing::ReadText(log);
    if (std::regex_search(text, m, line)) refused += std::stoll(m[2]);
  }
  return refused;
}

// Broken and malicious clients (the wrong shape, NaN, an absurd norm, an
// inflated sample count) are refused and counted and hear why; a client
// killed mid-job is not waited for, a hung one no longer than the
// gateway's timeout;
// forged tokens and ids another's token names get nowhere; the rounds go
// on and the model learns.
// Real clients attached at the two executors' gateways now (their stats).
int64_t AttachedClients(const std::string& run) {
  int64_t n = 0;
  for (int w = 0; w < 2; ++w) {
    auto j = testing::ReadJson(run + "/stats/worker-" + std::to_string(w) + ".json");
    if (j.is_object() && j.contains("gateway")) n += j["gateway"].value("attached", int64_t{0});
  }
  return n;
}

TEST_F(RealClientsTest, BadAndVanishingClientsAreRefusedOrDroppedAndTheRoundsGoOn) {
  auto launch = Launch("bad");
  StopOnExit stop{*launch};
  std::vector<std::unique_ptr<Process>> bad, killed;
  const std::vector<std::string> kinds = {"shape", "nan", "norm", "samples"};
  for (int i = 0; i < 4; ++i) bad.push_back(Client(i, {"--misbehave", kinds[i]}, i));
  const std::vector<std::string> bad_logs = logs_;
  for (int id : {4, 5}) killed.push_back(Client(id, {}, id));
  auto forged = Client(6, {}, 6, std::string(64, 'f'));
  auto impostor = Client(9, {}, 7);  // a token for client 7
  EXPECT_NE(forged->Wait(60), 0);
  EXPECT_NE(impostor->Wait(60), 0);
  EXPECT_NE(testing::ReadText(logs_[6]).find("refused the status request"), std::string::npos)
      << testing::ReadText(logs_[6]);
  EXPECT_NE(testing::ReadText(logs_[7]).find("token is for client 7"), std::string::npos)
      << testing::ReadText(logs_[7]);
  // Once they found their gateway: one dies (its connection closes, so the
  // gateway stops asking it at once), one hangs (the round waits for it
  // until federated.gateway_timeout_s, once).
  for (size_t i = 0; i < killed.size(); ++i) {
    for (int t = 0; t < 300 && testing::ReadText(logs_[4 + i]).find("gateway at") == std::string::npos; ++t)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Attached at their gateways (the executors' stats count them): the four
  // misbehaving clients and these two. Not asserted: the outcome below is.
  for (int t = 0; t < 300 && AttachedClients(dir_ / "bad") < 6; ++t)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  killed[0]->Signal(SIGKILL);
  killed[1]->Signal(SIGSTOP);
  ASSERT_EQ(launch->Wait(150), 0) << testing::ReadText(dir_ / (run_ + "-launch.log"));
  for (auto& b : bad) EXPECT_EQ(b->Wait(30), 0);
  auto s = testing::ReadJson(dir_ / "bad/summary.json");
  const int64_t refused = s["federated"]["client_updates_refused"].get<int64_t>();
  std::printf("refused %lld updates; %s dropped; accuracy %.4f\n", static_cast<long long>(refused),
              s["federated"]["clients_dropped"].dump().c_str(), s["test_accuracy"].get<double>());
  EXPECT_GE(refused, 4);
  EXPECT_EQ(refused, RefusedInLogs(bad_logs)) << "every refusal counted, and heard by its client";
  for (const auto& log : bad_logs) EXPECT_NE(testing::ReadText(log).find("update refused"), std::string::npos) << log;
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.6);
  EXPECT_GE(s["federated"]["clients_dropped"].get<int64_t>(), 1) << "the hung client was never asked";
  EXPECT_EQ(
      s["federated"]["clients_trained"].get<int64_t>() + refused + s["federated"]["clients_dropped"].get<int64_t>(),
      288);
  for (const auto& round : s["federated"]["rounds"])
    EXPECT_LT(round["wall_s"].get<double>(), 2 + 4.0) << "round " << round["round"] << " waited past the timeout";
}

// Rounds whose wall time reached `seconds` (rounds.csv's wall_s, in the summary).
int RoundsOver(const nlohmann::json& summary, double seconds) {
  int n = 0;
  for (const auto& round : summary["federated"]["rounds"]) n += round["wall_s"].get<double>() >= seconds;
  return n;
}

// Two real clients send updates that no push could carry, whatever
// federated.max_update_norm says (none here): every value 1e30, and every
// value -FLT_MAX. A third attaches and never answers. The huge updates are
// refused at the gateway (value_too_large), counted and heard by their
// senders; the silent client costs one gateway timeout in the whole job (it
// trains virtually whenever it is selected again); the job finishes with
// the accuracy of the same job without them.
TEST_F(RealClientsTest, HugeUpdatesAreRefusedAndASilentClientCostsOneTimeoutPerJob) {
  const std::vector<std::string> set = {"--set", "federated.rounds=30",   "--set", "federated.max_update_norm=0",
                                        "--set", "eval.test_samples=1000"};
  std::vector<std::string> alone = {"launch", dir_ / "job.yaml", "--run-dir", dir_ / "alone", "--quiet"};
  alone.insert(alone.end(), set.begin(), set.end());
  auto base = testing::RunGeodesic(alone, 120);
  ASSERT_EQ(base.exit_code, 0) << base.output;
  auto launch = Launch("attacked", set);
  StopOnExit stop{*launch};
  std::vector<std::unique_ptr<Process>> huge;
  huge.push_back(Client(0, {"--misbehave", "huge"}, 0));
  huge.push_back(Client(1, {"--misbehave", "lowest"}, 1));
  auto silent = Client(2, {"--misbehave", "silent"}, 2);
  const std::vector<std::string> huge_logs = {logs_[0], logs_[1]};
  ASSERT_EQ(launch->Wait(150), 0) << testing::ReadText(dir_ / "attacked-launch.log");
  for (auto& c : huge) EXPECT_EQ(c->Wait(30), 0);
  EXPECT_EQ(silent->Wait(30), 0) << testing::ReadText(logs_[2]);
  const auto b = testing::ReadJson(dir_ / "alone/summary.json");
  const auto s = testing::ReadJson(dir_ / "attacked/summary.json");
  const auto& g = s["federated"]["gateway"];
  std::printf("alone: %.1f s, accuracy %.4f; with the huge and silent clients: %.1f s, accuracy %.4f; gateway %s\n",
              b["wall_seconds"].get<double>(), b["test_accuracy"].get<double>(), s["wall_seconds"].get<double>(),
              s["test_accuracy"].get<double>(), g.dump().c_str());
  EXPECT_EQ(s["status"], "finished");
  EXPECT_GT(s["test_accuracy"].get<double>(), b["test_accuracy"].get<double>() - 0.03);
  // Refused at the gateway, each with its reason, and counted.
  const int64_t too_large = g["refused_by_reason"].value("value_too_large", int64_t{0});
  EXPECT_GE(too_large, 2);
  EXPECT_EQ(too_large, RefusedInLogs(huge_logs)) << "every refusal counted, and heard by its client";
  EXPECT_EQ(s["federated"]["client_updates_refused"].get<int64_t>(), too_large);
  for (const auto& log : huge_logs) EXPECT_NE(testing::ReadText(log).find(", beyond the "), std::string::npos) << log;
  // The silent client: waited for once, then asked and trained virtually.
  EXPECT_EQ(g["timeouts"], 1);
  EXPECT_EQ(s["federated"]["clients_dropped"], 1);
  EXPECT_GE(g["not_waited"].get<int64_t>(), 2) << "the silent client was not selected again after its timeout";
  EXPECT_LE(RoundsOver(s, 2.0), 1) << "rounds that waited the 2 s gateway timeout";
}

// A hand-driven peer of a client gateway: no token, any id it likes.
class GatewayPeer {
 public:
  GatewayPeer(zmq::context_t& ctx, const std::string& endpoint)
      : socket_(ctx, zmq::socket_type::dealer, transport::SocketOptions{.job = "fed", .role = wire::CLIENT, .id = 0},
                &counters_) {
    EXPECT_TRUE(socket_.Connect(endpoint).ok());
  }
  void Hello(int64_t client) {
    wire::Header h;
    h.mutable_client_hello()->set_client(client);
    EXPECT_TRUE(socket_.Send(std::move(h), {}).ok());
  }
  // Refusals answered within `seconds`, at most `enough` (a gateway reads
  // during its rounds' work); the last one's message in `last`.
  int Answers(double seconds, int enough, std::string* last) {
    int n = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end && n < enough) {
      if (!socket_.WaitReadable(50)) continue;
      while (auto in = socket_.Receive())
        if (in->status.ok() && in->message.header.has_error_reply())
          ++n, *last = in->message.header.error_reply().message();
    }
    return n;
  }

 private:
  transport::TrafficCounters counters_;
  transport::Socket socket_;
};

// `connections` raw connections to `endpoint`, each sending one update of
// `bytes`, all at once (a receiver that took them would hold them
// together), closed once the receiver has closed each (it refuses a
// message over its size limit by closing the connection) or after 10 s.
// Returns how many it closed.
int SendOversized(zmq::context_t& ctx, const std::string& endpoint, int connections, size_t bytes) {
  const std::string big(bytes, 'x');
  std::vector<zmq::socket_t> raws, monitors;
  for (int i = 0; i < connections; ++i) {
    zmq::socket_t& raw = raws.emplace_back(ctx, zmq::socket_type::dealer);
    raw.set(zmq::sockopt::linger, 2000);
    const std::string monitor = "inproc://oversized-" + std::to_string(i);
    EXPECT_EQ(zmq_socket_monitor(raw.handle(), monitor.c_str(), ZMQ_EVENT_DISCONNECTED), 0);
    monitors.emplace_back(ctx, zmq::socket_type::pair).connect(monitor);
    raw.connect(endpoint);
    wire::Header h;
    h.set_protocol(transport::kProtocolVersion);
    h.set_job("fed");
    h.set_sender_role(wire::CLIENT);
    h.set_payload_frames(1);
    h.mutable_client_update()->set_client(0);
    zmq::message_t head(h.SerializeAsString()), payload(big.data(), big.size());
    EXPECT_TRUE(raw.send(head, zmq::send_flags::sndmore));
    EXPECT_TRUE(raw.send(payload, zmq::send_flags::none));
  }
  int closed = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (auto& m : monitors) {
    m.set(zmq::sockopt::rcvtimeo, 100);
    zmq::message_t event;
    while (std::chrono::steady_clock::now() < deadline && !m.recv(event)) {
    }
    if (event.size() > 0) ++closed;
    (void)m.recv(event, zmq::recv_flags::dontwait);  // an event is two frames
  }
  for (auto& raw : raws) raw.close();
  return closed;
}

// The gateway endpoint a worker's log names ("" if none within 30 s).
std::string GatewayIn(const std::string& log) {
  const std::regex at(R"(client gateway at (tcp://\S+))");
  std::smatch m;
  std::string text;
  for (int t = 0; t < 300 && !std::regex_search(text = testing::ReadText(log), m, at); ++t)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return m.empty() ? "" : std::string(m[1]);
}

// The value of worker `http`'s gateway_refusals_total{reason} once it
// reaches `at_least`, polled for at most 30 s (the last value seen if not).
double ScrapeRefusals(const std::string& http, const std::string& reason, double at_least) {
  const std::regex series("geodesic_gateway_refusals_total\\{[^}]*reason=\"" + reason + "\"[^}]*\\} (\\d+)");
  double scraped = -1;
  for (int t = 0; t < 300 && scraped < at_least; ++t) {
    auto r = transport::HttpGet(http, "/metrics", 5);
    std::smatch v;
    if (r.ok() && std::regex_search(r->body, v, series)) scraped = std::stod(v[1]);
    if (scraped < at_least) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return scraped;
}

// A hostile peer at a plaintext executor's gateway, while the job trains
// (it is stopped after): messages larger than an update (32 MiB each) close
// their connection unread, and the executor's memory does not grow; a
// connection attached to one client id cannot claim another; 200 refused
// hellos get at most the budget's 32 answers and are counted by reason in
// /metrics, the stats file and the summary.
TEST_F(RealClientsTest, AGatewayBudgetsRefusalsCountsThemAndDropsOversizedMessages) {
  auto launch = Launch("flood", {"--set", "federated.rounds=100000"}, /*secured=*/false);
  StopOnExit stop{*launch};
  const std::string gateway = GatewayIn(dir_ / "flood/logs/worker-0.log");
  ASSERT_FALSE(gateway.empty()) << testing::ReadText(dir_ / "flood/logs/worker-0.log");
  auto worker_stats = [&] {
    auto j = testing::ReadJson(dir_ / "flood/stats/worker-0.json");
    return j.is_object() ? j : nlohmann::json::object();
  };
  // Once the executor runs its rounds (its memory settled): its peak stays.
  for (int t = 0; t < 600 && worker_stats().value("rounds", nlohmann::json::array()).size() < 2; ++t)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(testing::WaitForFile(dir_ / "flood/pids.json", 30));
  const pid_t pid = testing::ReadJson(dir_ / "flood/pids.json")["worker-0"].get<pid_t>();
  zmq::context_t ctx(1);
  const long peak_before = PeakRssKiB(pid);
  EXPECT_EQ(SendOversized(ctx, gateway, 8, 32 << 20), 8) << "the gateway closes a connection sending too much";
  const long peak_after = PeakRssKiB(pid);
  std::printf("worker-0 peak RSS %ld -> %ld KiB after 256 MiB of oversized messages\n", peak_before, peak_after);
  EXPECT_LT(peak_after - peak_before, 16 << 10) << "peak RSS " << peak_before << " -> " << peak_after << " KiB";
  std::string said;
  GatewayPeer one(ctx, gateway);  // one connection, two ids
  one.Hello(0);                   // one connection's messages are read in order: attached before the next
  one.Hello(2);
  EXPECT_EQ(one.Answers(5, 1, &said), 1);
  EXPECT_NE(said.find("this connection serves client 0"), std::string::npos) << said;
  GatewayPeer flood(ctx, gateway);  // 200 hellos for executor 1's client
  for (int i = 0; i < 200; ++i) flood.Hello(1);
  const int answered = flood.Answers(3, 201, &said);
  std::printf("200 refused hellos: %d answered\n", answered);
  EXPECT_LE(answered, 32);
  EXPECT_GE(answered, 1);
  // 300 connections, each with a hello, from another host (127.0.0.3) at
  // once: the gateway's connection guard takes 64 at once, then 32 a second
  // from one address, and resets the rest before their handshakes.
  {
    std::vector<std::unique_ptr<GatewayPeer>> many;
    for (int i = 0; i < 300; ++i) {
      many.push_back(std::make_unique<GatewayPeer>(ctx, "tcp://127.0.0.3:0;" + gateway.substr(6)));
      many.back()->Hello(1);
    }
    for (int t = 0;
         t < 200 && worker_stats().value("gateway", nlohmann::json::object()).value("connections_limited", 0) == 0; ++t)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Counted by reason: /metrics (once the next stats are out), then, the
  // launch stopped, the stats file and the summary.
  ASSERT_TRUE(testing::WaitForFile(dir_ / "flood/http/worker-0", 30));
  EXPECT_GE(ScrapeRefusals(testing::ReadText(dir_ / "flood/http/worker-0"), "not_your_client", 201), 201);
  launch->Signal(SIGINT);
  launch->Wait(60);
  const auto gs = worker_stats().value("gateway", nlohmann::json::object());
  EXPECT_GE(gs.value("refused_by_reason", nlohmann::json::object()).value("not_your_client", 0), 201) << gs.dump();
  EXPECT_GT(gs.value("connections_limited", 0), 0) << gs.dump();
  const auto g = testing::ReadJson(dir_ / "flood/summary.json")["federated"].value("gateway", nlohmann::json::object());
  EXPECT_GE(g.value("refused_by_reason", nlohmann::json::object()).value("not_your_client", int64_t{0}), 201)
      << g.dump();
  EXPECT_GE(g.value("refusals_unanswered", int64_t{0}), 200 - 32) << g.dump();
}

// `geodesic token --role client` binds the token to one id: without --id
// it is refused, unless --any-id asks for a token for every id, which comes
// with a warning.
TEST_F(RealClientsTest, ClientTokensAreBoundToOneIdUnlessAnyIdIsAskedFor) {
  ASSERT_TRUE(transport::CreateSecretFile(dir_ / "secret").ok());
  const std::vector<std::string> token = {"token",         "--job",  dir_ / "job.yaml", "--secret-file",
                                          dir_ / "secret", "--role", "client"};
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = token;
    args.insert(args.end(), extra.begin(), extra.end());
    return testing::RunGeodesic(args, 20);
  };
  auto none = run({});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.output.find("give --id K (or --any-id"), std::string::npos) << none.output;
  auto bound = run({"--id", "3"});
  ASSERT_EQ(bound.exit_code, 0) << bound.output;
  EXPECT_NE(bound.output.find(".client.3."), std::string::npos) << bound.output;
  EXPECT_EQ(bound.output.find("warning"), std::string::npos) << bound.output;
  auto any = run({"--any-id"});
  ASSERT_EQ(any.exit_code, 0) << any.output;
  EXPECT_NE(any.output.find(".client.*."), std::string::npos) << any.output;
  EXPECT_NE(any.output.find("warning: this client token admits its holder as any client id"), std::string::npos)
      << any.output;
  EXPECT_NE(run({"--id", "3", "--any-id"}).exit_code, 0);
}

}  // namespace
}  // namespace geodesic
