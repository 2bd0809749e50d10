// The launcher's verdicts, end to end: a job whose workers all fail is
// failed (not finished) and names them; a restarted coordinator is
// reported as what it did (saved state or a fresh rendezvous) and the
// summary's times share one clock; a result file that cannot be written
// costs the file, not the accuracy; emulated-WAN jobs start every time
// (their fixed ports are held, so nothing takes them before their owner
// binds them).
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "deploy/emulated_wan.h"
#include "tests/integration/harness.h"
#include "tests/test_paths.h"

namespace geodesic {
namespace {

using testing::RunGeodesic;
using testing::TempDir;

std::string Example() { return ::geodesic::testing::SourcePath("examples/fashion_mnist.yaml"); }

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
    if (text.find("geodesic: finished") != std::string::npos) return false;  // the job ended before the kill
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  (void)launch;
  return false;
}

TEST(VerdictTest, CoordinatorRestartWithoutStateIsAFreshRendezvousOnOneClock) {
  TempDir dir;
  testing::Process launch({"launch",
                           Example(),
                           "--run-dir",
                           dir / "run",
                           "--quiet",
                           "--set",
                           "model.name=mlp",
                           "--set",
                           "training.steps=800",
                           "--set",
                           "training.staleness_bound=2",
                           "--set",
                           "membership.heartbeat_ms=100",
                           "--set",
                           "membership.lease_ms=1000",
                           "--set",
                           "eval.test_samples=2000",
                           "--set",
                           "eval.snapshot_every_s=1",
                           "--set",
                           "eval.target_accuracy=0.5",
                           "--kill",
                           "coordinator:0@3"},
                          dir / "launch.log");
  // 300 steps of the MLP once took 2.4 s here, ending before the kill at 3 s.
  ASSERT_TRUE(DeleteStateUntilKilled(launch, dir / "run", dir / "launch.log")) << "the coordinator was not killed:\n"
                                                                               << testing::ReadText(dir / "launch.log");
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

// The other way round: with its saved state the restarted coordinator
// says it continued, and the report follows.
TEST(VerdictTest, CoordinatorRestartWithStateIsReportedAsContinued) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kTwoRegionSynthetic);
  auto r = RunGeodesic(
      {"launch", dir / "job.yaml", "--run-dir", dir / "run", "--quiet", "--set", "training.steps=3000", "--set",
       "membership.heartbeat_ms=100", "--set", "membership.lease_ms=1000", "--kill", "coordinator:0@1.5"},
      120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the restarted coordinator continued from its saved state"), std::string::npos) << r.output;
  auto s = testing::ReadJson(dir / "run/summary.json");
  ASSERT_TRUE(s.is_object()) << r.output;
  ASSERT_EQ(s["recoveries"].size(), 1u) << s["recoveries"].dump(2);
  EXPECT_EQ(s["recoveries"][0]["state"], "saved") << s["recoveries"].dump(2);
  EXPECT_EQ(s["status"], "finished");
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
  std::cout << "test accuracy " << s["test_accuracy"] << " reported; unwritten: " << s["unwritten"][0] << "\n";
}

// Four regions, a shard in each (the coordinator's port and four shard
// ports fixed in advance), one worker: the fewest processes that exercise
// every fixed port.
const char* kFourRegionProxy = R"(
name: ports
regions:
  a: {servers: 1, workers: 1}
  b: {servers: 1, workers: 0}
  c: {servers: 1, workers: 0}
  d: {servers: 1, workers: 0}
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

// What takes a port that was only probed: any socket the kernel binds to
// a port of its choice (bind to port 0, as the emulator's own route
// listeners do, or the ephemeral port of a connect()). This keeps `kHeld`
// such sockets on loopback, replacing about 1000 a second, so a port
// released before its owner binds it is soon taken.
class PortThief {
 public:
  PortThief() : thread_([this] { Run(); }) {}
  ~PortThief() {
    stop_ = true;
    thread_.join();
  }

 private:
  static constexpr size_t kHeld = 1000;
  void Run() {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    std::deque<int> held;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(280);
    while (!stop_ && std::chrono::steady_clock::now() < deadline) {
      for (int i = 0; i < 10; ++i) {
        int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0)
          held.push_back(fd);
        else
          ::close(fd);
        for (; held.size() > kHeld; held.pop_front()) ::close(held.front());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (int fd : held) ::close(fd);
  }

  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// 30 launches, three at a time (concurrent launchers also compete for
// ports), each bounded, while a thief takes ephemeral ports; every one must
// start and finish.
TEST(VerdictTest, PortRaceFourRegionProxyLaunchesAllStart) {
  TempDir dir;
  PortThief thief;
  testing::WriteText(dir / "job.yaml", kFourRegionProxy);
  const auto t0 = std::chrono::steady_clock::now();
  int started = 0, launched = 0;
  for (int batch = 0; batch < 10; ++batch) {
    std::vector<std::unique_ptr<testing::Process>> runs;
    for (int k = 0; k < 3; ++k, ++launched) {
      const std::string run = dir / ("run-" + std::to_string(launched));
      runs.push_back(std::make_unique<testing::Process>(
          std::vector<std::string>{"launch", dir / "job.yaml", "--run-dir", run, "--quiet"}, run + ".log"));
    }
    for (int k = 0; k < 3; ++k) {
      const std::string run = dir / ("run-" + std::to_string(launched - 3 + k));
      const int code = runs[k]->Wait(60);
      EXPECT_EQ(code, 0) << run << ":\n" << testing::ReadText(run + ".log");
      started += code == 0;
      std::error_code ec;
      std::filesystem::remove_all(run, ec);
    }
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(270)) break;
  }
  EXPECT_EQ(started, 30);
  std::cout << started << " of " << launched << " four-region proxy launches started and finished in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
}

// The mechanism behind the above: a held port is refused to any bind that
// does not share it (another launcher's reservation), yet its owner's
// ZeroMQ listener binds it, and binds it again after a restart.
TEST(VerdictTest, HeldPortIsRefusedToOthersAndBoundByItsOwner) {
  auto hold = deploy::PortHold::Take("127.0.0.1");
  ASSERT_TRUE(hold.ok()) << hold.status();
  const int port = hold->port();
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  EXPECT_NE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(errno, EADDRINUSE);
  ::close(fd);
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  for (int life = 0; life < 2; ++life) {  // the owner, then its restart
    zmq::context_t ctx(1);                // closed (its listener with it) at each life's end
    zmq::socket_t listener(ctx, zmq::socket_type::router);
    listener.set(zmq::sockopt::linger, 0);
    EXPECT_NO_THROW(listener.bind(endpoint)) << "life " << life;
    zmq::socket_t client(ctx, zmq::socket_type::dealer);
    client.set(zmq::sockopt::linger, 0);
    client.connect(endpoint);
    client.send(zmq::str_buffer("hello"), zmq::send_flags::none);
    std::vector<zmq::message_t> parts;
    zmq::pollitem_t item{listener.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(5000)), 1) << "life " << life;
    EXPECT_TRUE(zmq::recv_multipart(listener, std::back_inserter(parts)).has_value());
    EXPECT_EQ(parts.back().to_string(), "hello");
  }
}

}  // namespace
}  // namespace geodesic
