// Real federated clients end to end: a secured `geodesic launch` of a job
// with federated.gateway, and tens of `geodesic client` processes joining
// and leaving at random while it trains, each with its own `client` token.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <regex>
#include <thread>

#include "tests/integration/harness.h"
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
  std::unique_ptr<Process> Launch(const std::string& run, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"launch", dir_ / "job.yaml", "--run-dir", dir_ / run, "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = std::make_unique<Process>(args, dir_ / "launch.log");
    EXPECT_TRUE(testing::WaitForFile(dir_ / (run + "/coordinator.endpoint"), 60))
        << testing::ReadText(dir_ / "launch.log");
    EXPECT_TRUE(testing::WaitForFile(dir_ / (run + "/coordinator.key"), 10));
    endpoint_ = testing::ReadText(dir_ / (run + "/coordinator.endpoint"));
    secret_ = transport::LoadSecret(dir_ / (run + "/secret")).value();
    run_ = run;
    return p;
  }

  // A `geodesic client` for `id` with a token for `token_id` (-1: any),
  // minted with `secret` (empty: the job's).
  std::unique_ptr<Process> Client(int id, std::vector<std::string> extra, int token_id, std::string secret = "") {
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
  ASSERT_EQ(launch->Wait(150), 0) << testing::ReadText(dir_ / "launch.log");
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
  std::this_thread::sleep_for(std::chrono::seconds(1));
  killed[0]->Signal(SIGKILL);
  killed[1]->Signal(SIGSTOP);
  ASSERT_EQ(launch->Wait(150), 0) << testing::ReadText(dir_ / "launch.log");
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

}  // namespace
}  // namespace geodesic
