// Federated rounds end to end: `geodesic launch` on a federated job, with
// the workers as client executors and the shards averaging each round.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "tests/integration/harness.h"
#include "worker/federated/privacy.h"

namespace geodesic {
namespace {

using testing::RunGeodesic;
using testing::TempDir;

// 40 clients with label skew, 8 a round over 2 executors, 10 rounds.
const char* kFederatedJob = R"(
name: fed
seed: 3
regions:
  a: {servers: 1, workers: 1}
  b: {servers: 1, workers: 1}
model: {name: mlp, mlp_hidden: [64]}
data: {partition: "dirichlet:0.5", batch_size: 32}
training: {staleness_bound: 0}
federated: {clients: 40, per_round: 8, rounds: 10, local_epochs: 1, local_lr: 0.05}
eval: {test_samples: 2000}
membership: {heartbeat_ms: 100, lease_ms: 2000}
)";

nlohmann::json Launch(const TempDir& dir, const std::string& run, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"launch", dir / "job.yaml", "--run-dir", dir / run, "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = RunGeodesic(args, 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return testing::ReadJson(dir / (run + "/summary.json"));
}

// Two runs of a seeded FedAvg job end with the same parameters, bit for
// bit, trained on the split `geodesic partition` shows.
TEST(FederatedTest, FedAvgRoundsLearnAndRepeatBitForBit) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kFederatedJob);
  auto a = Launch(dir, "a"), b = Launch(dir, "b");
  ASSERT_TRUE(a["federated"].is_object()) << a.dump();
  EXPECT_EQ(a["federated"]["clients_trained"], 80);  // 10 rounds x 8 clients
  EXPECT_EQ(a["federated"]["clients_dropped"], 0);
  EXPECT_GT(a["test_accuracy"].get<double>(), 0.6);
  EXPECT_EQ(testing::ReadText(dir / "a/final_params.bin"), testing::ReadText(dir / "b/final_params.bin"));
  auto shown = RunGeodesic({"partition", dir / "job.yaml", "--json"}, 60);
  ASSERT_EQ(shown.exit_code, 0) << shown.output;
  EXPECT_NE(shown.output.find(a["partition"]["digest"].get<std::string>()), std::string::npos) << shown.output;
  EXPECT_NE(shown.output.find("\"spec\": \"dirichlet:0.5\""), std::string::npos);
  // Another seed, another model.
  auto c = Launch(dir, "c", {"--set", "seed=4"});
  EXPECT_NE(testing::ReadText(dir / "a/final_params.bin"), testing::ReadText(dir / "c/final_params.bin"));
}

// Clients that drop out mid-round are counted and the rounds go on with
// the others.
TEST(FederatedTest, DropoutsAreCountedAndRoundsGoOn) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kFederatedJob);
  auto s = Launch(dir, "run", {"--set", "federated.dropout=0.3", "--set", "federated.rounds=6"});
  ASSERT_TRUE(s["federated"].is_object()) << s.dump();
  const int64_t trained = s["federated"]["clients_trained"], dropped = s["federated"]["clients_dropped"];
  EXPECT_EQ(trained + dropped, 6 * 8);
  EXPECT_GT(dropped, 0);
  EXPECT_GT(trained, 0);
  EXPECT_EQ(s["status"], "finished");
  // The per-round table: every round's counts add up, every round has the
  // test accuracy of the model after it, and rounds.csv holds the same.
  const nlohmann::json& rounds = s["federated"]["rounds"];
  ASSERT_EQ(rounds.size(), 6u) << s["federated"].dump();
  int64_t participants = 0;
  for (size_t i = 0; i < rounds.size(); ++i) {
    const nlohmann::json& r = rounds[i];
    SCOPED_TRACE(r.dump());
    EXPECT_EQ(r["round"], static_cast<int64_t>(i) + 1);
    EXPECT_EQ(r["participants"].get<int64_t>() + r["dropped"].get<int64_t>() + r["unusable"].get<int64_t>(), 8);
    participants += r["participants"].get<int64_t>();
    EXPECT_EQ(r["clients"].size(), r["participants"].get<size_t>());
    ASSERT_TRUE(r["test_accuracy"].is_number());
    EXPECT_GT(r["test_accuracy"].get<double>(), 0.2);  // better than chance from round 1 on
    ASSERT_TRUE(r["test_loss"].is_number());           // a classifier's loss is reported too
    EXPECT_LT(r["test_loss"].get<double>(), 2.3);      // below chance's ln 10
    EXPECT_GT(r["wall_s"].get<double>(), 0);
    EXPECT_GT(r["compute_s"].get<double>(), 0);
    EXPECT_GE(r["straggler_wait_s"].get<double>(), 0);
    EXPECT_GT(r["bytes_up"].get<double>(), 4 * 50890);  // at least one push of the MLP's 50,890 floats
    EXPECT_GT(r["bytes_down"].get<double>(), 0);
    if (r["participants"].get<int64_t>() > 0) {
      EXPECT_LE(r["client_accuracy_p10"].get<double>(), r["client_accuracy_mean"].get<double>());
      EXPECT_GE(r["client_accuracy_p10"].get<double>(), 0.0);
    }
  }
  EXPECT_EQ(participants, trained);
  EXPECT_EQ(rounds[5]["test_accuracy"], s["test_accuracy"]);  // the last round's model is the final one
  const nlohmann::json& share = s["federated"]["round_totals"]["share"];
  EXPECT_NEAR(share["compute"].get<double>() + share["client_eval"].get<double>() +
                  share["straggler_wait"].get<double>() + share["comm"].get<double>(),
              1.0, 1e-9);
  const std::string csv = testing::ReadText(dir / "run/rounds.csv");
  EXPECT_EQ(csv.rfind("round,test_accuracy,test_loss,selected,participants,dropped,", 0), 0u) << csv;
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 7) << csv;
}

// Over-selection with a round deadline, among slow devices and dropouts:
// no round lasts past its deadline in simulated time, the late updates are
// counted, and without the deadline the same rounds wait for the slow.
TEST(FederatedTest, ADeadlineWithOverSelectionNeverWaitsPastIt) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kFederatedJob);
  const std::vector<std::string> edge = {"--set", "federated.rounds=6",
                                         "--set", "federated.dropout=0.2",
                                         "--set", "federated.device_slow_fraction=0.3",
                                         "--set", "federated.device_compute_sigma=0.3",
                                         "--set", "federated.over_selection=0.5"};
  std::vector<std::string> with_deadline = edge;
  with_deadline.insert(with_deadline.end(), {"--set", "federated.deadline_s=2.5"});
  auto s = Launch(dir, "deadline", with_deadline);
  ASSERT_TRUE(s["federated"].is_object()) << s.dump();
  int64_t late = 0;
  for (const nlohmann::json& r : s["federated"]["rounds"]) {
    SCOPED_TRACE(r.dump());
    EXPECT_EQ(r["selected"], 12);  // 8 * 1.5
    EXPECT_LE(r["simulated_s"].get<double>(), 2.5);
    EXPECT_LE(r["participants"].get<int64_t>(), 8);
    EXPECT_EQ(r["participants"].get<int64_t>() + r["dropped"].get<int64_t>() + r["late"].get<int64_t>() +
                  r["unusable"].get<int64_t>(),
              12);
    if (r["participants"].get<int64_t>() < 8) {
      EXPECT_EQ(r["simulated_s"].get<double>(), 2.5);
    }
    late += r["late"].get<int64_t>();
  }
  EXPECT_GT(late, 0);
  EXPECT_EQ(s["federated"]["clients_late"], late);
  EXPECT_LE(s["federated"]["round_totals"]["longest_simulated_round_s"].get<double>(), 2.5);
  auto waiting = Launch(dir, "no-deadline", edge);
  EXPECT_GT(waiting["federated"]["round_totals"]["longest_simulated_round_s"].get<double>(), 2.5);
}

// An adaptive strategy runs on the shards (its moments per chunk) and
// trains the model somewhere else than FedAvg does.
TEST(FederatedTest, FedAdamRoundsLearnOnTheShards) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kFederatedJob);
  auto avg = Launch(dir, "avg", {"--set", "federated.rounds=6"});
  auto adam =
      Launch(dir, "adam",
             {"--set", "federated.rounds=6", "--set", "federated.strategy=fedadam", "--set", "training.outer_lr=0.01"});
  EXPECT_EQ(adam["status"], "finished");
  EXPECT_GT(adam["test_accuracy"].get<double>(), 0.5) << adam.dump();
  EXPECT_NE(testing::ReadText(dir / "avg/final_params.bin"), testing::ReadText(dir / "adam/final_params.bin"));
}

// SCAFFOLD: the shards keep the control variate after the model, so they
// hold twice its values; the final parameters are the model's alone, the
// run repeats bit for bit, and it trains elsewhere than FedAvg.
TEST(FederatedTest, ScaffoldRoundsKeepTheControlVariateOnTheShards) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kFederatedJob);
  const std::vector<std::string> scaffold = {"--set", "federated.rounds=4", "--set", "federated.strategy=scaffold"};
  auto a = Launch(dir, "a", scaffold), b = Launch(dir, "b", scaffold);
  auto avg = Launch(dir, "avg", {"--set", "federated.rounds=4"});
  EXPECT_EQ(a["status"], "finished") << a.dump();
  EXPECT_EQ(a["federated"]["clients_trained"], 32);
  EXPECT_GT(a["test_accuracy"].get<double>(), 0.6) << a.dump();
  const std::string params = testing::ReadText(dir / "a/final_params.bin");
  EXPECT_EQ(params.size(), 4u * 50890);  // the MLP's parameters, without c
  EXPECT_EQ(params, testing::ReadText(dir / "b/final_params.bin"));
  EXPECT_NE(params, testing::ReadText(dir / "avg/final_params.bin"));
}

// FedBuff among dropouts and slow devices: every step applies per_round
// updates, some of them stale (and weighed down), and the job takes less
// simulated time than FedAvg's rounds, which wait for their slowest client.
TEST(FederatedTest, FedBuffStepsOnBufferedStaleUpdatesWithoutWaitingForTheSlow) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kFederatedJob);
  const std::vector<std::string> edge = {
      "--set", "federated.rounds=6", "--set", "federated.dropout=0.2", "--set", "federated.device_slow_fraction=0.3"};
  std::vector<std::string> buffered = edge;
  buffered.insert(buffered.end(), {"--set", "federated.strategy=fedbuff", "--set", "federated.concurrency=12"});
  auto fb = Launch(dir, "fedbuff", buffered);
  auto avg = Launch(dir, "fedavg", edge);
  ASSERT_TRUE(fb["federated"].is_object()) << fb.dump();
  EXPECT_EQ(fb["status"], "finished");
  EXPECT_GT(fb["test_accuracy"].get<double>(), 0.5) << fb.dump();
  double staleness = 0;
  for (const nlohmann::json& r : fb["federated"]["rounds"]) {
    SCOPED_TRACE(r.dump());
    EXPECT_EQ(r["participants"].get<int64_t>() + r["unusable"].get<int64_t>(), 8);
    EXPECT_GT(r["simulated_s"].get<double>(), 0);
    staleness += r["mean_staleness"].get<double>();
  }
  EXPECT_GT(staleness, 0);
  EXPECT_GT(fb["federated"]["clients_dropped"].get<int64_t>(), 0);
  EXPECT_LT(fb["federated"]["round_totals"]["simulated_s"].get<double>(),
            avg["federated"]["round_totals"]["simulated_s"].get<double>());
  EXPECT_NE(testing::ReadText(dir / "fedbuff/final_params.bin"), testing::ReadText(dir / "fedavg/final_params.bin"));
}

// Clients' uplinks in int8: their bytes drop about 4x, the simulated
// rounds get shorter (the update is most of a client's upload time), and
// the model still learns.
TEST(FederatedTest, Int8UplinksShrinkClientBytesAndSimulatedTime) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kFederatedJob);
  auto fp32 = Launch(dir, "fp32", {"--set", "federated.rounds=4"});
  auto int8 = Launch(dir, "int8", {"--set", "federated.rounds=4", "--set", "federated.uplink_codec=int8"});
  EXPECT_GT(int8["test_accuracy"].get<double>(), 0.5) << int8.dump();
  const nlohmann::json &a = fp32["federated"]["rounds"], &b = int8["federated"]["rounds"];
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(b[i].dump());
    EXPECT_EQ(a[i]["client_bytes_up"].get<double>(), 8 * 4.0 * 50890);  // 8 clients, the MLP in fp32
    EXPECT_NEAR(b[i]["client_bytes_up"].get<double>() / a[i]["client_bytes_up"].get<double>(), 0.25, 0.02);
    EXPECT_LT(b[i]["simulated_s"].get<double>(), a[i]["simulated_s"].get<double>());
  }
  auto bad =
      RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "bad", "--set", "federated.uplink_codec=int3"}, 60);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("federated.uplink_codec"), std::string::npos) << bad.output;
}

// DP-FedAvg: updates clipped and counted, seeded noise (two runs agree bit
// for bit), and the summary's epsilon is the accountant's for q = 8/40.
TEST(FederatedTest, DpFedAvgClipsAddsSeededNoiseAndReportsEpsilon) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kFederatedJob);
  const std::vector<std::string> dp = {"--set", "federated.rounds=5",
                                       "--set", "federated.dp_clip_norm=0.5",
                                       "--set", "federated.dp_noise_multiplier=0.8"};
  auto a = Launch(dir, "a", dp), b = Launch(dir, "b", dp);
  ASSERT_TRUE(a["federated"]["dp"].is_object()) << a.dump();
  EXPECT_GT(a["federated"]["client_updates_clipped"].get<int64_t>(), 0);
  EXPECT_EQ(testing::ReadText(dir / "a/final_params.bin"), testing::ReadText(dir / "b/final_params.bin"));
  const auto& d = a["federated"]["dp"];
  EXPECT_EQ(d["rounds"], 5);
  EXPECT_DOUBLE_EQ(d["epsilon"].get<double>(), federated::EpsilonAfter(8.0 / 40, 0.8, 5, 1e-5).epsilon);
  ASSERT_EQ(d["epsilon_by_round"].size(), 5u);
  EXPECT_LT(d["epsilon_by_round"][0][1].get<double>(), d["epsilon_by_round"][4][1].get<double>());
  // The noise is there: without it the same clipped job ends elsewhere.
  auto quiet = Launch(dir, "quiet",
                      {"--set", "federated.rounds=5", "--set", "federated.dp_clip_norm=0.5", "--set",
                       "federated.dp_noise_multiplier=0.000001"});
  EXPECT_NE(testing::ReadText(dir / "a/final_params.bin"), testing::ReadText(dir / "quiet/final_params.bin"));
}

TEST(FederatedTest, ABadFederatedJobIsAClearErrorAndStartsNothing) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kFederatedJob);
  for (auto [bad, why] : {std::pair<const char*, const char*>{"training.staleness_bound=2", "staleness_bound: 0"},
                          {"federated.per_round=41", "federated.per_round"},
                          {"federated.dropout=1", "federated.dropout"},
                          {"training.local_steps=4", "leave training.local_steps at 1"},
                          {"federated.strategy=fedsgd", "is not a strategy"}}) {
    auto r = RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--set", bad}, 30);
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_NE(r.output.find(why), std::string::npos) << bad << ": " << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir / "run/logs")) << bad;
  }
  auto r = RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--set", "federated.dp_clip_norm=1",
                        "--set", "federated.weighted_selection=true"},
                       30);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("needs uniform selection"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace geodesic
