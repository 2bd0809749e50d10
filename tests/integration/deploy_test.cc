// `geodesic deploy render --target hosts` end to end: a secured job
// (security.mode: curve) with two regions on two loopback addresses
// (127.0.0.2 and 127.0.0.3, two "hosts"), each started by its rendered
// script alone, with no launcher parent. The processes find
// each other at the rendered ports, serve /healthz on their own host's
// address, and the job trains to the end; each script exits 0 and the
// evaluator on worker 0's host writes the test accuracy. A terminated script
// stops its host's processes. A pod's ordinal becomes its member id.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <filesystem>
#include <random>
#include <thread>

#include "tests/integration/harness.h"
#include "tests/test_paths.h"
#include "transport/http_endpoint.h"

namespace geodesic {
namespace {

using testing::Process;
using testing::TempDir;

bool CanBind(const std::string& ip, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// A base port below the ephemeral range whose next `count` ports are free on
// both hosts now (a later taker makes the job fail loudly, not hang).
int FreeBase(int count) {
  std::mt19937 rng(std::random_device{}());
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int base = 20000 + static_cast<int>(rng() % 1200) * 10;
    bool free = true;
    for (int p = base; p < base + count && free; ++p) free = CanBind("127.0.0.2", p) && CanBind("127.0.0.3", p);
    if (free) return base;
  }
  return -1;
}

// /healthz of a process a host script starts: until it answers, or 60 s
// (starting LibTorch processes on a loaded 2-core machine took over the
// 10 s this once waited).
StatusOr<transport::HttpResponse> WaitForHealthz(const std::string& at) {
  StatusOr<transport::HttpResponse> r = Unavailable("not asked");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!(r = transport::HttpGet(at, "/healthz", 1)).ok() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return r;
}

// examples/fashion_mnist.yaml with us-east on 127.0.0.2 and eu-west on
// 127.0.0.3, and `sets` (KEY=VALUE) applied: a job's file and --set flags.
std::vector<std::string> TwoHostJob(const std::vector<std::string>& sets) {
  std::vector<std::string> job = {::geodesic::testing::SourcePath("examples/fashion_mnist.yaml"), "--set",
                                  "regions.us-east.host=127.0.0.2", "--set", "regions.eu-west.host=127.0.0.3"};
  for (const std::string& set : sets) job.insert(job.end(), {"--set", set});
  return job;
}

// Everything the two hosts printed: each script's output and the last
// lines of every process log under both run directories, for a failure
// message (which process stalled is in its own log, not the script's).
std::string HostsOutput(const TempDir& dir) {
  std::string out;
  for (const char* script : {"us.log", "eu.log"})
    out += std::string("== ") + script + "\n" + testing::ReadText(dir / script);
  for (const char* run : {"out/run-127.0.0.2/logs", "out/run-127.0.0.3/logs"}) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir / run, ec)) {
      const std::string text = testing::ReadText(e.path());
      out += "== " + e.path().string() + "\n" + text.substr(text.size() > 3000 ? text.size() - 3000 : 0);
    }
  }
  return out;
}

TEST(HostsDeployTest, RenderedScriptsTrainASecuredJobOnTwoHostsWithoutALauncher) {
  TempDir dir;
  const int base = FreeBase(20);
  ASSERT_GT(base, 0) << "no free ports";
  auto render = testing::RunGeodesic({"deploy",
                                      "render",
                                      ::geodesic::testing::SourcePath("examples/fashion_mnist.yaml"),
                                      "--target",
                                      "hosts",
                                      "--out",
                                      dir / "out",
                                      "--base-port",
                                      std::to_string(base),
                                      "--http-base-port",
                                      std::to_string(base + 10),
                                      "--set",
                                      "regions.us-east.host=127.0.0.2",
                                      "--set",
                                      "regions.eu-west.host=127.0.0.3",
                                      "--set",
                                      "training.epochs=1",
                                      "--set",
                                      "model.name=mlp",
                                      "--set",
                                      "security.mode=curve"},
                                     30);
  ASSERT_EQ(render.exit_code, 0) << render.output;
  // Each host gets only its own secrets; only the coordinator's has the job secret.
  EXPECT_TRUE(std::filesystem::exists(dir / "out/secrets/host-127.0.0.2/secret"));
  EXPECT_TRUE(std::filesystem::exists(dir / "out/secrets/host-127.0.0.3/worker-2.token"));
  EXPECT_FALSE(std::filesystem::exists(dir / "out/secrets/host-127.0.0.3/secret"));
  ::setenv("GEODESIC", ::geodesic::testing::GeodesicBinary(), 1);
  // eu-west first: its processes wait for the coordinator on the other host.
  Process eu({"/bin/bash", dir / "out/host-127.0.0.3.sh"}, dir / "eu.log", /*program=*/true);
  Process us({"/bin/bash", dir / "out/host-127.0.0.2.sh"}, dir / "us.log", /*program=*/true);
  // Each host's processes serve HTTP on that host's address: the coordinator
  // (process 0) on 127.0.0.2, server-1 (process 2) on 127.0.0.3.
  for (const auto& [at, who] : {std::pair{"127.0.0.2:" + std::to_string(base + 10), "coordinator"},
                                std::pair{"127.0.0.3:" + std::to_string(base + 12), "server-1"}}) {
    StatusOr<transport::HttpResponse> r = WaitForHealthz(at);
    EXPECT_TRUE(r.ok() && r->status == 200) << who << " at " << at << ": " << r.status();
  }
  const int us_code = us.Wait(150), eu_code = eu.Wait(30);
  EXPECT_EQ(us_code, 0) << HostsOutput(dir);
  EXPECT_EQ(eu_code, 0) << HostsOutput(dir);
  // Every process of a host logged under that host's run directory only.
  const std::string server1 = testing::ReadText(dir / "out/run-127.0.0.3/logs/server-1.log");
  EXPECT_NE(server1.find("listening on tcp://127.0.0.3:" + std::to_string(base + 2) + " (CurveZMQ)"), std::string::npos)
      << server1;
  EXPECT_FALSE(std::filesystem::exists(dir / "out/run-127.0.0.3/logs/coordinator.log"));
  auto result = testing::ReadJson(dir / "out/run-127.0.0.2/result.json");
  ASSERT_TRUE(result.is_object()) << HostsOutput(dir);
  EXPECT_EQ(result["workers_done"], 4) << result.dump();
  // One epoch of the MLP; `geodesic launch` of the same (BSP, seeded) job: 0.855.
  EXPECT_GE(result["test_accuracy"].get<double>(), 0.83) << result.dump();
  EXPECT_FALSE(result["accuracy_curve"].empty()) << "worker 0's snapshots reached the evaluator beside it";
  std::printf("two hosts, rendered scripts, CURVE: test accuracy %.4f after one epoch of the MLP\n",
              result["test_accuracy"].get<double>());
}

// A replicated BSP job on two hosts: SIGKILL to shard 1's process on its host
// hands the shard to its backup on the other host, and the job ends with
// the same parameters, bit for bit, as `geodesic launch` of the same job
// without the kill (docs/reliability.md: a failover loses nothing).
TEST(HostsDeployTest, KillingAHostsPrimaryShardFailsOverAndLosesNothing) {
  TempDir dir;
  const int base = FreeBase(20);
  ASSERT_GT(base, 0) << "no free ports";
  const std::vector<std::string> job = TwoHostJob({"training.epochs=2", "model.name=mlp", "replication.backups=1"});
  auto args = [&](std::vector<std::string> head) {
    head.insert(head.end(), job.begin(), job.end());
    return head;
  };
  auto straight = testing::RunGeodesic(
      args({"launch", "--run-dir", dir / "straight", "--quiet", "--no-dashboard", "--no-metrics"}), 180);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  auto render = testing::RunGeodesic(args({"deploy", "render", "--out", dir / "out", "--base-port",
                                           std::to_string(base), "--http-base-port", std::to_string(base + 10)}),
                                     30);
  ASSERT_EQ(render.exit_code, 0) << render.output;
  ::setenv("GEODESIC", ::geodesic::testing::GeodesicBinary(), 1);
  Process eu({"/bin/bash", dir / "out/host-127.0.0.3.sh"}, dir / "eu.log", /*program=*/true);
  Process us({"/bin/bash", dir / "out/host-127.0.0.2.sh"}, dir / "us.log", /*program=*/true);
  // Training has started once worker 0 writes its stats; then shard 1 dies.
  // Six LibTorch processes starting beside other tests on two cores can
  // take most of a minute to meet (one CI run passed 60 s).
  ASSERT_TRUE(testing::WaitForFile(dir / "out/run-127.0.0.2/stats/worker-0.json", 120)) << HostsOutput(dir);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const pid_t server1 = std::stoi(testing::ReadText(dir / "out/run-127.0.0.3/pids/server-1"));
  ASSERT_EQ(::kill(server1, SIGKILL), 0);
  EXPECT_EQ(us.Wait(150), 0) << HostsOutput(dir);
  EXPECT_EQ(eu.Wait(30), 1) << "server-1 was killed: its host's script says so";
  EXPECT_NE(testing::ReadText(dir / "eu.log").find("server-1 failed"), std::string::npos)
      << testing::ReadText(dir / "eu.log");
  const std::string backup = testing::ReadText(dir / "out/run-127.0.0.2/logs/backup-1.log");
  EXPECT_NE(backup.find("promoted"), std::string::npos) << backup;
  const std::string a = testing::ReadText(dir / "straight/final_params.bin"),
                    b = testing::ReadText(dir / "out/run-127.0.0.2/final_params.bin");
  ASSERT_GT(a.size(), 0u);
  EXPECT_TRUE(a == b) << "the failover changed the BSP result";
}

// A secured job with an aggregator in each region, rendered for two hosts:
// each host's script starts its aggregator with its own token, the workers
// push through it over CurveZMQ, and the job ends with the parameters of
// `geodesic launch` of the same job without aggregators, bit for bit
// (docs/wan.md "Regional aggregation").
TEST(HostsDeployTest, RenderedAggregatorsEndAsTheFlatLaunchedJob) {
  TempDir dir;
  const int base = FreeBase(30);  // 12 processes: two aggregators more
  ASSERT_GT(base, 0) << "no free ports";
  const std::vector<std::string> job = TwoHostJob({"training.epochs=0.3", "model.name=mlp", "security.mode=curve"});
  auto args = [&](std::vector<std::string> head, bool aggregators) {
    head.insert(head.end(), job.begin(), job.end());
    for (const char* r : {"us-east", "eu-west"})
      head.insert(head.end(),
                  {"--set", std::string("regions.") + r + ".aggregator=" + (aggregators ? "true" : "false")});
    return head;
  };
  auto flat = testing::RunGeodesic(
      args({"launch", "--run-dir", dir / "flat", "--quiet", "--no-dashboard", "--no-metrics"}, false), 180);
  ASSERT_EQ(flat.exit_code, 0) << flat.output;
  auto render = testing::RunGeodesic(args({"deploy", "render", "--out", dir / "out", "--base-port",
                                           std::to_string(base), "--http-base-port", std::to_string(base + 15)},
                                          true),
                                     30);
  ASSERT_EQ(render.exit_code, 0) << render.output;
  ::setenv("GEODESIC", ::geodesic::testing::GeodesicBinary(), 1);
  Process eu({"/bin/bash", dir / "out/host-127.0.0.3.sh"}, dir / "eu.log", /*program=*/true);
  Process us({"/bin/bash", dir / "out/host-127.0.0.2.sh"}, dir / "us.log", /*program=*/true);
  EXPECT_EQ(us.Wait(150), 0) << HostsOutput(dir);
  EXPECT_EQ(eu.Wait(30), 0) << HostsOutput(dir);
  EXPECT_TRUE(std::filesystem::exists(dir / "out/secrets/host-127.0.0.3/aggregator-1.token"));
  for (const char* log : {"out/run-127.0.0.2/logs/aggregator-0.log", "out/run-127.0.0.3/logs/aggregator-1.log"}) {
    const std::string text = testing::ReadText(dir / log);
    EXPECT_NE(text.find("(CurveZMQ, public key "), std::string::npos) << text;
    EXPECT_NE(text.find("the job finished"), std::string::npos) << HostsOutput(dir);
  }
  const std::string a = testing::ReadText(dir / "flat/final_params.bin"),
                    b = testing::ReadText(dir / "out/run-127.0.0.2/final_params.bin");
  ASSERT_GT(a.size(), 0u);
  EXPECT_TRUE(a == b) << "the rendered aggregators changed the BSP result";
}

// SIGTERM to a host's script stops that host's processes and nothing is
// left behind: the script's process group is empty afterwards.
TEST(HostsDeployTest, ATerminatedScriptStopsItsProcesses) {
  TempDir dir;
  const int base = FreeBase(20);
  ASSERT_GT(base, 0) << "no free ports";
  auto render = testing::RunGeodesic(
      {"deploy", "render", ::geodesic::testing::SourcePath("examples/fashion_mnist.yaml"), "--out", dir / "out",
       "--base-port", std::to_string(base), "--http-base-port", std::to_string(base + 10), "--set",
       "regions.us-east.host=127.0.0.2", "--set", "regions.eu-west.host=127.0.0.3"},
      30);
  ASSERT_EQ(render.exit_code, 0) << render.output;
  ::setenv("GEODESIC", ::geodesic::testing::GeodesicBinary(), 1);
  Process us({"/bin/bash", dir / "out/host-127.0.0.2.sh"}, dir / "us.log", /*program=*/true);
  const std::string at = "127.0.0.2:" + std::to_string(base + 10);
  StatusOr<transport::HttpResponse> r = WaitForHealthz(at);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << testing::ReadText(dir / "us.log");
  us.Signal(SIGTERM);
  EXPECT_EQ(us.Wait(30), 130) << testing::ReadText(dir / "us.log");
  bool gone = false;
  for (int i = 0; i < 50 && !gone; ++i) {
    gone = ::kill(-us.pid(), 0) != 0 && errno == ESRCH;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(gone) << "processes of the stopped script are still running";
}

// --id-from-hostname: a StatefulSet's pod NAME-N is member OFFSET + N, so
// one pod template serves a region's members. The host name is set in a UTS
// namespace of the test's own (root; skipped without it).
TEST(IdFromHostnameTest, APodsOrdinalBecomesItsId) {
  if (std::system("unshare --uts true 2>/dev/null") != 0) GTEST_SKIP() << "cannot create a UTS namespace here";
  TempDir dir;
  Process worker(
      {"/usr/bin/unshare", "--uts", "/bin/sh", "-c",
       "hostname worker-us-east-2 && exec \"$0\" worker --job \"$1\" --id-from-hostname 1 --coordinator "
       "tcp://127.0.0.1:1 --set membership.rendezvous_timeout_s=2 --set membership.report_after_s=1",
       ::geodesic::testing::GeodesicBinary(), ::geodesic::testing::SourcePath("examples/fashion_mnist.yaml")},
      dir / "worker.log", /*program=*/true);
  EXPECT_NE(worker.Wait(60), 0);
  const std::string log = testing::ReadText(dir / "worker.log");
  EXPECT_NE(log.find("[worker 3]"), std::string::npos) << log;  // 1 + 2
  EXPECT_NE(log.find("rendezvous timed out"), std::string::npos) << log;
  auto plain = testing::RunGeodesic({"worker", "--job", ::geodesic::testing::SourcePath("examples/fashion_mnist.yaml"),
                                     "--coordinator", "tcp://127.0.0.1:1", "--id-from-hostname", "0"},
                                    30);
  EXPECT_NE(plain.exit_code, 0);
  EXPECT_NE(plain.output.find("does not end in -N"), std::string::npos) << plain.output;
  auto neither = testing::RunGeodesic(
      {"server", "--job", ::geodesic::testing::SourcePath("examples/fashion_mnist.yaml"), "--coordinator", "x"}, 30);
  EXPECT_NE(neither.exit_code, 0);
  EXPECT_NE(neither.output.find("give --id N or --id-from-hostname OFFSET"), std::string::npos) << neither.output;
}

}  // namespace
}  // namespace geodesic
