// Real training runs through `geodesic launch` (labelled slow): accuracy on
// held-out data, BSP equal to synchronous SGD, and a worker killed with
// SIGKILL mid-training while the others finish.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cluster/chunking.h"
#include "config/job.h"
#include "tests/integration/harness.h"
#include "tests/test_paths.h"
#include "worker/batcher.h"
#include "worker/dataset.h"
#include "worker/model.h"
#include "worker/snapshot.h"
#include "worker/trainer.h"

namespace geodesic {
namespace {

using testing::RunGeodesic;
using testing::TempDir;

std::string Example() { return ::geodesic::testing::SourcePath("examples/fashion_mnist.yaml"); }

TEST(TrainingTest, ShortAsyncRunBeatsStatedAccuracy) {
  TempDir dir;
  // The default job (4 workers, 2 shards, CNN), asynchronous within a
  // staleness bound of 2, for two epochs. One epoch ended anywhere from
  // 0.79 to 0.85 depending on how the four workers were scheduled on two
  // cores (stale momentum steps near the end), too close to a threshold;
  // two epochs at the constant rate still ended at 0.7926 once, on the
  // last steps' noise. A cosine schedule takes the rate to 0 by the end,
  // so the final model is not a snapshot of that noise.
  // Snapshots every second, of which the evaluator scores 4 spread evenly
  // and searches the stretch before the first of them to reach 0.8.
  auto r = RunGeodesic(
      {"launch", Example(), "--run-dir", dir / "run", "--set", "training.epochs=2", "--set",
       "training.staleness_bound=2", "--set", "optimizer.schedule=cosine", "--set", "eval.snapshot_every_s=1", "--set",
       "eval.curve_points=4", "--set", "eval.target_accuracy=0.8", "--quiet"},
      540);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The wait for the final evaluation is announced (the curve takes seconds).
  EXPECT_NE(r.output.find("training ended after"), std::string::npos) << r.output;
  auto s = testing::ReadJson(dir / "run/summary.json");
  ASSERT_TRUE(s.is_object());
  double acc = s["test_accuracy"].get<double>();
  std::cout << "two epochs: test accuracy " << acc << " in " << s["wall_seconds"] << " s, " << s["samples_per_second"]
            << " samples/s" << std::endl;
  EXPECT_GE(acc, 0.80);
  EXPECT_GE(s["samples"].get<int64_t>(), 119000);
  EXPECT_GT(s["staleness_histogram"].size(), 0u);
  // The curve scored few of the snapshots, and its time to the target is
  // the first snapshot's to reach it: none of those not scored between the
  // first scored point to reach it and the one before it.
  auto result = testing::ReadJson(dir / "run/result.json");
  const auto snaps = worker::ListSnapshots(dir / "run/snapshots");
  ASSERT_EQ(result["snapshots"].get<size_t>(), snaps.size());
  ASSERT_GT(snaps.size(), 8u) << "too few snapshots to thin";
  const auto& curve = result["accuracy_curve"];
  EXPECT_GE(curve.size(), 4u);
  EXPECT_LE(curve.size(), 24u) << curve.dump();  // 4 per level, 5 levels would cover 1,024 snapshots
  auto index_of = [&](const nlohmann::json& point) {
    for (size_t k = 0; k < snaps.size(); ++k)
      if (snaps[k].step == point[1].get<int64_t>()) return k;
    return snaps.size();
  };
  size_t first = curve.size();
  for (size_t i = 0; i < curve.size() && first == curve.size(); ++i)
    if (curve[i][2].get<double>() >= 0.8) first = i;
  ASSERT_LT(first, curve.size()) << curve.dump();
  EXPECT_DOUBLE_EQ(result["seconds_to_target"].get<double>(), curve[first][0].get<double>());
  // The snapshot before the first to reach the target was scored too.
  if (index_of(curve[first]) > 0) {
    ASSERT_GT(first, 0u) << curve.dump();
    EXPECT_EQ(index_of(curve[first - 1]) + 1, index_of(curve[first])) << curve.dump();
  }
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

// The small job the exactness tests run: an MLP, 3 workers, 2 shards.
const std::vector<std::string> kExactJob = {"model.name=mlp",
                                            "model.mlp_hidden=[32]",
                                            "training.steps=12",
                                            "data.batch_size=32",
                                            "wire.chunk_bytes=4096",
                                            "seed=3",
                                            "regions.us-east.workers=1",
                                            "eval.test_samples=1000"};

// Launches the exact job with `extra` overrides; returns the job as run.
JobSpec LaunchExact(const std::filesystem::path& run, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"launch", Example(), "--run-dir", run, "--quiet"};
  for (const auto& sets : {kExactJob, extra})
    for (const auto& s : sets) {
      args.push_back("--set");
      args.push_back(s);
    }
  auto r = RunGeodesic(args, 300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto job = LoadJobFile(run / "job.yaml");
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return JobSpec{};
  EXPECT_EQ(job->NumWorkers(), 3);
  EXPECT_EQ(job->NumServers(), 2);
  return *job;
}

// Every worker's partition and batch order, as the workers draw them.
struct Workers {
  std::unique_ptr<worker::FlatModel> model;
  std::vector<torch::Tensor> images, labels;
  std::vector<worker::BatchSampler> samplers;

  explicit Workers(const JobSpec& job) : model(std::move(worker::FlatModel::Create(job.model, job.seed).value())) {
    torch::set_num_threads(1);
    auto train = worker::LoadFashionMnist(job.data.path, "train");
    EXPECT_TRUE(train.ok());
    for (int w = 0; w < job.NumWorkers(); ++w) {
      auto part = worker::IidPartition(train->count, job.NumWorkers(), w, job.seed);
      images.push_back(worker::ImagesTensor(*train, &part));
      labels.push_back(worker::LabelsTensor(*train, &part));
      std::vector<int64_t> local(part.size());
      for (size_t i = 0; i < local.size(); ++i) local[i] = static_cast<int64_t>(i);
      samplers.emplace_back(std::move(local), job.data.batch_size, worker::SamplerSeed(job.seed, w));
    }
  }
  // Worker w's gradient at `params` on its next batch.
  torch::Tensor Gradient(int w, const torch::Tensor& params) {
    {
      torch::NoGradGuard ng;
      model->params().copy_(params);
    }
    torch::Tensor g = model->NewGradBuffer();
    const auto& idx = samplers[w].Next();
    torch::Tensor sel = torch::tensor(idx, torch::kInt64);
    auto loss = torch::nn::functional::cross_entropy(model->Forward(images[w].index_select(0, sel)),
                                                     labels[w].index_select(0, sel));
    loss.backward();
    return g.clone();
  }
};

// The final parameters the evaluator dumped, against `expect`: equal but
// for float rounding, and training moved them (so equality means something).
void ExpectFinalParams(const std::filesystem::path& run, const JobSpec& job, const torch::Tensor& expect) {
  std::ifstream in(run / "final_params.bin", std::ios::binary);
  std::vector<float> got(static_cast<size_t>(expect.numel()));
  ASSERT_TRUE(in.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>(got.size() * 4)));
  torch::Tensor ours = torch::from_blob(got.data(), {expect.numel()});
  double max_diff = (ours - expect).abs().max().item<double>();
  std::cout << run.filename().string() << ": max |geodesic - by hand| = " << max_diff << std::endl;
  EXPECT_LT(max_diff, 1e-5);
  auto init = std::move(worker::FlatModel::Create(job.model, job.seed).value());
  EXPECT_GT((expect - init->params()).abs().max().item<double>(), 1e-3);
}

// Worker 0's snapshots (the accuracy curve) of a local-SGD run: each named
// by the rounds its values hold (step = rounds * local_steps), whenever the
// worker took that model in, with overlapped rounds too; one per round.
void ExpectSnapshotsHoldTheirRounds(const std::filesystem::path& run, const std::vector<torch::Tensor>& after_rounds,
                                    int local_steps) {
  const std::vector<worker::SnapshotInfo> snaps = worker::ListSnapshots(run / "snapshots");
  std::vector<int64_t> steps;
  double last_s = 0;
  for (const worker::SnapshotInfo& snap : snaps) {
    steps.push_back(snap.step);
    EXPECT_GE(snap.seconds, last_s) << snap.path;
    last_s = snap.seconds;
    const size_t rounds = static_cast<size_t>(snap.step / local_steps);
    ASSERT_LT(rounds, after_rounds.size()) << snap.path;
    std::vector<float> values;
    ASSERT_TRUE(worker::ReadSnapshot(snap.path, after_rounds[rounds].numel(), &values).ok()) << snap.path;
    const double diff = (torch::from_blob(values.data(), {after_rounds[rounds].numel()}) - after_rounds[rounds])
                            .abs()
                            .max()
                            .item<double>();
    EXPECT_LT(diff, 1e-5) << snap.path << " does not hold the model after " << rounds << " rounds";
  }
  std::vector<int64_t> want;
  for (size_t r = 0; r + 1 < after_rounds.size(); ++r) want.push_back(static_cast<int64_t>(r) * local_steps);
  EXPECT_EQ(steps, want) << "one snapshot per model pulled, the last round's average being the final model";
}

TEST(TrainingTest, BspMatchesSynchronousSgd) {
  TempDir dir;
  JobSpec job = LaunchExact(dir / "run", {"training.staleness_bound=0"});
  ASSERT_EQ(job.NumWorkers(), 3);
  // Synchronous SGD by hand: every step, each worker's gradient on the same
  // parameters, averaged, one torch::optim::SGD step.
  Workers workers(job);
  torch::Tensor flat = workers.model->params().clone().set_requires_grad(true);
  torch::optim::SGD sgd({flat}, torch::optim::SGDOptions(job.optimizer.lr).momentum(job.optimizer.momentum));
  for (int step = 0; step < job.training.steps; ++step) {
    torch::Tensor sum = torch::zeros_like(flat);
    for (int w = 0; w < 3; ++w) sum += workers.Gradient(w, flat.detach());
    flat.mutable_grad() = sum / 3.0;
    sgd.step();
  }
  ExpectFinalParams(dir / "run", job, flat.detach());
}

// Local SGD, three ways of averaging, against the algorithm written out:
// every worker takes local_steps momentum-SGD steps on its own model, the
// shards average the rounds' progress (outer step 1). Without overlap each
// round starts from that average; with overlap a worker starts the next
// round at once and, when it ends, adds its progress since to the average
// of the round before (which is what had arrived by then); with
// overlap_steps 1 it waits for that average after the next round's first
// step and folds it in there (so the merge point, and the result, do not
// depend on timing). 12 steps in rounds of 5 (the last round has 2).
TEST(TrainingTest, LocalStepsMatchLocalSgdByHand) {
  enum Mode { kPlain, kOverlap, kOverlapOneStep };
  for (Mode mode : {kPlain, kOverlap, kOverlapOneStep}) {
    const char* name[] = {"plain", "overlap", "overlap-one-step"};
    SCOPED_TRACE(name[mode]);
    TempDir dir;
    const std::filesystem::path run = dir / name[mode];
    JobSpec job = LaunchExact(run, {"training.staleness_bound=0", "training.local_steps=5",
                                    std::string("training.overlap_rounds=") + (mode == kPlain ? "false" : "true"),
                                    std::string("training.overlap_steps=") + (mode == kOverlapOneStep ? "1" : "0"),
                                    "eval.snapshot_every_s=0.000001"});  // a snapshot every clock
    ASSERT_EQ(job.NumWorkers(), 3);
    ASSERT_EQ(job.ClocksPerWorker(), 3);
    Workers workers(job);
    const double lr = job.optimizer.lr, mu = job.optimizer.momentum;
    ASSERT_GT(mu, 0);
    torch::Tensor global = workers.model->params().detach().clone();
    std::vector<torch::Tensor> after_rounds = {global.clone()};  // the shards' model after 0, 1, ... rounds
    std::vector<torch::Tensor> model(3), base(3), velocity(3);
    for (int w = 0; w < 3; ++w) {
      model[w] = global.clone();
      base[w] = global.clone();
      velocity[w] = torch::zeros_like(global);
    }
    for (int64_t c = 0; c < job.ClocksPerWorker(); ++c) {
      torch::Tensor mean = torch::zeros_like(global);
      for (int w = 0; w < 3; ++w) {
        for (int64_t k = c * 5; k < std::min<int64_t>(12, (c + 1) * 5); ++k) {
          velocity[w] = mu * velocity[w] + workers.Gradient(w, model[w]);
          model[w] = model[w] - lr * velocity[w];
          if (mode == kOverlapOneStep && c > 0 && k == c * 5) {  // the previous round's average, after one step
            model[w] = global + (model[w] - base[w]);
            base[w] = global.clone();
          }
        }
        torch::Tensor progress = model[w] - base[w];
        if (mode == kOverlap && c > 0) model[w] = global + progress;
        base[w] = model[w].clone();
        mean += progress / 3.0;
      }
      global = global + mean;
      after_rounds.push_back(global.clone());
      if (mode == kPlain)
        for (int w = 0; w < 3; ++w) model[w] = base[w] = global.clone();
    }
    ExpectFinalParams(run, job, global);
    ExpectSnapshotsHoldTheirRounds(run, after_rounds, 5);
    if (mode == kOverlapOneStep) {
      // Every round after the first folded its average in mid-round.
      for (int w = 0; w < 3; ++w) {
        auto stats = testing::ReadJson(run / "stats" / ("worker-" + std::to_string(w) + ".json"));
        EXPECT_EQ(stats["early_merges"], "2") << stats.dump();  // int64 is a string in protobuf's JSON
      }
    }
  }
}

// Streaming local SGD (training.fragments 2) against the algorithm written
// out: the chunks are cut into two contiguous fragments; clock 0
// synchronizes the first, clock 1 the second, and the last clock both, each
// fragment pushing its progress since its own last synchronization. Without
// overlap a synchronized fragment restarts from its average; with
// overlap_steps 1 the average is folded in after the next clock's first
// step, under the progress made since. 12 steps in rounds of 5.
TEST(TrainingTest, FragmentsMatchStreamingLocalSgdByHand) {
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap-one-step" : "plain");
    TempDir dir;
    const std::filesystem::path run = dir / (overlap ? "overlap" : "plain");
    JobSpec job = LaunchExact(run, {"training.staleness_bound=0", "training.local_steps=5", "training.fragments=2",
                                    std::string("training.overlap_rounds=") + (overlap ? "true" : "false"),
                                    std::string("training.overlap_steps=") + (overlap ? "1" : "0")});
    ASSERT_EQ(job.ClocksPerWorker(), 3);
    Workers workers(job);
    const double lr = job.optimizer.lr, mu = job.optimizer.momentum;
    torch::Tensor global = workers.model->params().detach().clone();
    const int64_t n = global.numel();
    const cluster::ChunkLayout layout(static_cast<uint64_t>(n), static_cast<uint64_t>(job.wire.chunk_bytes / 4));
    ASSERT_GE(layout.num_chunks(), 2u);
    // Fragment f's values; the last clock takes all of them.
    auto span = [&](int64_t clock) -> std::pair<int64_t, int64_t> {
      if (clock == 2) return {0, n};
      cluster::ChunkRange r = cluster::FragmentChunks(layout, 2, static_cast<int>(clock));
      const int64_t b = static_cast<int64_t>(layout.Begin(r.begin));
      return {b, static_cast<int64_t>(layout.Begin(r.end - 1) + layout.Size(r.end - 1)) - b};
    };
    std::vector<torch::Tensor> model(3), base(3), velocity(3);
    for (int w = 0; w < 3; ++w) model[w] = global.clone(), base[w] = global.clone(), velocity[w] = global * 0;
    for (int64_t c = 0; c < 3; ++c) {
      auto [b, len] = span(c);
      torch::Tensor mean = torch::zeros({len});
      for (int w = 0; w < 3; ++w) {
        for (int64_t k = c * 5; k < std::min<int64_t>(12, (c + 1) * 5); ++k) {
          velocity[w] = mu * velocity[w] + workers.Gradient(w, model[w]);
          model[w] = model[w] - lr * velocity[w];
          if (overlap && c > 0 && k == c * 5) {  // the previous clock's fragment, after one step
            auto [pb, plen] = span(c - 1);
            model[w].narrow(0, pb, plen).copy_(global.narrow(0, pb, plen) + (model[w] - base[w]).narrow(0, pb, plen));
            base[w].narrow(0, pb, plen).copy_(global.narrow(0, pb, plen));
          }
        }
        mean += (model[w] - base[w]).narrow(0, b, len) / 3.0;
        base[w].narrow(0, b, len).copy_(model[w].narrow(0, b, len));
      }
      global.narrow(0, b, len).add_(mean);
      if (!overlap)
        for (int w = 0; w < 3; ++w) {
          model[w].narrow(0, b, len).copy_(global.narrow(0, b, len));
          base[w].narrow(0, b, len).copy_(global.narrow(0, b, len));
        }
    }
    ExpectFinalParams(run, job, global);
  }
}

// One worker's AdamW inside DiLoCo's rounds, written out as torch.optim
// documents it (decoupled decay, then the bias-corrected Adam step).
struct AdamWByHand {
  torch::Tensor m, v;
  int64_t t = 0;
  void Step(torch::Tensor& p, const torch::Tensor& g, const OptimizerSpec& o, double lr) {
    if (!m.defined()) m = torch::zeros_like(p), v = torch::zeros_like(p);
    ++t;
    p.mul_(1 - lr * o.weight_decay);
    m.mul_(o.beta1).add_(g, 1 - o.beta1);
    v.mul_(o.beta2).addcmul_(g, g, 1 - o.beta2);
    const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
    p.addcdiv_(m, (v.sqrt() / std::sqrt(bc2)).add_(o.eps), -lr / bc1);
  }
};

// DiLoCo's recipe through `geodesic launch`, against the algorithm written
// out: rounds of 5 AdamW steps (warm-up and cosine over the 12 steps,
// gradients clipped to norm 0.5), the rounds' averaged progress taken by
// an outer SGD step with Nesterov momentum.
TEST(TrainingTest, DilocoRoundsMatchTheRecipeByHand) {
  TempDir dir;
  JobSpec job = LaunchExact(
      dir / "run", {"training.staleness_bound=0", "training.local_steps=5", "training.overlap_rounds=false",
                    "optimizer.name=adamw", "optimizer.lr=0.003", "optimizer.weight_decay=0.1", "optimizer.warmup=0.25",
                    "optimizer.schedule=cosine", "optimizer.clip_norm=0.5", "training.outer_lr=0.7",
                    "training.outer_momentum=0.9", "training.outer_nesterov=true"});
  ASSERT_EQ(job.ClocksPerWorker(), 3);
  Workers workers(job);
  const OptimizerSpec& inner = job.optimizer;
  const double outer_lr = 0.7, mu = 0.9;
  torch::Tensor global = workers.model->params().detach().clone(), outer_buf = torch::zeros_like(global);
  std::vector<AdamWByHand> adam(3);
  std::vector<int64_t> clipped(3, 0);
  for (int64_t c = 0; c < job.ClocksPerWorker(); ++c) {
    torch::Tensor mean_push = torch::zeros_like(global);
    for (int w = 0; w < 3; ++w) {
      torch::Tensor model = global.clone();
      for (int64_t k = c * 5; k < std::min<int64_t>(12, (c + 1) * 5); ++k) {
        torch::Tensor g = workers.Gradient(w, model);
        const double norm = g.norm().item<double>();
        if (0.5 / (norm + 1e-6) < 1) g.mul_(0.5 / (norm + 1e-6)), ++clipped[w];
        adam[w].Step(model, g, inner, inner.lr * LearningRateFactor(inner, k, 12));
      }
      mean_push += (global - model) / 3.0;  // the pushed "gradient": base - model
    }
    outer_buf = mu * outer_buf + mean_push;
    global = global - outer_lr * (mean_push + mu * outer_buf);
  }
  EXPECT_GT(clipped[0], 0);  // the clipping was exercised
  ExpectFinalParams(dir / "run", job, global);
  auto w0 = testing::ReadJson(dir / "run/stats/worker-0.json");
  ASSERT_TRUE(w0.is_object());
  ASSERT_TRUE(w0.contains("clipped_steps")) << w0.dump();
  EXPECT_EQ(w0["clipped_steps"], std::to_string(clipped[0]));  // int64 is a string in protobuf's JSON
}

// A model of the user's own: a BatchNorm CNN exported from PyTorch, trained
// through `geodesic launch`; PyTorch, given the run's final parameters and
// the same buffer recompute, gets the same test accuracy.
TEST(TrainingTest, TorchScriptModelTrainsAndPyTorchAgrees) {
  TempDir dir;
  const std::string module = dir / "cnn_bn.pt";
  const std::string export_cmd = "/usr/bin/python3 " +
                                 ::geodesic::testing::SourcePath("scripts/export_model.py cnn-bn ") + module +
                                 " > /dev/null";
  ASSERT_EQ(std::system(export_cmd.c_str()), 0) << export_cmd;
  auto r = RunGeodesic({"launch", Example(), "--run-dir", dir / "run", "--quiet", "--set", "model.name=torchscript",
                        "--set", "model.path=" + module, "--set", "training.steps=300", "--set",
                        "eval.test_samples=5000", "--set", "eval.buffer_samples=2048"},
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto s = testing::ReadJson(dir / "run/summary.json");
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["status"], "finished");
  EXPECT_EQ(s["model"]["name"], "torchscript");
  EXPECT_EQ(s["model"]["path"], module);
  EXPECT_EQ(s["model"]["parameters"].get<int64_t>(), 12858);
  EXPECT_EQ(s["model"]["buffers"]["values"].get<int64_t>(), 98);
  const double acc = s["test_accuracy"].get<double>();
  EXPECT_GT(acc, 0.75);

  const std::string eval_cmd = "/usr/bin/python3 " + ::geodesic::testing::SourcePath("scripts/evaluate_params.py ") +
                               (dir / "run") + " > " + (dir / "pytorch.json");
  ASSERT_EQ(std::system(eval_cmd.c_str()), 0) << eval_cmd;
  auto py = testing::ReadJson(dir / "pytorch.json");
  std::cout << "torchscript cnn-bn, 300 steps: geodesic " << acc << ", pytorch " << py.dump() << std::endl;
  EXPECT_EQ(py["parameters"].get<int64_t>(), 12858);
  // Same weights, buffers and images; float sums in another order may flip
  // an argmax or two of 5000.
  EXPECT_NEAR(py["test_accuracy"].get<double>(), acc, 2.0 / 5000);
}

// The readers are lossless: the same job on Fashion-MNIST's IDX files and on
// their safetensors conversion, and on generated CIFAR-10-format files and
// theirs, ends at the same accuracy (BSP is deterministic); the CIFAR-format
// run, with augmentation, learns.
TEST(TrainingTest, DatasetFormatsAreLossless) {
  TempDir dir;
  const std::string convert = "/usr/bin/python3 " + ::geodesic::testing::SourcePath("scripts/convert_dataset.py ");
  for (const std::string& cmd :
       {convert + "fashion-mnist /usr/share/datasets/fashion-mnist " + (dir / "fm"),
        convert + "generate-cifar10 " + (dir / "cifar") + " --train 3000 --test 1000 --batches 2",
        convert + "cifar10 " + (dir / "cifar") + " " + (dir / "cifar-st")})
    ASSERT_EQ(std::system((cmd + " > /dev/null").c_str()), 0) << cmd;
  auto run = [&](const std::string& name, const std::vector<std::string>& sets) {
    std::vector<std::string> args = {"launch",
                                     Example(),
                                     "--run-dir",
                                     dir / name,
                                     "--quiet",
                                     "--set",
                                     "model.name=mlp",
                                     "--set",
                                     "model.mlp_hidden=[64]",
                                     "--set",
                                     "training.steps=150",
                                     "--set",
                                     "eval.snapshot_every_s=1000"};
    for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
    auto r = RunGeodesic(args, 240);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto s = testing::ReadJson(dir / (name + "/summary.json"));
    return s.is_object() ? s["test_accuracy"].get<double>() : -1.0;
  };
  const double idx = run("idx", {}), st = run("st", {"data.dataset=safetensors", "data.path=" + (dir / "fm")});
  std::cout << "fashion-mnist: idx " << idx << ", safetensors " << st << std::endl;
  EXPECT_GT(idx, 0.7);
  EXPECT_EQ(st, idx);
  const std::vector<std::string> aug = {"data.augment.crop=2", "data.augment.flip=true"};
  std::vector<std::string> cifar = {"data.dataset=cifar10", "data.path=" + (dir / "cifar")};
  cifar.insert(cifar.end(), aug.begin(), aug.end());
  std::vector<std::string> cifar_st = {"data.dataset=safetensors", "data.path=" + (dir / "cifar-st")};
  cifar_st.insert(cifar_st.end(), aug.begin(), aug.end());
  const double c = run("cifar", cifar), cs = run("cifar-st", cifar_st);
  std::cout << "generated cifar10 format: binary " << c << ", safetensors " << cs << std::endl;
  EXPECT_GT(c, 0.3);  // ten classes: chance is 0.1
  EXPECT_EQ(cs, c);
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
