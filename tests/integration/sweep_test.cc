// `geodesic sweep` end to end (bench/sweep.h): real launches, one table row
// per run, resume after an interrupted sweep, identical BSP runs giving
// identical parameters, the per-run time limit, and bad sweeps refused
// before anything starts. The training ones are labelled slow.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/integration/harness.h"

namespace geodesic {
namespace {

using testing::RunGeodesic;
using testing::TempDir;

// Two regions, an MLP on Fashion-MNIST, 60 steps per worker: a few seconds
// per launch.
const char* kJob = R"(
name: sweepjob
regions:
  a: {servers: 1, workers: 1}
  b: {servers: 1, workers: 1}
model: {name: mlp, mlp_hidden: [64]}
training: {steps: 60, staleness_bound: 0}
eval: {snapshot_every_s: 1}
membership: {heartbeat_ms: 100, lease_ms: 1000}
)";

// One worker and one shard of a synthetic model: seconds to start, no data.
std::string SyntheticJob(int64_t steps) {
  return "name: synth\nregions:\n  a: {servers: 1, workers: 1}\nmodel: {name: synthetic, synthetic_params: 10000}\n"
         "training: {steps: " +
         std::to_string(steps) + "}\nmembership: {heartbeat_ms: 100, lease_ms: 1000}\n";
}

// Lines of `path` (0 if missing).
int Lines(const std::string& path) {
  std::ifstream f(path);
  int n = 0;
  for (std::string l; std::getline(f, l);) ++n;
  return n;
}

std::vector<nlohmann::json> Rows(const std::string& out) {
  auto j = testing::ReadJson(out + "/results.json");
  return j.is_array() ? std::vector<nlohmann::json>(j.begin(), j.end()) : std::vector<nlohmann::json>{};
}

TEST(TrainingSweepTest, RowsPerRunResumeAndIdenticalBspRuns) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kJob);
  // The snapshot period changes no arithmetic: the two BSP runs of each
  // bound must end with the same parameters, bit for bit.
  testing::WriteText(dir / "sweep.yaml",
                     "job: job.yaml\naxes:\n  training.staleness_bound: [0, 2]\n  eval.snapshot_every_s: [1, 2]\n"
                     "limit_s: 240\n");
  const std::string out = dir / "out";
  {
    // Interrupted once two runs are in: their rows stay, the third's not.
    testing::Process sweep({"sweep", dir / "sweep.yaml", "--out", out}, dir / "first.log");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
    while (Lines(out + "/results.csv") < 3 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    sweep.Signal(SIGINT);
    EXPECT_EQ(sweep.Wait(120), 130) << testing::ReadText(dir / "first.log");
  }
  const size_t kept = Rows(out).size();
  ASSERT_GE(kept, 2u) << testing::ReadText(dir / "first.log");
  ASSERT_LT(kept, 4u);
  const auto first_row_time =
      std::filesystem::last_write_time(out + "/runs/000-staleness_bound-0.snapshot_every_s-1/row.json");

  auto r = RunGeodesic({"sweep", dir / "sweep.yaml", "--out", out}, 60);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--resume continues it"), std::string::npos) << r.output;

  r = RunGeodesic({"sweep", dir / "sweep.yaml", "--out", out, "--resume"}, 400);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(std::to_string(kept) + " of 4 runs kept"), std::string::npos) << r.output;
  EXPECT_EQ(std::filesystem::last_write_time(out + "/runs/000-staleness_bound-0.snapshot_every_s-1/row.json"),
            first_row_time);

  const auto rows = Rows(out);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(Lines(out + "/results.csv"), 5);
  const std::string header = testing::ReadText(out + "/results.csv").substr(0, 200);
  EXPECT_EQ(header.rfind("index,run,training.staleness_bound,eval.snapshot_every_s,status,test_accuracy", 0), 0u)
      << header;
  for (const auto& row : rows) {
    SCOPED_TRACE(row["run"].get<std::string>());
    EXPECT_EQ(row["status"], "finished");
    EXPECT_GT(row["test_accuracy"].get<double>(), 0.5);
    EXPECT_EQ(row["samples"].get<int64_t>(), 2 * 60 * 64);
    EXPECT_GT(row["bytes_per_sample"].get<double>(), 1000);
    EXPECT_GT(row["compute_share"].get<double>(), 0);
    EXPECT_GT(row["compute_utilization"].get<double>(), 0);
    EXPECT_LE(row["compute_utilization"].get<double>(), 1);
    EXPECT_GE(row["curve"].size(), 1u);
    EXPECT_EQ(row["params_sha256"].get<std::string>().size(), 64u);
    // Staleness counts updates applied between a worker's read and its
    // push's application: none under BSP, some when asynchronous (how many
    // depends on timing and prefetching, so no exact bound is checked).
    const int bound = std::stoi(row["axes"]["training.staleness_bound"].get<std::string>());
    if (bound == 0) {
      EXPECT_EQ(row["staleness_max"].get<int64_t>(), 0);
    } else {
      EXPECT_GE(row["staleness_max"].get<int64_t>(), 1);
    }
    EXPECT_LE(row["staleness_mean"].get<double>(), row["staleness_max"].get<double>());
  }
  EXPECT_EQ(rows[0]["params_sha256"], rows[1]["params_sha256"]);
  EXPECT_EQ(rows[0]["test_accuracy"], rows[1]["test_accuracy"]);
  EXPECT_GT(Lines(out + "/curves.csv"), 4);
  EXPECT_NE(testing::ReadText(out + "/results.md").find("| 3 | 2 | 2 | finished |"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(out + "/accuracy_vs_time.png")) << testing::ReadText(out + "/plot.log");
  EXPECT_TRUE(std::filesystem::exists(out + "/accuracy_vs_bytes.png"));
}

TEST(SweepLaunchTest, RunPastItsLimitIsStoppedAndRecorded) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", SyntheticJob(100000000));
  testing::WriteText(dir / "sweep.yaml", "job: job.yaml\nlimit_s: 4\n");
  auto r = RunGeodesic({"sweep", dir / "sweep.yaml", "--out", dir / "out", "--no-plot"}, 120);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("1 of 1 runs did not finish"), std::string::npos) << r.output;
  const auto rows = Rows(dir / "out");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["status"], "timed_out");
  EXPECT_NE(rows[0]["failure"].get<std::string>().find("limit_s of 4 s"), std::string::npos);
  // Nothing of the job is left running.
  // (The bracket keeps pgrep from matching the shell that runs it.)
  EXPECT_EQ(std::system(("! pgrep -f -- '[/]" + dir.path().substr(1) + "/out/runs' > /dev/null").c_str()), 0);
}

TEST(SweepLaunchTest, ResumeRerunsDamagedRowsAndSurvivesDamagedSummaries) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", SyntheticJob(20));
  testing::WriteText(dir / "sweep.yaml", "job: job.yaml\naxes:\n  training.staleness_bound: [0, 1]\nlimit_s: 60\n");
  const std::string out = dir / "out";
  auto r = RunGeodesic({"sweep", dir / "sweep.yaml", "--out", out, "--no-plot"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // A row cut short, and a summary of another shape.
  testing::WriteText(out + "/runs/000-staleness_bound-0/row.json", "{\"status\": \"fin");
  testing::WriteText(out + "/runs/001-staleness_bound-1/summary.json",
                     R"({"accuracy_curve": [[1]], "step_time_breakdown": {"worker-0": 3}, "links": 7})");
  r = RunGeodesic({"sweep", dir / "sweep.yaml", "--out", out, "--no-plot", "--resume"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1 of 2 runs kept"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[1/2] training.staleness_bound=0: running"), std::string::npos) << r.output;
  const auto rows = Rows(out);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["status"], "finished");
  EXPECT_TRUE(rows[0]["wall_seconds"].is_number()) << rows[0];
  EXPECT_EQ(rows[1]["status"], "finished");
  EXPECT_NE(rows[1]["failure"].get<std::string>().find("summary.json unreadable"), std::string::npos) << rows[1];
  EXPECT_TRUE(rows[1]["samples"].is_null());
}

TEST(SweepLaunchTest, BadSweepIsRefusedBeforeAnythingStarts) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kJob);
  testing::WriteText(dir / "sweep.yaml",
                     "job: job.yaml\naxes:\n  compression.push: [none, int3]\n  training.staleness_bound: [0]\n");
  auto r = RunGeodesic({"sweep", dir / "sweep.yaml", "--out", dir / "out"}, 60);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("run 001-push-int3.staleness_bound-0 (compression.push=int3, training.staleness_bound=0)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("compression.push"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
  testing::WriteText(dir / "typo.yaml", "job: job.yaml\naxes:\n  training.stalenes_bound: [0, 1]\n");
  r = RunGeodesic({"sweep", dir / "typo.yaml", "--out", dir / "out"}, 60);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("training.stalenes_bound: unknown key (did you mean 'staleness_bound'?)"), std::string::npos)
      << r.output;
  // --dry-run lists the runs and starts nothing.
  testing::WriteText(dir / "ok.yaml", "job: job.yaml\naxes:\n  training.staleness_bound: [0, 1]\n");
  r = RunGeodesic({"sweep", dir / "ok.yaml", "--out", dir / "out", "--dry-run"}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("001-staleness_bound-1  training.staleness_bound=1"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
}

}  // namespace
}  // namespace geodesic
