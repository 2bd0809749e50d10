// Peers that flood and never read (docs/security.md, "Denial of service"),
// against the default job while it trains: a plaintext shard flooded with
// garbage and with refused pulls, and a secured coordinator flooded with
// registrations from a random CURVE key and no token. Each sender never
// receives; before the fix each refusal's reply blocked the loop for the
// 5 s send timeout once the sender's queue was full, and the job stalled.
// The job must finish with its normal accuracy in at most 1.3x the time of
// the same job without the attack (labelled slow: four short training runs).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>
#include <zmq.hpp>

#include "tests/integration/harness.h"
#include "tests/test_paths.h"
#include "transport/message.h"
#include "transport/security.h"

namespace geodesic {
namespace {

using testing::TempDir;

std::string Example() { return ::geodesic::testing::SourcePath("examples/fashion_mnist.yaml"); }

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The default job for half an epoch (120 steps per worker), with a run
// directory `run` under `dir`; the final evaluation only, on 2,000 test
// images (the same in both runs).
std::vector<std::string> LaunchArgs(const TempDir& dir, const std::string& run, bool secured) {
  std::vector<std::string> args = {"launch", Example(), "--run-dir", dir / run, "--quiet"};
  for (const char* s : {"training.steps=120", "eval.test_samples=2000", "eval.snapshot_every_s=1000"})
    args.insert(args.end(), {"--set", s});
  if (secured) args.insert(args.end(), {"--set", "security.mode=curve"});
  return args;
}

struct Timed {
  int exit_code = -1;
  double seconds = 0;
  nlohmann::json summary;
};

Timed Baseline(const TempDir& dir, bool secured) {
  const auto start = std::chrono::steady_clock::now();
  auto r = testing::RunGeodesic(LaunchArgs(dir, "baseline", secured), 300);
  Timed t{
      .exit_code = r.exit_code, .seconds = Since(start), .summary = testing::ReadJson(dir / "baseline/summary.json")};
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return t;
}

// A status request (plaintext jobs answer it without a token).
std::optional<wire::StatusReply> AskStatus(zmq::context_t& ctx, const std::string& job, const std::string& endpoint) {
  transport::TrafficCounters counters;
  transport::Socket s(ctx, zmq::socket_type::dealer, {.job = job, .role = wire::CLIENT, .id = 0}, &counters);
  if (!s.Connect(endpoint).ok()) return std::nullopt;
  wire::Header h;
  h.mutable_status_request();
  if (!s.Send(h, {}).ok()) return std::nullopt;
  for (int i = 0; i < 100; ++i)
    if (s.WaitReadable(20))
      if (auto in = s.Receive(); in && in->status.ok() && in->message.header.has_status_reply())
        return in->message.header.status_reply();
  return std::nullopt;
}

// Waits (bounded) until the coordinator says training started; returns its reply.
std::optional<wire::StatusReply> WaitForTraining(zmq::context_t& ctx, const TempDir& dir) {
  for (int i = 0; i < 600; ++i) {
    std::string endpoint;
    try {
      endpoint = testing::ReadText(dir / "run/coordinator.endpoint");
    } catch (...) {
    }
    if (!endpoint.empty())
      if (auto st = AskStatus(ctx, "fashion-mnist-cnn", endpoint); st && st->training_started()) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return std::nullopt;
}

// Sends `garbage` one-frame junk messages and `pulls` pulls with a refused
// clock to `endpoint`, never reading; returns how many left this process.
int FloodShard(zmq::socket_t& s, int garbage, int pulls) {
  int sent = 0;
  for (int i = 0; i < garbage; ++i)
    sent += s.send(zmq::buffer("not a geodesic message"), zmq::send_flags::none) ? 1 : 0;
  wire::Header h;
  h.set_protocol(transport::kProtocolVersion);
  h.set_job("fashion-mnist-cnn");
  h.set_sender_role(wire::WORKER);
  h.set_sender_id(0);
  h.mutable_pull_request()->set_clock(-5);  // REFUSAL_BAD_CLOCK
  for (int i = 0; i < pulls; ++i) {
    h.set_request_id(i + 1);
    sent += s.send(zmq::buffer(h.SerializeAsString()), zmq::send_flags::none) ? 1 : 0;
  }
  return sent;
}

void ExpectLikeBaseline(const Timed& base, const Timed& attacked) {
  ASSERT_EQ(attacked.exit_code, 0);
  EXPECT_EQ(attacked.summary["status"], "finished");
  const double acc = attacked.summary["test_accuracy"].get<double>();
  const double base_acc = base.summary["test_accuracy"].get<double>();
  std::printf("without the attack: %.1f s, accuracy %.4f; under it: %.1f s (%.2fx), accuracy %.4f\n", base.seconds,
              base_acc, attacked.seconds, attacked.seconds / base.seconds, acc);
  EXPECT_GE(acc, base_acc - 0.02);
  EXPECT_LE(attacked.seconds, 1.3 * base.seconds);
}

// The job again, with `attack` run once it trains; `attack` keeps its
// sockets open until it returns, and this waits for the job to end first.
Timed Attacked(const TempDir& dir, bool secured,
               const std::function<void(zmq::context_t&, testing::Process&)>& attack) {
  zmq::context_t ctx(1);
  const auto start = std::chrono::steady_clock::now();
  testing::Process launch(LaunchArgs(dir, "run", secured), dir / "launch.log");
  attack(ctx, launch);
  std::printf("attack over after %.1f s\n", Since(start));
  const int exit_code = launch.Wait(300);
  return {.exit_code = exit_code, .seconds = Since(start), .summary = testing::ReadJson(dir / "run/summary.json")};
}

TEST(TrainingUnderFloodTest, AShardFloodedByAPeerThatNeverReadsKeepsServing) {
  TempDir dir;
  const Timed base = Baseline(dir, /*secured=*/false);
  const Timed attacked = Attacked(dir, false, [&](zmq::context_t& ctx, testing::Process& launch) {
    auto status = WaitForTraining(ctx, dir);
    ASSERT_TRUE(status && status->servers_size() == 2) << testing::ReadText(dir / "launch.log");
    zmq::socket_t attacker(ctx, zmq::socket_type::dealer);
    attacker.set(zmq::sockopt::linger, 0);
    attacker.set(zmq::sockopt::sndtimeo, 2000);
    attacker.connect(status->servers(0).endpoint());
    std::printf("flood: %d messages sent to shard 0\n", FloodShard(attacker, 60000, 40000));
    // Never reading, until the job ends.
    EXPECT_EQ(launch.Wait(300), 0);
  });
  ExpectLikeBaseline(base, attacked);
  auto shard = testing::ReadJson(dir / "run/stats/server-0.json");
  std::printf("shard 0: %s refused, %s unanswered, %s replies dropped\n", shard["messages_refused"].dump().c_str(),
              shard["refusals_unanswered"].dump().c_str(), shard["sends_dropped"].dump().c_str());
  EXPECT_GE(shard["refused_by_reason"]["malformed"].get<int64_t>(), 50000);
  EXPECT_GE(shard["refused_by_reason"]["bad_clock"].get<int64_t>(), 30000);
  EXPECT_GT(shard["refusals_unanswered"].get<int64_t>(), 80000);
  // The log says so in a few lines, not one per refusal.
  const std::string log = testing::ReadText(dir / "run/logs/server-0.log");
  EXPECT_NE(log.find("further refusals in that time go unanswered"), std::string::npos);
  EXPECT_LT(log.size(), 200000u);
}

TEST(TrainingUnderFloodTest, ASecuredCoordinatorFloodedWithoutATokenKeepsServing) {
  TempDir dir;
  const Timed base = Baseline(dir, /*secured=*/true);
  const Timed attacked = Attacked(dir, true, [&](zmq::context_t& ctx, testing::Process&) {
    // Workers write their stats once they train.
    ASSERT_TRUE(testing::WaitForFile(dir / "run/stats/worker-0.json", 120)) << testing::ReadText(dir / "launch.log");
    // Any CURVE key gets through the coordinator's handshake (join tokens
    // decide membership); this one has no token.
    transport::TrafficCounters counters;
    transport::Socket attacker(ctx, zmq::socket_type::dealer,
                               {.job = "fashion-mnist-cnn",
                                .role = wire::WORKER,
                                .id = 1,
                                .send_timeout_ms = 2000,
                                .curve = {.keys = transport::GenerateCurveKeyPair().value(),
                                          .server_key = testing::ReadText(dir / "run/coordinator.key")}},
                               &counters);
    ASSERT_TRUE(attacker.Connect(testing::ReadText(dir / "run/coordinator.endpoint")).ok());
    wire::Header reg;
    reg.mutable_register_request()->mutable_model()->set_name("cnn");
    int sent = 0;
    for (int i = 0; i < 60000; ++i) {
      reg.set_request_id(i + 1);
      sent += attacker.Send(reg, {}).ok() ? 1 : 0;
    }
    std::printf("flood: %d registrations without a token sent\n", sent);
    // Held 10 s without reading, then closed (the job goes on).
    std::this_thread::sleep_for(std::chrono::seconds(10));
  });
  ExpectLikeBaseline(base, attacked);
  auto coordinator = testing::ReadJson(dir / "run/stats/coordinator.json");
  std::printf("coordinator: %s refused, %s unanswered\n", coordinator["refused_by_reason"].dump().c_str(),
              coordinator["refusals_unanswered"].dump().c_str());
  EXPECT_GE(coordinator["refused_by_reason"]["registration"].get<int64_t>(), 50000);
  EXPECT_GT(coordinator["refusals_unanswered"].get<int64_t>(), 50000);
}

}  // namespace
}  // namespace geodesic
