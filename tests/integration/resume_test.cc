// Checkpoints and `geodesic launch --resume`, end to end: a job stopped with
// Ctrl-C and resumed ends with the same parameters, to the last bit, as the
// same job run without a stop (BSP, same seed and steps), including when its
// newest checkpoint is damaged and the previous one must be used.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "cluster/chunking.h"
#include "server/checkpoint.h"
#include "server/shard.h"
#include "tests/integration/harness.h"
#include "tests/test_paths.h"

namespace geodesic {
namespace {

using testing::RunGeodesic;
using testing::TempDir;

const char* kSyntheticBsp = R"(
name: resume
seed: 5
regions:
  a: {servers: 1, workers: 1}
  b: {servers: 1, workers: 2}
model: {name: synthetic, synthetic_params: 50000}
training: {steps: 300, staleness_bound: 0}
optimizer: {name: sgd, lr: 0.05, momentum: 0.9, schedule: cosine}
wire: {chunk_bytes: 16384}
membership: {heartbeat_ms: 100, lease_ms: 1000}
checkpoint: {every_clocks: 20, keep: 3}
)";

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

int64_t NewestClock(const std::string& ckpt_dir, int server) {
  auto files = server::ListCheckpoints(ckpt_dir, server);
  return files.empty() ? -1 : files.front().clock;
}

// Runs the job uninterrupted into `run`; returns its final parameters.
std::string Uninterrupted(const TempDir& dir, const std::string& job, const std::vector<std::string>& sets) {
  std::vector<std::string> args = {"launch", job, "--run-dir", dir / "straight", "--quiet"};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  auto r = RunGeodesic(args, 300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // The job's end wrote a final checkpoint of each shard.
  EXPECT_GE(NewestClock(dir / "straight/checkpoints", 0), 0);
  return ReadBytes(dir / "straight/final_params.bin");
}

// Starts the job, stops it with SIGINT once server 0 checkpointed at
// `stop_after` or later, and returns the launcher's output.
void StartAndInterrupt(const TempDir& dir, const std::string& job, const std::vector<std::string>& sets,
                       int64_t stop_after) {
  std::vector<std::string> args = {"launch", job, "--run-dir", dir / "stopped", "--quiet"};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  testing::Process launch(args, dir / "stopped.log");
  for (int i = 0; i < 1200 && NewestClock(dir / "stopped/checkpoints", 0) < stop_after; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GE(NewestClock(dir / "stopped/checkpoints", 0), stop_after) << testing::ReadText(dir / "stopped.log");
  launch.Signal(SIGINT);
  EXPECT_EQ(launch.Wait(60), 130) << testing::ReadText(dir / "stopped.log");
  auto s = testing::ReadJson(dir / "stopped/summary.json");
  EXPECT_EQ(s["status"], "interrupted");
}

TEST(ResumeTest, InterruptedBspJobResumesToTheSameBits) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kSyntheticBsp);
  const std::string expected = Uninterrupted(dir, dir / "job.yaml", {});
  ASSERT_EQ(expected.size(), 50000u * 4);

  StartAndInterrupt(dir, dir / "job.yaml", {}, 60);
  ASSERT_FALSE(std::filesystem::exists(dir / "stopped/final_params.bin"));
  // Launching a fresh job into the run directory would overwrite its checkpoints: refused.
  auto again = RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "stopped", "--quiet"}, 60);
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.output.find("--resume"), std::string::npos) << again.output;

  auto r = RunGeodesic({"launch", "--resume", dir / "stopped", "--quiet"}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto plan = testing::ReadJson(dir / "stopped/resume.json");
  ASSERT_TRUE(plan.is_object());
  const int64_t from = plan["clock"].get<int64_t>();
  EXPECT_GE(from, 60);
  EXPECT_LT(from, 300);
  auto s = testing::ReadJson(dir / "stopped/summary.json");
  EXPECT_EQ(s["status"], "finished");
  // The resumed workers ran only the steps after the checkpoint.
  EXPECT_EQ(s["step_time_breakdown"]["worker-0"]["steps"].get<int64_t>(), 300 - from);
  const std::string got = ReadBytes(dir / "stopped/final_params.bin");
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected) << "the resumed job's parameters differ from the uninterrupted run's";
}

TEST(ResumeTest, ACorruptNewestCheckpointFallsBackToThePreviousOne) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kSyntheticBsp);
  const std::vector<std::string> sets = {"training.steps=200"};
  const std::string expected = Uninterrupted(dir, dir / "job.yaml", sets);
  StartAndInterrupt(dir, dir / "job.yaml", sets, 60);

  // Damage server 1's newest checkpoint: one flipped byte in the middle.
  auto files = server::ListCheckpoints(dir / "stopped/checkpoints", 1);
  ASSERT_GE(files.size(), 2u);
  std::string bytes = ReadBytes(files[0].path);
  bytes[bytes.size() / 2] ^= 0x01;
  std::ofstream(files[0].path, std::ios::binary | std::ios::trunc) << bytes;

  auto r = RunGeodesic({"launch", "--resume", dir / "stopped"}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("digest mismatch"), std::string::npos) << r.output;
  auto plan = testing::ReadJson(dir / "stopped/resume.json");
  EXPECT_LT(plan["clock"].get<int64_t>(), files[0].clock);
  EXPECT_EQ(plan["refused"].size(), 1u);
  EXPECT_TRUE(ReadBytes(dir / "stopped/final_params.bin") == expected);
}

TEST(ResumeTest, NothingToResumeIsAClearError) {
  TempDir dir;
  std::filesystem::create_directories(dir / "run");
  testing::WriteText(dir / "job.yaml", kSyntheticBsp);
  testing::WriteText(dir / "run/job.yaml", kSyntheticBsp);
  auto r = RunGeodesic({"launch", "--resume", dir / "run", "--quiet"}, 60);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("no usable checkpoint of server 0"), std::string::npos) << r.output;
  auto none = RunGeodesic({"launch", "--quiet"}, 60);
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.output.find("needs a job file"), std::string::npos) << none.output;
}

TEST(ResumeTest, CheckpointOnRequest) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kSyntheticBsp);
  testing::Process launch({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--set", "training.steps=1000000",
                           "--set", "checkpoint.every_clocks=0", "--quiet"},
                          dir / "launch.log");
  ASSERT_TRUE(testing::WaitForFile(dir / "run/stats/worker-0.json", 60)) << testing::ReadText(dir / "launch.log");
  // Periodic checkpoints are off; each shard may have written its initial
  // one (so that it can restart in place) by now, depending on speed. That
  // one takes the clock the shard is at once all its chunks have values,
  // which on a loaded machine can be past 0 already.
  for (int server = 0; server < 2; ++server) {
    EXPECT_LE(server::ListCheckpoints(dir / "run/checkpoints", server).size(), 1u) << server;
    EXPECT_EQ(testing::ReadText(dir / ("run/logs/server-" + std::to_string(server) + ".log")).find("(periodic)"),
              std::string::npos)
        << server;
  }
  auto r = RunGeodesic({"checkpoint", dir / "run"}, 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("asked 2 server(s)"), std::string::npos) << r.output;
  // Each shard logs the checkpoint it wrote for the request.
  auto requested = [&](int server) {
    return testing::ReadText(dir / ("run/logs/server-" + std::to_string(server) + ".log"))
               .find("checkpoint (request) at clock") != std::string::npos;
  };
  for (int i = 0; i < 200 && !(requested(0) && requested(1)); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(requested(0)) << testing::ReadText(dir / "run/logs/server-0.log");
  EXPECT_TRUE(requested(1)) << testing::ReadText(dir / "run/logs/server-1.log");
  EXPECT_GE(NewestClock(dir / "run/checkpoints", 0), 0);
  EXPECT_GE(NewestClock(dir / "run/checkpoints", 1), 0);
  launch.Signal(SIGINT);
  EXPECT_EQ(launch.Wait(60), 130);
}

// A server shard killed with SIGKILL is restarted in place from its newest
// checkpoint; the workers wait, resend and continue, and the job finishes.
void ExpectShardRestartFinishes(int64_t bound) {
  SCOPED_TRACE("staleness bound " + std::to_string(bound));
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kSyntheticBsp);
  auto r = RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--set", "training.steps=4000", "--set",
                        "training.staleness_bound=" + std::to_string(bound), "--kill", "server:1@1.5", "--quiet"},
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto s = testing::ReadJson(dir / "run/summary.json");
  EXPECT_EQ(s["status"], "finished");
  ASSERT_EQ(s["recoveries"].size(), 1u) << s["recoveries"].dump();
  const auto& rec = s["recoveries"][0];
  EXPECT_EQ(rec["target"], "server-1");
  EXPECT_EQ(rec["exit"], "killed by SIGKILL");
  ASSERT_TRUE(rec.contains("seconds_to_first_update")) << rec.dump();
  EXPECT_LT(rec["seconds_to_first_update"].get<double>(), 30);
  const std::string log = testing::ReadText(rec["log"].get<std::string>());
  EXPECT_NE(log.find("recovered"), std::string::npos) << log;
  // Every worker ran every step, and the final parameters are finite.
  for (const char* w : {"worker-0", "worker-1", "worker-2"})
    EXPECT_EQ(s["step_time_breakdown"][w]["steps"].get<int64_t>(), 4000) << w;
  const std::string params = ReadBytes(dir / "run/final_params.bin");
  ASSERT_EQ(params.size(), 50000u * 4);
  const float* p = reinterpret_cast<const float*>(params.data());
  for (size_t i = 0; i < 50000; ++i) ASSERT_TRUE(std::isfinite(p[i])) << i;
}

// A coordinator killed with SIGKILL is restarted from its saved state; the
// members reconnect and the job finishes with every step run.
TEST(ResumeTest, AKilledCoordinatorRestartsFromItsSavedState) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kSyntheticBsp);
  auto r = RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--set", "training.steps=4000", "--set",
                        "training.staleness_bound=1", "--kill", "coordinator:0@1.5", "--quiet"},
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto s = testing::ReadJson(dir / "run/summary.json");
  EXPECT_EQ(s["status"], "finished");
  ASSERT_EQ(s["recoveries"].size(), 1u) << s["recoveries"].dump();
  EXPECT_EQ(s["recoveries"][0]["target"], "coordinator");
  ASSERT_TRUE(s["recoveries"][0].contains("seconds_to_first_status")) << s["recoveries"].dump();
  EXPECT_NE(testing::ReadText(s["recoveries"][0]["log"].get<std::string>()).find("continuing the job from"),
            std::string::npos);
  for (const char* w : {"worker-0", "worker-1", "worker-2"})
    EXPECT_EQ(s["step_time_breakdown"][w]["steps"].get<int64_t>(), 4000) << w;
  EXPECT_TRUE(std::filesystem::exists(dir / "run/final_params.bin"));
}

// Churn: with --restart-workers a killed worker is started again and
// rejoins at the live workers' clock with the current model; BSP does not
// wait for the clocks it missed, and the job finishes.
TEST(ResumeTest, AKilledWorkerRejoinsAtTheCurrentClock) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kSyntheticBsp);
  auto r = RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--set", "training.steps=4000", "--kill",
                        "worker:1@1.5", "--restart-workers", "--quiet"},
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto s = testing::ReadJson(dir / "run/summary.json");
  EXPECT_EQ(s["status"], "finished");
  ASSERT_EQ(s["recoveries"].size(), 1u) << s["recoveries"].dump();
  const auto& rec = s["recoveries"][0];
  EXPECT_EQ(rec["target"], "worker-1");
  ASSERT_TRUE(rec.contains("seconds_to_first_step")) << rec.dump();
  // The others ran every step; the restarted worker ran fewer (it skipped
  // the clocks it missed) but more than none, and finished.
  EXPECT_EQ(s["step_time_breakdown"]["worker-0"]["steps"].get<int64_t>(), 4000);
  EXPECT_EQ(s["step_time_breakdown"]["worker-2"]["steps"].get<int64_t>(), 4000);
  const int64_t rejoined = s["step_time_breakdown"]["worker-1"]["steps"].get<int64_t>();
  EXPECT_GT(rejoined, 0);
  EXPECT_LT(rejoined, 4000);
  const std::string log = testing::ReadText(rec["log"].get<std::string>());
  EXPECT_NE(log.find("done:"), std::string::npos) << log;
}

TEST(ResumeTest, AKilledShardRestartsFromItsCheckpointBsp) { ExpectShardRestartFinishes(0); }
TEST(ResumeTest, AKilledShardRestartsFromItsCheckpointAsync) { ExpectShardRestartFinishes(2); }

// The same with the CNN on Fashion-MNIST: data order, momentum and the
// learning-rate schedule all have to pick up where they stopped (slow: two
// training runs).
TEST(TrainingResumeTest, ResumedCnnJobMatchesTheUninterruptedOneToTheBit) {
  TempDir dir;
  const std::string example = ::geodesic::testing::SourcePath("examples/fashion_mnist.yaml");
  const std::vector<std::string> sets = {"training.steps=90",          "training.staleness_bound=0",
                                         "checkpoint.every_clocks=15", "eval.test_samples=500",
                                         "optimizer.schedule=cosine",  "seed=11"};
  const std::string expected = Uninterrupted(dir, example, sets);
  StartAndInterrupt(dir, example, sets, 30);
  auto r = RunGeodesic({"launch", "--resume", dir / "stopped", "--quiet"}, 600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto plan = testing::ReadJson(dir / "stopped/resume.json");
  EXPECT_GE(plan["clock"].get<int64_t>(), 30);
  EXPECT_LT(plan["clock"].get<int64_t>(), 90);
  const std::string got = ReadBytes(dir / "stopped/final_params.bin");
  ASSERT_FALSE(got.empty());
  EXPECT_TRUE(got == expected) << "the resumed CNN's parameters differ from the uninterrupted run's";
}

}  // namespace
}  // namespace geodesic

namespace geodesic {
namespace {

// `geodesic launch --resume` against checkpoints someone else changed in the
// run directory (the launcher reads them to plan, each shard to restore).
// Before: NaN values under a recomputed digest were taken (the job failed at
// its first pull), 1e30 values too (it "finished" at chance, exit 0), a
// symlink to /dev/zero was read until the kernel killed the launcher, and a
// FIFO blocked it. Now each is refused with the file's path and the reason,
// before any process starts.
TEST(ResumeTest, PoisonedCheckpointsAreRefusedBeforeAnythingStarts) {
  const char* job = R"(
name: poisoned
regions:
  a: {servers: 1, workers: 1}
model: {name: synthetic, synthetic_params: 1000}
training: {steps: 20, staleness_bound: 0}
wire: {chunk_bytes: 1024}
)";
  // A well-formed checkpoint of the job's one shard at clock 4, then `poison`.
  auto make = [&](const TempDir& dir, float value, bool nonregular_fifo, bool devzero) {
    testing::WriteText(dir / "job.yaml", job);
    std::filesystem::create_directories(dir / "run");
    testing::WriteText(dir / "run/job.yaml", job);
    const cluster::ChunkLayout layout(1000, 256);
    std::vector<uint32_t> owned;
    for (uint32_t c = 0; c < layout.num_chunks(); ++c) owned.push_back(c);
    server::ShardState s(server::ShardOptions{}, layout, owned);
    for (uint32_t c : owned) {
      std::vector<float> v(layout.Size(c), 0.25f);
      v[1] = value;
      s.Init(c, v.data());
    }
    wire::ShardCheckpoint ck = s.ToCheckpoint(4);
    ck.set_job("poisoned");
    ck.set_clock(4);
    auto path = server::WriteCheckpoint(dir / "run/checkpoints", ck, 3);
    ASSERT_TRUE(path.ok()) << path.status();
    if (nonregular_fifo || devzero) std::filesystem::remove(*path);
    if (nonregular_fifo) {
      ASSERT_EQ(::mkfifo(path->c_str(), 0600), 0);
    }
    if (devzero) std::filesystem::create_symlink("/dev/zero", *path);
  };
  struct Case {
    const char* name;
    float value;
    bool fifo, devzero;
    const char* reason;
  };
  for (const Case& c :
       {Case{"NaN", std::numeric_limits<float>::quiet_NaN(), false, false, "not finite"},
        Case{"1e30", 1e30f, false, false, "beyond +-1e18"}, Case{"FIFO", 0.5f, true, false, "is not a regular file"},
        Case{"/dev/zero", 0.5f, false, true, "is not a regular file"}}) {
    TempDir dir;
    make(dir, c.value, c.fifo, c.devzero);
    auto r = RunGeodesic({"launch", "--resume", dir / "run", "--quiet"}, 60);
    EXPECT_FALSE(r.timed_out) << c.name;
    EXPECT_EQ(r.exit_code, 1) << c.name << ": " << r.output;
    EXPECT_NE(r.output.find("no usable checkpoint of server 0"), std::string::npos) << c.name << ": " << r.output;
    EXPECT_NE(r.output.find(server::CheckpointPath(dir / "run/checkpoints", 0, 4)), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.reason), std::string::npos) << c.name << ": " << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir / "run/logs/server-0.log")) << c.name;
  }
}

}  // namespace
}  // namespace geodesic
