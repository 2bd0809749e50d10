// Replicated shards (replication.backups: 1), end to end: a primary killed
// with SIGKILL is replaced by its backup, the workers redirect, the job
// finishes, and no acknowledged update is lost or applied twice. BSP makes
// this exact: the killed run ends with the same parameters, bit for bit, as
// the same replicated job run without a kill.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "tests/integration/harness.h"

namespace geodesic {
namespace {

using testing::RunGeodesic;
using testing::TempDir;

const char* kReplicated = R"(
name: replicated
seed: 11
regions:
  a: {servers: 1, workers: 1}
  b: {servers: 1, workers: 2}
model: {name: synthetic, synthetic_params: 50000}
training: {steps: 3000, staleness_bound: 0}
optimizer: {name: sgd, lr: 0.05, momentum: 0.9, schedule: cosine}
wire: {chunk_bytes: 16384}
membership: {heartbeat_ms: 100, lease_ms: 600}
replication: {backups: 1}
checkpoint: {every_clocks: 0}
)";

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

nlohmann::json Launch(const TempDir& dir, const std::string& run, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"launch", dir / "job.yaml", "--run-dir", dir / run, "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = RunGeodesic(args, 110);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return testing::ReadJson(dir / (run + "/summary.json"));
}

void ExpectFailover(const nlohmann::json& s, const std::string& target) {
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["status"], "finished");
  ASSERT_EQ(s["recoveries"].size(), 1u) << s["recoveries"].dump();
  const auto& rec = s["recoveries"][0];
  EXPECT_EQ(rec["target"], target);
  EXPECT_EQ(rec["exit"], "killed by SIGKILL");
  EXPECT_EQ(rec["failover"], true);
  ASSERT_TRUE(rec.contains("seconds_to_first_update")) << rec.dump();
  EXPECT_LT(rec["seconds_to_first_update"].get<double>(), 10);
  EXPECT_EQ(s["replication"]["promoted"].size(), 1u) << s["replication"].dump();
  // Zero loss, nothing twice: every chunk a worker saw acknowledged is one
  // the final serving shards took, and they took nothing else.
  EXPECT_GT(s["pushes_acknowledged"].get<uint64_t>(), 0u);
  EXPECT_EQ(s["pushes_acknowledged"], s["updates_taken"]) << s.dump();
  testing::ExpectEveryPushAccountedFor(s, {});
  for (const char* w : {"worker-0", "worker-1", "worker-2"})
    EXPECT_EQ(s["step_time_breakdown"][w]["steps"].get<int64_t>(), 3000) << w;
}

TEST(ReplicationTest, BspFailoverLosesNothingAndMatchesAnUnkilledRun) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kReplicated);
  auto straight = Launch(dir, "straight", {});
  ASSERT_TRUE(straight.is_object());
  EXPECT_EQ(straight["recoveries"].size(), 0u);
  EXPECT_EQ(straight["pushes_acknowledged"], straight["updates_taken"]) << straight.dump();
  auto killed = Launch(dir, "killed", {"--kill", "server:0@1.5"});
  ExpectFailover(killed, "server-0");
  const std::string a = ReadBytes(dir / "straight/final_params.bin"), b = ReadBytes(dir / "killed/final_params.bin");
  ASSERT_EQ(a.size(), 50000 * sizeof(float));
  EXPECT_TRUE(a == b) << "the failover changed the BSP result";
  std::string log = testing::ReadText(dir / "killed/logs/backup-0.log");
  EXPECT_NE(log.find("promoted"), std::string::npos) << log;
  log = testing::ReadText(dir / "killed/logs/worker-1.log");
  EXPECT_NE(log.find("its backup was promoted"), std::string::npos) << log;
}

TEST(ReplicationTest, AsyncFailoverLosesNothing) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kReplicated);
  auto s = Launch(dir, "run", {"--set", "training.staleness_bound=2", "--kill", "server:1@1.5"});
  ExpectFailover(s, "server-1");
  const std::string params = ReadBytes(dir / "run/final_params.bin");
  ASSERT_EQ(params.size(), 50000 * sizeof(float));
  const auto* v = reinterpret_cast<const float*>(params.data());
  for (size_t i = 0; i < 50000; ++i) ASSERT_TRUE(std::isfinite(v[i])) << i;
}

// A backup that dies leaves its primary to acknowledge alone (degraded)
// after holding acks for one lease: training goes on, nothing is lost.
TEST(ReplicationTest, DeadBackupDegradesItsPrimaryAndTrainingGoesOn) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kReplicated);
  auto s = Launch(dir, "run", {"--set", "training.staleness_bound=2", "--kill", "backup:0@1.5"});
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["status"], "finished");
  EXPECT_EQ(s["recoveries"].size(), 0u);
  EXPECT_EQ(s["replication"]["promoted"].size(), 0u);
  EXPECT_EQ(s["pushes_acknowledged"], s["updates_taken"]) << s.dump();
  testing::ExpectEveryPushAccountedFor(s, {});
  for (const char* w : {"worker-0", "worker-1", "worker-2"})
    EXPECT_EQ(s["step_time_breakdown"][w]["steps"].get<int64_t>(), 3000) << w;
  auto stats = testing::ReadJson(dir / "run/stats/server-0.json");
  EXPECT_EQ(stats["replication_degraded"], true) << stats.dump();
  // Server 1 goes on alone only if the coordinator declared its backup dead
  // too (a 600 ms lease can run out on a loaded machine), never on its own.
  const bool backup1_declared_dead =
      testing::ReadText(dir / "run/logs/coordinator.log").find("backup of server 1 lease expired") != std::string::npos;
  EXPECT_EQ(testing::ReadJson(dir / "run/stats/server-1.json")["replication_degraded"], backup1_declared_dead);
  const std::string log = testing::ReadText(dir / "run/logs/server-0.log");
  EXPECT_NE(log.find("replication to"), std::string::npos) << log;
  EXPECT_NE(log.find("without a backup (degraded)"), std::string::npos) << log;
}

// A primary that pauses past its lease (SIGSTOP) is replaced; when it runs
// again it sees its shard served elsewhere and exits without acknowledging
// anything more: still nothing lost.
TEST(ReplicationTest, PausedPrimaryIsFencedAndLosesNothing) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kReplicated);
  auto s =
      Launch(dir, "run",
             {"--set", "training.staleness_bound=2", "--kill", "server:0@1.5:STOP", "--kill", "server:0@3.5:CONT"});
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["status"], "finished");
  ASSERT_EQ(s["recoveries"].size(), 1u) << s["recoveries"].dump();
  EXPECT_EQ(s["recoveries"][0]["exit"], "exited 1");
  EXPECT_LT(s["recoveries"][0]["seconds_to_first_update"].get<double>(), 10);  // from the STOP
  EXPECT_EQ(s["pushes_acknowledged"], s["updates_taken"]) << s.dump();
  const std::string log = testing::ReadText(dir / "run/logs/server-0.log");
  EXPECT_NE(log.find("fenced"), std::string::npos) << log;
}

// Replication across an emulated WAN link that is cut. Region a has the
// coordinator, shard 0's primary and shard 1's backup; region b the other
// two. Cut apart for longer than a lease: shard 1's primary (cut off from
// the coordinator) is replaced by its backup in a and fenced when the link
// heals; shard 0's backup (cut off) is declared dead, its primary then
// acknowledges alone, and the backup, which missed those updates, is never
// promoted: it is refused when it comes back and exits. Nothing
// acknowledged is lost, and no process acts on its own judgement of who is
// dead (the coordinator decides).
TEST(ReplicationTest, ACutBetweenPrimaryAndBackupLosesNothing) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", std::string(kReplicated) + R"(wan:
  emulation: proxy
  probe: false
  links:
    - {regions: [a, b], rtt_ms: 2}
)");
  auto s =
      Launch(dir, "run", {"--set", "training.steps=6000", "--set", "membership.lease_ms=1000", "--cut", "a:b@1.5+3"});
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["status"], "finished") << s.dump(2);
  EXPECT_EQ(s["replication"]["promoted"], nlohmann::json::array({1})) << s["replication"].dump();
  const std::string primary0 = testing::ReadText(dir / "run/logs/server-0.log");
  EXPECT_NE(primary0.find("the coordinator declared the backup dead"), std::string::npos) << primary0;
  const std::string backup0 = testing::ReadText(dir / "run/logs/backup-0.log");
  EXPECT_NE(backup0.find("retired this backup"), std::string::npos) << backup0;
  EXPECT_EQ(backup0.find("promoted"), std::string::npos) << backup0;
  const std::string primary1 = testing::ReadText(dir / "run/logs/server-1.log");
  EXPECT_NE(primary1.find("stopping"), std::string::npos) << primary1;
  testing::ExpectEveryPushAccountedFor(s, {});
}

}  // namespace
}  // namespace geodesic
