// Elastic workers (docs/deploy.md "Elastic workers"), with real processes
// over loopback: a worker killed and restarted, two that join late and one
// stopped with SIGTERM (it leaves), in one run. Checked from the summary:
// every data unit was taken exactly once by every chunk of every shard (no
// sample lost or counted twice within its epoch), every acknowledged push
// was taken or answered as a unit another worker had delivered, and the
// membership timeline says who was a member when.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/harness.h"
#include "tests/test_paths.h"

namespace geodesic {
namespace {

using testing::RunGeodesic;
using testing::TempDir;

const std::string kElastic = ::geodesic::testing::SourcePath("examples/elastic.yaml");

// us-east keeps worker ids 0-3 and eu-west 4-7; 0, 1, 4 and 5 start.
std::vector<std::string> ChurnArgs(const TempDir& dir, double scale) {
  auto at = [scale](double s) { return std::to_string(s * scale); };
  return {"launch",
          kElastic,
          "--run-dir",
          dir / "run",
          "--quiet",
          "--no-dashboard",
          "--restart-workers",
          "--set",
          "membership.heartbeat_ms=200",
          "--set",
          "membership.lease_ms=1500",
          "--kill",
          "worker:1@" + at(2),  // SIGKILL: a pod deleted; it comes back
          "--join",
          "worker:2@" + at(3),
          "--join",
          "worker:6@" + at(4),
          "--kill",
          "worker:4@" + at(6) + ":TERM"};  // a scale-down: it leaves
}

// What the summary must show whatever the accuracy.
void ExpectEveryUnitTakenOnce(const nlohmann::json& s) {
  ASSERT_EQ(s["status"], "finished") << s.dump(2);
  ASSERT_TRUE(s.contains("elastic")) << s.dump(2);
  const nlohmann::json& e = s["elastic"];
  const uint64_t units = e["units_total"].get<uint64_t>();
  EXPECT_GT(units, 0u);
  EXPECT_EQ(e["units_finished"], units) << e.dump(2);
  ASSERT_EQ(e["shards"].size(), 2u) << e.dump(2);
  for (const auto& [name, shard] : e["shards"].items())
    EXPECT_EQ(shard["units_complete"], units) << name << ": " << e.dump(2);
  // The cnn's 12 chunks each took every unit once: nothing lost, nothing twice.
  EXPECT_EQ(s["updates_taken"].get<uint64_t>(), units * 12) << s["push_accounting"].dump(2);
  // Every acknowledged chunk was taken, or answered DUPLICATE because its
  // chunk had the unit from another worker (unit_duplicates). Only the
  // killed worker may have had pushes taken that it never heard of (in
  // flight at its death); every other worker, the one stopped with SIGTERM
  // included, left with nothing unanswered.
  const uint64_t acked = s["pushes_acknowledged"].get<uint64_t>();
  const uint64_t answered = s["updates_taken"].get<uint64_t>() + e["unit_duplicates"].get<uint64_t>();
  const uint64_t in_flight = s["push_accounting"]["in_flight_at_exit"].get<uint64_t>();
  EXPECT_GE(answered, acked) << s["push_accounting"].dump(2);
  EXPECT_LE(answered, acked + in_flight) << s["push_accounting"].dump(2);
  for (const auto& [id, w] : s["push_accounting"]["workers"].items()) {
    if (id != "1") {
      EXPECT_EQ(w["in_flight_at_exit"], 0) << id << ": " << w.dump();
    }
  }
  // The timeline: who was a member when.
  std::map<int, std::vector<std::string>> by_worker;
  for (const auto& m : e["membership"]) by_worker[m["worker"].get<int>()].push_back(m["what"]);
  auto has = [&](int w, const std::string& what) {
    const auto& v = by_worker[w];
    return std::find(v.begin(), v.end(), what) != v.end();
  };
  EXPECT_TRUE(has(1, "died") && has(1, "rejoined")) << e["membership"].dump(2);
  EXPECT_TRUE(has(2, "joined") && has(6, "joined")) << e["membership"].dump(2);
  EXPECT_TRUE(has(4, "left") && !has(4, "done")) << e["membership"].dump(2);
  EXPECT_FALSE(by_worker.count(3) || by_worker.count(7)) << "ids never started joined";
  // Late workers trained: they had a share of the data.
  for (const char* w : {"2", "6"}) {
    ASSERT_TRUE(s["push_accounting"]["workers"].contains(w)) << s["push_accounting"].dump(2);
    EXPECT_GT(s["push_accounting"]["workers"][w]["taken"].get<uint64_t>(), 0u) << w << e["membership"].dump(2);
  }
}

TEST(ElasticTest, ShortRunTakesEveryUnitOnceThroughDeathsJoinsAndLeaves) {
  TempDir dir;
  std::vector<std::string> args = ChurnArgs(dir, 0.75);
  for (const char* s : {"training.epochs=0.6", "eval.snapshot_every_s=600"}) args.insert(args.end(), {"--set", s});
  auto r = RunGeodesic(args, 110);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto s = testing::ReadJson(dir / "run/summary.json");
  ASSERT_TRUE(s.is_object()) << r.output;
  ExpectEveryUnitTakenOnce(s);
}

TEST(ElasticTest, JoinIsRefusedWhereItCannotJoin) {
  TempDir dir;
  const std::string plain = ::geodesic::testing::SourcePath("examples/fashion_mnist.yaml");
  auto r = RunGeodesic({"launch", plain, "--run-dir", dir / "a", "--join", "worker:1@3"}, 30);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("not elastic"), std::string::npos) << r.output;
  r = RunGeodesic({"launch", kElastic, "--run-dir", dir / "b", "--join", "worker:0@3"}, 30);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("not one of the ids kept for workers that join later"), std::string::npos) << r.output;
  r = RunGeodesic({"launch", kElastic, "--run-dir", dir / "c", "--join", "worker:2"}, 30);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("expected worker:ID@SECONDS"), std::string::npos) << r.output;
}

// A pod deleted while its worker starts (here: still waiting for a
// coordinator that never answers) is a departure in an elastic job, exit
// status 0; in a job that is not elastic it is a stop, 130.
TEST(ElasticTest, AWorkerStoppedWhileStartingLeavesWithStatusZero) {
  TempDir dir;
  const std::string plain = ::geodesic::testing::SourcePath("examples/fashion_mnist.yaml");
  for (const auto& [job, expected] : {std::pair{kElastic, 0}, std::pair{plain, 130}}) {
    const std::string log = dir / ("worker-" + std::to_string(expected) + ".log");
    testing::Process w({"worker", "--job", job, "--id", "1", "--coordinator", "tcp://127.0.0.1:1"}, log);
    // Bounded: the worker names its device first thing in Run.
    for (int i = 0; i < 300 && testing::ReadText(log).find("device:") == std::string::npos; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_NE(testing::ReadText(log).find("device:"), std::string::npos) << testing::ReadText(log);
    w.Signal(SIGTERM);
    EXPECT_EQ(w.Wait(30), expected) << job << "\n" << testing::ReadText(log);
    if (expected == 0) {
      EXPECT_NE(testing::ReadText(log).find("stopped while starting"), std::string::npos);
    }
  }
}

// The same churn through the whole job, which must still reach its target.
TEST(TrainingElasticTest, ReachesTheTargetWhileWorkersDieJoinAndLeave) {
  TempDir dir;
  std::vector<std::string> args = ChurnArgs(dir, 2.0);
  args.insert(args.end(), {"--set", "eval.snapshot_every_s=20"});  // fewer snapshots to evaluate at the end
  auto r = RunGeodesic(args, 540);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto s = testing::ReadJson(dir / "run/summary.json");
  ASSERT_TRUE(s.is_object()) << r.output;
  ExpectEveryUnitTakenOnce(s);
  nlohmann::json report = s["elastic"];
  report.erase("shards");
  for (const char* k : {"test_accuracy", "wall_seconds", "pushes_acknowledged", "updates_taken"}) report[k] = s[k];
  std::cout << "elastic report: " << report.dump(2) << std::endl;
  ASSERT_TRUE(s["test_accuracy"].is_number()) << s.dump(2);
  EXPECT_GE(s["test_accuracy"].get<double>(), 0.88) << s["elastic"]["membership"].dump(2);
}

}  // namespace
}  // namespace geodesic
