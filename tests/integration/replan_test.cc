// Re-planning in a running job (wan.replan; docs/planner.md "In a running
// job"): a drift injected at a known clock makes the coordinator move chunks
// between live shards behind a clock barrier. The job must finish with every
// push accounted for, the chunks must really have changed owner, and (BSP)
// the final parameters must equal, bit for bit, those of the same job run
// without a migration: no update lost or applied twice.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "tests/integration/harness.h"

namespace geodesic {
namespace {

using testing::RunGeodesic;
using testing::TempDir;

// Three regions with a shard and a worker each, equal links. At clock 60
// the coordinator takes a -> b to have fallen to 20 Mbit/s, which makes
// both "b workers <-> a servers" (their pulls) and "a workers <-> b servers"
// (their pushes) slow, so the planner moves chunks from shards 0 and 1 to
// shard 2. (With two regions no bandwidth drift changes the best placement:
// every cross-region pair uses both directions.)
const char* kReplanJob = R"(
name: replan
seed: 11
regions:
  a: {servers: 1, workers: 1}
  b: {servers: 1, workers: 1}
  c: {servers: 1, workers: 1}
model: {name: synthetic, synthetic_params: 50000}
training: {steps: 200, staleness_bound: 0}
optimizer: {name: sgd, lr: 0.05, momentum: 0.9, schedule: cosine}
wire: {chunk_bytes: 16384}
membership: {heartbeat_ms: 50, lease_ms: 5000, report_after_s: 2}
checkpoint: {every_clocks: 0}
wan:
  emulation: proxy
  replan: true
  replan_every_s: 0
  replan_min_samples: 1000000
  links:
    - {regions: [a, b], rtt_ms: 20, bandwidth_mbit: 200}
    - {regions: [a, c], rtt_ms: 20, bandwidth_mbit: 200}
    - {regions: [b, c], rtt_ms: 20, bandwidth_mbit: 200}
)";

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

nlohmann::json Launch(const TempDir& dir, const std::string& name, const std::vector<std::string>& sets) {
  std::vector<std::string> args = {"launch", dir / "job.yaml", "--run-dir", dir / name, "--quiet"};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  auto r = RunGeodesic(args, 240);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto s = testing::ReadJson(dir / (name + "/summary.json"));
  EXPECT_TRUE(s.is_object()) << r.output;
  if (!s.is_object()) return nlohmann::json::object();
  EXPECT_EQ(s["status"], "finished") << s.dump(2);
  return s;
}

int64_t SumOver(const std::string& stats_dir, const std::string& prefix, int n, const std::string& key) {
  int64_t sum = 0;
  for (int i = 0; i < n; ++i) {
    auto j = testing::ReadJson(stats_dir + "/" + prefix + (n == 1 && prefix.back() != '-' ? "" : std::to_string(i)) +
                               ".json");
    if (j.is_object() && j.contains(key)) sum += j[key].get<int64_t>();
  }
  return sum;
}

// Checks the one migration the injected drift caused, and returns how many chunks moved.
size_t ExpectOneMigration(const TempDir& dir, const std::string& name, const nlohmann::json& s) {
  EXPECT_TRUE(s.contains("replans")) << s.dump(2);
  if (!s.contains("replans") || s["replans"].size() != 1u) {
    ADD_FAILURE() << "expected one re-plan: " << s.dump(2);
    return 0;
  }
  const auto& r = s["replans"][0];
  const size_t moved = r["moved_chunks"].get<size_t>();
  EXPECT_GT(moved, 0u) << r.dump(2);
  EXPECT_GE(r["clock"].get<int64_t>(), 60) << r.dump(2);
  EXPECT_LT(r["clock"].get<int64_t>(), 199) << r.dump(2);
  EXPECT_LT(r["predicted_step_ms_after"].get<double>(), r["predicted_step_ms_before"].get<double>()) << r.dump(2);
  EXPECT_NE(r["reason"].get<std::string>().find("injected"), std::string::npos) << r.dump(2);
  EXPECT_EQ(r["shard_map_version"].get<uint64_t>(), 2u) << r.dump(2);
  for (const auto& mv : r["moves"]) EXPECT_NE(mv["from"], mv["to"]);
  // The shards did move them: sent by the sources, taken by the destinations.
  const std::string stats = dir / (name + "/stats");
  EXPECT_EQ(SumOver(stats, "server-", 3, "migration_chunks_sent"), static_cast<int64_t>(moved));
  EXPECT_EQ(SumOver(stats, "server-", 3, "migration_chunks_adopted"), static_cast<int64_t>(moved));
  // Every worker waited at the barrier (twice if the barrier was moved out
  // while it waited) and switched maps.
  for (int w = 0; w < 3; ++w) EXPECT_GE(SumOver(stats, "worker-" + std::to_string(w), 1, "migration_barriers"), 1);
  EXPECT_EQ(SumOver(stats, "worker-", 3, "chunks_rerouted"), static_cast<int64_t>(3 * moved));
  // Every worker pushed all 200 clocks; each push taken exactly once.
  testing::ExpectEveryPushAccountedFor(s, {});
  std::cerr << "re-plan: " << moved << " chunk(s) at clock " << r["clock"] << ", barrier " << r["barrier_ms"]
            << " ms, transfer " << r["transfer_ms"] << " ms\n";
  return moved;
}

TEST(ReplanTest, InjectedDriftMovesChunksBetweenLiveShards) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kReplanJob);
  auto s =
      Launch(dir, "moved", {"wan.replan_at_clock=60", "wan.replan_from=a", "wan.replan_to=b", "wan.replan_mbit=20"});
  ExpectOneMigration(dir, "moved", s);
}

TEST(ReplanTest, JobWithoutDriftNeverMigrates) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kReplanJob);
  auto s = Launch(dir, "still", {});
  ASSERT_TRUE(s.contains("replans")) << s.dump(2);
  EXPECT_EQ(s["replans"].size(), 0u) << s.dump(2);
  testing::ExpectEveryPushAccountedFor(s, {});
}

// Slow (two launches): the strongest check that a migration loses and
// doubles nothing. BSP sums each round in worker order, so the same job
// with and without a migration must end with the same bits.
TEST(TrainingReplanTest, MigratedBspJobEndsWithTheSameBitsAsAnUnmovedOne) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kReplanJob);
  auto straight = Launch(dir, "straight", {"wan.replan=false"});
  auto moved =
      Launch(dir, "moved", {"wan.replan_at_clock=60", "wan.replan_from=a", "wan.replan_to=b", "wan.replan_mbit=20"});
  ASSERT_GT(ExpectOneMigration(dir, "moved", moved), 0u);
  const std::string a = ReadBytes(dir / "straight/final_params.bin"), b = ReadBytes(dir / "moved/final_params.bin");
  ASSERT_EQ(a.size(), 50000u * 4);
  EXPECT_TRUE(a == b) << "the migrated job's final parameters differ from the unmoved job's";
}

}  // namespace
}  // namespace geodesic
