// Language models end to end (docs/language-models.md): the GPT of
// scripts/export_model.py on token files, through `geodesic launch`. Bad
// token data and modules are one clear error before any process starts; a
// small run reports validation loss, perplexity and the time to
// eval.target_loss.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>

#include "tests/integration/harness.h"
#include "tests/test_paths.h"

namespace geodesic {
namespace {

using testing::RunGeodesic;
using testing::TempDir;

// One region, one worker, the tiny GPT; the test adds data.path and model.path.
const char* kLmJob = R"(
name: lm
seed: 1
regions:
  a: {servers: 1, workers: 1}
model: {name: torchscript}
data: {dataset: tokens, context: 32, batch_size: 16}
optimizer: {name: adamw, lr: 0.01, schedule: cosine, warmup: 0.05, clip_norm: 1.0}
training: {steps: 150, staleness_bound: 0}
eval: {snapshot_every_s: 1, target_loss: 3.0, test_samples: 256}
)";

// uint16 ids, little-endian.
void WriteIds(const std::string& path, const std::vector<uint16_t>& ids) {
  std::ofstream out(path, std::ios::binary);
  for (uint16_t v : ids) out.put(static_cast<char>(v & 0xff)).put(static_cast<char>(v >> 8));
}

// Text with structure a small model learns in seconds: lines of a short
// repeated vocabulary, as byte-level tokens.
std::vector<uint16_t> Text(int lines, int seed) {
  const char* words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat ", "and ", "dog ", "ran ", "far "};
  std::vector<uint16_t> out;
  uint32_t x = static_cast<uint32_t>(seed) * 2654435761u + 1;
  for (int l = 0; l < lines; ++l) {
    for (int w = 0; w < 6; ++w) {
      x = x * 1664525u + 1013904223u;
      for (const char* c = words[(x >> 16) % 10]; *c; ++c) out.push_back(static_cast<uint8_t>(*c));
    }
    out.push_back('\n');
  }
  return out;
}

class LanguageModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_ / "data");
    WriteIds(dir_ / "data/train.bin", Text(3000, 1));
    WriteIds(dir_ / "data/val.bin", Text(300, 2));
    testing::WriteText(dir_ / "job.yaml", kLmJob);
    const std::string cmd = "/usr/bin/python3 " + SourcePath("scripts/export_model.py") + " gpt " + (dir_ / "gpt.pt") +
                            " --size tiny > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  testing::RunResult Launch(std::vector<std::string> sets, double timeout_s = 60) {
    std::vector<std::string> args = {"launch",
                                     dir_ / "job.yaml",
                                     "--run-dir",
                                     dir_ / "run",
                                     "--quiet",
                                     "--set",
                                     "data.path=" + (dir_ / "data"),
                                     "--set",
                                     "model.path=" + (dir_ / "gpt.pt")};
    for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
    return RunGeodesic(args, timeout_s);
  }
  // Launches, expects exit 1 with `says` in the output and no process started.
  void ExpectRefused(std::vector<std::string> sets, const std::string& says) {
    auto r = Launch(std::move(sets));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir_ / "run/logs")) << says;
  }

  TempDir dir_;
};

TEST_F(LanguageModelTest, BadTokenDataAndModulesAreOneClearErrorAndStartNothing) {
  // A file that is not whole ids.
  std::filesystem::copy_file(dir_ / "data/train.bin", dir_ / "odd.bin");
  std::filesystem::resize_file(dir_ / "data/train.bin", std::filesystem::file_size(dir_ / "odd.bin") - 1);
  ExpectRefused({}, dir_ / "data/train.bin" + ": " + std::to_string(std::filesystem::file_size(dir_ / "odd.bin") - 1) +
                        " bytes is not a whole number of 2-byte token ids");
  std::filesystem::copy_file(dir_ / "odd.bin", dir_ / "data/train.bin",
                             std::filesystem::copy_options::overwrite_existing);
  // An id at or above the model's vocabulary, in the validation split.
  std::vector<uint16_t> val = Text(300, 2);
  val[17] = 300;
  WriteIds(dir_ / "data/val.bin", val);
  ExpectRefused({}, dir_ / "data/val.bin" + ": token ids up to 300, at or above the vocabulary of 256");
  ExpectRefused({"data.vocab=256"}, dir_ / "data/val.bin" + ": token id 300 is at or above data.vocab 256");
  WriteIds(dir_ / "data/val.bin", Text(300, 2));
  // A context longer than the model's positions (tiny: 64).
  ExpectRefused({"data.context=65"}, "data.context: 65 tokens, longer than the 64 positions of model.path");
  // A loss that is not a finite scalar.
  const std::string py = dir_ / "nan.py";
  testing::WriteText(py,
                     "import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                     "        self.emb = torch.nn.Embedding(256, 8)\n"
                     "    def forward(self, x):\n        return self.emb(x)\n"
                     "    @torch.jit.export\n    def loss(self, x, y):\n"
                     "        return self.emb(x).sum(2).mean(1)\n"
                     "torch.jit.save(torch.jit.script(M()), '" +
                         (dir_ / "vector.pt") + "')\n");
  ASSERT_EQ(std::system(("/usr/bin/python3 " + py).c_str()), 0);
  ExpectRefused({"model.path=" + (dir_ / "vector.pt")}, "it must return a finite 0-dim float32 tensor");
  // Token data and a module without a loss.
  const std::string cnn = dir_ / "cnn.pt";
  ASSERT_EQ(std::system(
                ("/usr/bin/python3 " + SourcePath("scripts/export_model.py") + " cnn " + cnn + " > /dev/null").c_str()),
            0);
  ExpectRefused({"model.path=" + cnn}, "has no loss method, and token data");
  // Epochs over token data count its windows: the launcher says how many.
  ExpectRefused({"training.steps=0", "data.train_samples=10"},
                "set data.train_samples: " + std::to_string((Text(3000, 1).size() - 1) / 32));
  // A document split without its side file.
  ExpectRefused({"data.partition=documents"}, "data.partition documents needs " + (dir_ / "data/train.docs"));
}

TEST_F(LanguageModelTest, TrainsTheGptAndReportsLossPerplexityAndTimeToTarget) {
  auto r = Launch({}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("validation loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("perplexity"), std::string::npos) << r.output;
  const nlohmann::json s = testing::ReadJson(dir_ / "run/summary.json");
  ASSERT_TRUE(s["test_loss"].is_number()) << s.dump(2);
  const double loss = s["test_loss"].get<double>();
  // Uniform over 256 bytes is 5.55 nats; the ten-word text is far below it.
  EXPECT_LT(loss, 2.5) << s.dump(2);
  EXPECT_NEAR(s["test_perplexity"].get<double>(), std::exp(loss), 1e-6 * std::exp(loss));
  EXPECT_TRUE(s["test_accuracy"].is_null());
  EXPECT_FALSE(s.contains("target_accuracy"));
  EXPECT_EQ(s["target_loss"], 3.0);
  ASSERT_GE(s["loss_curve"].size(), 2u) << s.dump(2);
  EXPECT_GT(s["loss_curve"][0][2].get<double>(), 5.0);  // the first snapshot is the initial model
  ASSERT_TRUE(s["seconds_to_target"].is_number()) << s.dump(2);
  for (const auto& p : s["loss_curve"])
    if (p[2].get<double>() <= 3.0) {
      EXPECT_EQ(p[0], s["seconds_to_target"]);
      break;
    }
  EXPECT_EQ(s["samples"], 150 * 16);
  // Traffic per predicted token: a sample is a window of 32.
  EXPECT_EQ(s["tokens"], 150 * 16 * 32);
  EXPECT_NEAR(s["bytes_per_token"]["total"].get<double>(),
              s["bytes_exchanged"]["total"].get<double>() / (150 * 16 * 32), 1e-9);
  EXPECT_GT(s["bytes_per_token"]["push"].get<double>(), 0.0);

  // A pretrained start: `export_model.py trained` writes the module with the
  // run's final values, and a job from it starts where the run ended (its
  // first snapshot, the initial model, scores the run's final loss).
  const std::string exporter = "/usr/bin/python3 " + SourcePath("scripts/export_model.py") + " trained ";
  const std::string trained = dir_ / "trained.pt";
  const std::string cmd = exporter + trained + " --run " + (dir_ / "run") + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string missing = exporter + (dir_ / "x.pt") + " --run " + (dir_ / "nowhere") + " 2> " + (dir_ / "err");
  EXPECT_NE(std::system(missing.c_str()), 0);
  EXPECT_NE(testing::ReadText(dir_ / "err").find("nowhere"), std::string::npos) << testing::ReadText(dir_ / "err");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "x.pt"));
  // A run whose final values are short or not finite: one error naming the file, nothing written.
  std::filesystem::create_directories(dir_ / "bad");
  std::filesystem::copy_file(dir_ / "run/job.yaml", dir_ / "bad/job.yaml");
  const int64_t n = std::filesystem::file_size(dir_ / "run/final_params.bin") / 4;
  for (const auto& [values, says] :
       std::vector<std::pair<std::vector<float>, std::string>>{{std::vector<float>(3, 0.f), "trainable parameters"},
                                                               {std::vector<float>(n, std::nanf("")), "not finite"}}) {
    std::ofstream(dir_ / "bad/final_params.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * 4));
    const std::string bad = exporter + (dir_ / "x.pt") + " --run " + (dir_ / "bad") + " 2> " + (dir_ / "err");
    EXPECT_NE(std::system(bad.c_str()), 0) << says;
    const std::string err = testing::ReadText(dir_ / "err");
    EXPECT_NE(err.find("final_params.bin"), std::string::npos) << err;
    EXPECT_NE(err.find(says), std::string::npos) << err;
    EXPECT_FALSE(std::filesystem::exists(dir_ / "x.pt"));
  }
  auto again =
      RunGeodesic({"launch", dir_ / "job.yaml", "--run-dir", dir_ / "again", "--quiet", "--set",
                   "data.path=" + (dir_ / "data"), "--set", "model.path=" + trained, "--set", "training.steps=2"},
                  120);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const nlohmann::json a = testing::ReadJson(dir_ / "again/summary.json");
  ASSERT_GE(a["loss_curve"].size(), 1u) << a.dump(2);
  EXPECT_NEAR(a["loss_curve"][0][2].get<double>(), loss, 1e-6 * loss) << a.dump(2);
}

// Federated language models: six clients, each a set of whole documents
// of the text (data.partition documents over train.docs), three a round.
// FedAvg and FedAdam both learn, and rounds.csv carries the validation loss
// of every round and no accuracy. Two real `geodesic client` processes
// each train one task of their client in place of the executors (and
// leave), and the job ends with the same model, bit for bit, as the job
// without them.
const char* kFederatedLmJob = R"(
name: fedlm
seed: 1
regions:
  a: {servers: 1, workers: 1}
  b: {servers: 1, workers: 1}
model: {name: torchscript, path: MODEL}
data: {dataset: tokens, path: DATA, context: 32, batch_size: 8, partition: documents}
training: {staleness_bound: 0}
federated: {clients: 6, per_round: 3, rounds: 30, local_steps: 5, local_lr: 0.5, gateway: true, gateway_timeout_s: 60}
eval: {snapshot_every_s: 1, test_samples: 128}
membership: {heartbeat_ms: 100, lease_ms: 2000}
)";

TEST_F(LanguageModelTest, FederatedClientsOfDocumentsTrainWithFedAvgFedAdamAndRealClients) {
  // 30 documents of 100 lines each.
  const std::vector<uint16_t> text = Text(3000, 1);
  {
    std::ofstream docs(dir_ / "data/train.docs", std::ios::binary);
    uint64_t lines = 0;
    for (uint64_t i = 0; i < text.size(); ++i)
      if (i == 0 || (text[i - 1] == '\n' && ++lines % 100 == 0)) docs.write(reinterpret_cast<const char*>(&i), 8);
  }
  std::string job = kFederatedLmJob;
  job.replace(job.find("MODEL"), 5, dir_ / "gpt.pt");
  job.replace(job.find("DATA"), 4, dir_ / "data");
  testing::WriteText(dir_ / "job.yaml", job);
  auto launch = [&](const std::string& run, const std::vector<std::string>& sets) {
    std::vector<std::string> args = {"launch", dir_ / "job.yaml", "--run-dir", dir_ / run, "--quiet"};
    for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
    return testing::RunGeodesic(args, 300);
  };
  for (const std::string strategy : {"fedavg", "fedadam"}) {
    std::vector<std::string> sets = {"federated.strategy=" + strategy};
    if (strategy == "fedadam") sets.push_back("training.outer_lr=0.01");
    auto r = launch(strategy, sets);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json s = testing::ReadJson(dir_ / (strategy + "/summary.json"));
    EXPECT_LT(s["test_loss"].get<double>(), 4.0) << strategy << ": " << s.dump(2);  // from 5.55
    EXPECT_TRUE(s["test_accuracy"].is_null());
    EXPECT_EQ(s["federated"]["clients_trained"], 90);
    const std::string csv = testing::ReadText(dir_ / (strategy + "/rounds.csv"));
    ASSERT_EQ(csv.substr(0, 33), "round,test_accuracy,test_loss,sel") << csv;
    const nlohmann::json& rows = s["federated"]["rounds"];
    ASSERT_EQ(rows.size(), 30u) << s.dump(2);
    for (const auto& row : rows) EXPECT_TRUE(row["test_loss"].is_number()) << row.dump();
    EXPECT_LT(rows.back()["test_loss"].get<double>(), rows.front()["test_loss"].get<double>()) << csv;
  }
  // Real clients 1 and 4 take their clients' tasks (plaintext launch).
  std::vector<std::string> args = {"launch", dir_ / "job.yaml", "--run-dir", dir_ / "real", "--quiet"};
  testing::Process run(args, dir_ / "real-launch.log");
  ASSERT_TRUE(testing::WaitForFile(dir_ / "real/coordinator.endpoint", 60))
      << testing::ReadText(dir_ / "real-launch.log");
  const std::string endpoint = testing::ReadText(dir_ / "real/coordinator.endpoint");
  std::vector<std::unique_ptr<testing::Process>> clients;
  for (int id : {1, 4})
    clients.push_back(std::make_unique<testing::Process>(
        std::vector<std::string>{"client", "--job", dir_ / "job.yaml", "--id", std::to_string(id), "--coordinator",
                                 endpoint, "--join-timeout", "60", "--max-tasks", "1"},
        dir_ / ("client-" + std::to_string(id) + ".log")));
  ASSERT_EQ(run.Wait(300), 0) << testing::ReadText(dir_ / "real-launch.log");
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(clients[i]->Wait(30), 0) << testing::ReadText(dir_ / (i ? "client-4.log" : "client-1.log"));
  const nlohmann::json s = testing::ReadJson(dir_ / "real/summary.json");
  EXPECT_EQ(s["federated"]["real_client_updates"], 2) << s["federated"].dump(2);
  EXPECT_EQ(s["federated"]["client_updates_refused"], 0);
  EXPECT_NE(testing::ReadText(dir_ / "client-1.log").find("windows"), std::string::npos);
  EXPECT_EQ(testing::ReadText(dir_ / "real/final_params.bin"), testing::ReadText(dir_ / "fedavg/final_params.bin"));
}

// The shipped examples as they are, on what scripts/prepare_lm.sh makes from
// Debian's fortunes, shortened: examples/lm.yaml for 30 steps per worker, and
// (Training*: slow) examples/three_regions_lm.yaml for two DiLoCo rounds over
// the emulated links. The data and model paths are the examples' own, made
// absolute against the source tree as `geodesic launch` run there would.
testing::RunResult LaunchExample(const std::string& example, const std::string& run_dir,
                                 const std::vector<std::string>& sets) {
  const std::string prepare = "bash " + SourcePath("scripts/prepare_lm.sh") + " > /dev/null";
  EXPECT_EQ(std::system(prepare.c_str()), 0) << prepare;
  std::vector<std::string> args = {"launch",
                                   SourcePath("examples/" + example),
                                   "--run-dir",
                                   run_dir,
                                   "--quiet",
                                   "--set",
                                   "model.path=" + SourcePath("runs/models/gpt-small.pt"),
                                   "--set",
                                   "data.path=" + SourcePath("runs/data/fortunes")};
  for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
  return RunGeodesic(args, 600);
}

TEST(LanguageModelExampleTest, LmYamlTrainsOnFortunes) {
  TempDir dir;
  auto r = LaunchExample("lm.yaml", dir / "run", {"training.steps=30", "eval.test_samples=128"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json s = testing::ReadJson(dir / "run/summary.json");
  EXPECT_LT(s["test_loss"].get<double>(), 4.0) << s.dump(2);  // from 5.55 (uniform over bytes)
  EXPECT_EQ(s["samples"], 2 * 30 * 16);
  // The model crossed the network once at the start (docs/wire.md "Initial
  // values"): one worker sent it, neither pulled it back, so the two sent
  // one model apart and each received the 29 pulls after its first clock.
  const double model = 875264.0 * 4, sent0 = s["bytes_sent"]["worker-0"], sent1 = s["bytes_sent"]["worker-1"];
  EXPECT_NEAR(std::abs(sent0 - sent1), model, 0.01 * model) << s["bytes_sent"].dump();
  for (const char* w : {"worker-0", "worker-1"}) {
    const double got = s["bytes_received"][w];
    EXPECT_GT(got, 29 * model) << w;
    EXPECT_LT(got, 29.2 * model) << w << ": the initial model was pulled too";
  }
}

TEST(TrainingLanguageModelExampleTest, ThreeRegionsDiLoCoTrainsOnFortunes) {
  TempDir dir;
  auto r = LaunchExample("three_regions_lm.yaml", dir / "run", {"training.steps=32", "eval.test_samples=128"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json s = testing::ReadJson(dir / "run/summary.json");
  EXPECT_LT(s["test_loss"].get<double>(), 5.0) << s.dump(2);
  EXPECT_EQ(s["samples"], 6 * 32 * 16);
}

}  // namespace
}  // namespace geodesic
