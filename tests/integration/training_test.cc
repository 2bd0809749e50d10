// Real training runs through `geodesic launch` (labelled slow): accuracy on
// held-out data, BSP equal to synchronous SGD, and a worker killed with
// SIGKILL mid-training while the others finish.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include "common/job.h"
#include "tests/integration/harness.h"
#include "worker/batcher.h"
#include "worker/dataset.h"
#include "worker/model.h"
#include "worker/trainer.h"

namespace geodesic {
namespace {

using testing::RunGeodesic;
using testing::TempDir;

std::string Example() { return std::string(GEODESIC_SOURCE_DIR) + "/examples/fashion_mnist.yaml"; }

TEST(TrainingTest, ShortAsyncRunBeatsStatedAccuracy) {
  TempDir dir;
  // The default job (4 workers, 2 shards, CNN), asynchronous within a
  // staleness bound of 2, for one epoch.
  auto r = RunGeodesic({"launch", Example(), "--run-dir", dir / "run", "--set", "training.epochs=1", "--set",
                        "training.staleness_bound=2", "--quiet"},
                       540);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto s = testing::ReadJson(dir / "run/summary.json");
  ASSERT_TRUE(s.is_object());
  double acc = s["test_accuracy"].get<double>();
  std::cout << "one epoch: test accuracy " << acc << " in " << s["wall_seconds"] << " s, " << s["samples_per_second"]
            << " samples/s" << std::endl;
  EXPECT_GE(acc, 0.80);
  EXPECT_GE(s["samples"].get<int64_t>(), 59000);
  EXPECT_GE(s["accuracy_curve"].size(), 2u);
  EXPECT_GT(s["staleness_histogram"].size(), 0u);
}

TEST(TrainingTest, CompressedPushesAndPullsStillTrain) {
  TempDir dir;
  // Sparse pushes with error feedback and momentum correction, int8 changes
  // for pulls: a fraction of the bytes, most of the accuracy.
  auto r = RunGeodesic({"launch", Example(), "--run-dir", dir / "run", "--quiet", "--set", "training.epochs=1", "--set",
                        "compression.push=topk:0.01+zstd", "--set", "compression.pull=int8", "--set",
                        "compression.momentum_correction=true", "--set", "eval.snapshot_every_s=1000"},
                       540);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto s = testing::ReadJson(dir / "run/summary.json");
  ASSERT_TRUE(s.is_object());
  double acc = s["test_accuracy"].get<double>();
  double push = s["bytes_per_step"]["push"].get<double>(), pull = s["bytes_per_step"]["pull"].get<double>();
  std::cout << "compressed, one epoch: accuracy " << acc << ", push " << push << " B/step, pull " << pull << " B/step"
            << std::endl;
  const double fp32 = 184586 * 4.0;  // bytes of one dense copy of the model
  EXPECT_GE(acc, 0.80);
  EXPECT_LT(push, fp32 / 40);
  EXPECT_LT(pull, fp32 / 3);
  for (auto& p : s["processes"]) EXPECT_EQ(p["exit"], "exited 0") << p.dump();
}

TEST(TrainingTest, BspMatchesSynchronousSgd) {
  TempDir dir;
  const std::vector<std::string> sets = {"model.name=mlp",
                                         "model.mlp_hidden=[32]",
                                         "training.steps=12",
                                         "training.staleness_bound=0",
                                         "data.batch_size=32",
                                         "wire.chunk_bytes=4096",
                                         "seed=3",
                                         "regions.us-east.workers=1",
                                         "eval.test_samples=1000"};
  std::vector<std::string> args = {"launch", Example(), "--run-dir", dir / "run", "--quiet"};
  for (const auto& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  auto r = RunGeodesic(args, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto job = LoadJobFile(dir / "run/job.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->NumWorkers(), 3);
  ASSERT_EQ(job->NumServers(), 2);

  // Synchronous SGD by hand: every step, each worker's gradient on the same
  // parameters, averaged, one torch::optim::SGD step.
  torch::set_num_threads(1);
  auto model = std::move(worker::FlatModel::Create(job->model, job->seed).value());
  auto train = worker::LoadFashionMnist(job->data.path, "train");
  ASSERT_TRUE(train.ok());
  std::vector<torch::Tensor> images, labels;
  std::vector<worker::BatchSampler> samplers;
  for (int w = 0; w < 3; ++w) {
    auto part = worker::IidPartition(train->count, 3, w, job->seed);
    images.push_back(worker::ImagesTensor(*train, &part));
    labels.push_back(worker::LabelsTensor(*train, &part));
    std::vector<int64_t> local(part.size());
    for (size_t i = 0; i < local.size(); ++i) local[i] = static_cast<int64_t>(i);
    samplers.emplace_back(std::move(local), job->data.batch_size, worker::SamplerSeed(job->seed, w));
  }
  torch::Tensor flat = model->params().clone().set_requires_grad(true);
  torch::optim::SGD sgd({flat}, torch::optim::SGDOptions(job->optimizer.lr).momentum(job->optimizer.momentum));
  for (int step = 0; step < job->training.steps; ++step) {
    torch::Tensor sum = torch::zeros_like(flat);
    for (int w = 0; w < 3; ++w) {
      {
        torch::NoGradGuard ng;
        model->params().copy_(flat.detach());
      }
      torch::Tensor g = model->NewGradBuffer();
      const auto& idx = samplers[w].Next();
      torch::Tensor sel = torch::tensor(idx, torch::kInt64);
      auto loss = torch::nn::functional::cross_entropy(model->Forward(images[w].index_select(0, sel)),
                                                       labels[w].index_select(0, sel));
      loss.backward();
      sum += g;
    }
    flat.mutable_grad() = sum / 3.0;
    sgd.step();
  }
  std::ifstream in(dir / "run/final_params.bin", std::ios::binary);
  std::vector<float> got(static_cast<size_t>(flat.numel()));
  ASSERT_TRUE(in.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>(got.size() * 4)));
  torch::Tensor ours = torch::from_blob(got.data(), {flat.numel()});
  double max_diff = (ours - flat.detach()).abs().max().item<double>();
  double moved = (flat.detach() - model->params()).abs().max().item<double>();
  std::cout << "max |geodesic - synchronous SGD| = " << max_diff << std::endl;
  EXPECT_LT(max_diff, 1e-5);
  // And training moved the parameters, so the comparison means something.
  auto init = std::move(worker::FlatModel::Create(job->model, job->seed).value());
  EXPECT_GT((flat.detach() - init->params()).abs().max().item<double>(), 1e-3);
  (void)moved;
}

TEST(TrainingTest, KilledWorkerDoesNotBlockTheOthers) {
  TempDir dir;
  // BSP, the strictest bound: a dead worker would stop everyone if its lease
  // did not expire.
  auto r =
      RunGeodesic({"launch", Example(), "--run-dir", dir / "run", "--quiet", "--set", "model.name=mlp", "--set",
                   "training.staleness_bound=0", "--set", "training.steps=400", "--set", "membership.heartbeat_ms=100",
                   "--set", "membership.lease_ms=1000", "--set", "eval.test_samples=2000", "--kill", "worker:2@2"},
                  300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("worker-2 killed by SIGKILL; the job continues without it"), std::string::npos) << r.output;
  auto s = testing::ReadJson(dir / "run/summary.json");
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["status"], "finished");
  ASSERT_EQ(s["faults_injected"].size(), 1u);
  for (auto& p : s["processes"]) {
    if (p["name"] == "worker-2")
      EXPECT_EQ(p["exit"], "killed by SIGKILL");
    else
      EXPECT_EQ(p["exit"], "exited 0") << p.dump();
  }
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.75);
  // The survivors ran every step.
  for (const char* w : {"worker-0", "worker-1", "worker-3"})
    EXPECT_EQ(s["step_time_breakdown"][w]["steps"].get<int64_t>(), 400) << w;
}

}  // namespace
}  // namespace geodesic
