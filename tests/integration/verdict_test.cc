// The launcher's verdicts, end to end: a job whose workers all fail is
// failed (not finished) and names them; a restarted coordinator is
// reported as what it did (saved state or a fresh rendezvous) and the
// summary's times share one clock; a result file that cannot be written
// costs the file, not the accuracy; emulated-WAN jobs start every time
// (their fixed ports are held, so nothing takes them before their owner
// binds them).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "tests/integration/harness.h"

namespace geodesic {
namespace {

using testing::RunGeodesic;
using testing::TempDir;

std::string Example() { return std::string(GEODESIC_SOURCE_DIR) + "/examples/fashion_mnist.yaml"; }

const char* kTwoRegionSynthetic = R"(
name: verdict
regions:
  a: {servers: 1, workers: 1}
  b: {servers: 1, workers: 1}
model: {name: synthetic, synthetic_params: 100000}
training: {steps: 100000, staleness_bound: 1}
wire: {chunk_bytes: 65536}
)";

TEST(VerdictTest, WorkersThatFailForGoodFailTheJobAndAreNamed) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kTwoRegionSynthetic);
  // Shard 0 is paused for 4 s: every worker's pull goes unanswered past the
  // 2 s RPC deadline and the worker exits 1. The lease (8 s) outlives the
  // pause, so the shard itself is never declared dead, and the evaluator
  // reads the final model once the coordinator has given up on the workers.
  auto r = RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--quiet", "--set",
                        "membership.rpc_timeout_s=2", "--set", "membership.lease_ms=8000", "--set",
                        "membership.heartbeat_ms=200", "--kill", "server:0@1:STOP", "--kill", "server:0@5:CONT"},
                       120);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("geodesic: failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lost for good: worker-"), std::string::npos) << r.output;
  auto s = testing::ReadJson(dir / "run/summary.json");
  ASSERT_TRUE(s.is_object()) << r.output;
  EXPECT_EQ(s["status"], "failed") << s.dump(2);
  std::set<std::string> failed;
  for (const auto& f : s["failures"]) {
    failed.insert(f["name"].get<std::string>());
    EXPECT_EQ(f["exit"], "exited 1") << f.dump();
    EXPECT_FALSE(f["last_error"].get<std::string>().empty()) << f.dump();
  }
  EXPECT_EQ(failed, (std::set<std::string>{"worker-0", "worker-1"})) << s["failures"].dump(2);
  std::cout << "failed job: " << s["failure"] << "\n";
}

// Keeps deleting the coordinator's saved state until the launcher reports
// the coordinator killed, so that its restart finds none.
bool DeleteStateUntilKilled(testing::Process& launch, const std::string& run, const std::string& log) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    std::filesystem::remove(run + "/coordinator.state", ec);
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.find("the coordinator killed by SIGKILL") != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  (void)launch;
  return false;
}

TEST(VerdictTest, CoordinatorRestartWithoutStateIsAFreshRendezvousOnOneClock) {
  TempDir dir;
  testing::Process launch(
      {"launch", Example(), "--run-dir", dir / "run", "--quiet", "--set", "model.name=mlp", "--set",
       "training.steps=300", "--set", "training.staleness_bound=2", "--set", "membership.heartbeat_ms=100", "--set",
       "membership.lease_ms=1000", "--set", "eval.test_samples=2000", "--set", "eval.snapshot_every_s=1", "--set",
       "eval.target_accuracy=0.5", "--kill", "coordinator:0@3"},
      dir / "launch.log");
  ASSERT_TRUE(DeleteStateUntilKilled(launch, dir / "run", dir / "launch.log"));
  const int code = launch.Wait(240);
  const std::string out = testing::ReadText(dir / "launch.log");
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("the restarted coordinator found no saved state"), std::string::npos) << out;
  EXPECT_EQ(out.find("continued from its saved state"), std::string::npos) << out;
  auto s = testing::ReadJson(dir / "run/summary.json");
  ASSERT_TRUE(s.is_object()) << out;
  ASSERT_EQ(s["recoveries"].size(), 1u) << s["recoveries"].dump(2);
  EXPECT_EQ(s["recoveries"][0]["state"], "fresh_rendezvous") << s["recoveries"].dump(2);
  const double wall = s["wall_seconds"].get<double>();
  ASSERT_FALSE(s["accuracy_curve"].empty());
  const double last = s["accuracy_curve"].back()[0].get<double>();
  EXPECT_GE(wall, last) << s["accuracy_curve"].dump();
  ASSERT_TRUE(s["seconds_to_target"].is_number()) << s.dump(2);
  EXPECT_GE(wall, s["seconds_to_target"].get<double>());
  std::cout << "wall " << wall << " s, last curve point " << last << " s, target at " << s["seconds_to_target"]
            << " s\n";
}

TEST(VerdictTest, UnwritableFinalParamsKeepTheAccuracyAndNameTheFile) {
  TempDir dir;
  // A directory where the evaluator writes the final parameters.
  std::filesystem::create_directories(dir / "run/final_params.bin/occupied");
  auto r = RunGeodesic({"launch", Example(), "--run-dir", dir / "run", "--quiet", "--set", "model.name=mlp", "--set",
                        "training.steps=100", "--set", "eval.test_samples=2000"},
                       240);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("test accuracy 0."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("could not write final_params.bin"), std::string::npos) << r.output;
  auto s = testing::ReadJson(dir / "run/summary.json");
  ASSERT_TRUE(s.is_object()) << r.output;
  EXPECT_EQ(s["status"], "failed");
  ASSERT_TRUE(s["test_accuracy"].is_number()) << s.dump(2);
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.3);
  ASSERT_EQ(s["unwritten"].size(), 1u) << s.dump(2);
  EXPECT_EQ(s["unwritten"][0].get<std::string>().rfind("final_params.bin: ", 0), 0u) << s["unwritten"];
}

const char* kFourRegionProxy = R"(
name: ports
regions:
  a: {servers: 1, workers: 1}
  b: {servers: 1, workers: 1}
  c: {servers: 1, workers: 1}
  d: {servers: 1, workers: 1}
model: {name: synthetic, synthetic_params: 20000}
training: {steps: 5, staleness_bound: 1}
membership: {heartbeat_ms: 100, lease_ms: 1000}
wan:
  emulation: proxy
  probe: false
  links:
    - {regions: [a, b], rtt_ms: 2}
    - {regions: [a, c], rtt_ms: 2}
    - {regions: [a, d], rtt_ms: 2}
    - {regions: [b, c], rtt_ms: 2}
    - {regions: [b, d], rtt_ms: 2}
    - {regions: [c, d], rtt_ms: 2}
)";

TEST(VerdictTest, PortRaceFourRegionProxyLaunchesAllStart) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kFourRegionProxy);
  const auto t0 = std::chrono::steady_clock::now();
  int started = 0;
  for (int i = 0; i < 30; ++i) {
    const std::string run = dir / ("run-" + std::to_string(i));
    auto r = RunGeodesic({"launch", dir / "job.yaml", "--run-dir", run, "--quiet"}, 30);
    EXPECT_EQ(r.exit_code, 0) << "launch " << i << ":\n" << r.output;
    started += r.exit_code == 0;
    std::filesystem::remove_all(run);
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(150)) break;
  }
  EXPECT_EQ(started, 30);
  std::cout << started << " of 30 four-region proxy launches started and finished in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
}

}  // namespace
}  // namespace geodesic
