// Plain LibTorch training, no parameter server: the baseline the PS overhead
// is measured against (`geodesic bench plain-train`, and the processes that
// `geodesic bench ps-overhead` runs side by side).
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "common/files.h"
#include "common/log.h"
#include "config/job.h"
#include "worker/batcher.h"
#include "worker/dataset.h"
#include "worker/model.h"

namespace geodesic::bench {
namespace {

// What the timed loop did; parameters are evaluated after timing stops.
struct Trained {
  std::vector<std::pair<double, torch::Tensor>> snapshots;  // (seconds, flat parameters)
  int64_t samples = 0, steps = 0;
  double seconds = 0;
};

Trained Train(const JobSpec& job, worker::FlatModel& model, const worker::ImageSet& train, double max_seconds,
              const std::atomic<bool>* stop) {
  torch::Tensor images = worker::ImagesTensor(train), labels = worker::LabelsTensor(train);
  torch::Tensor flat = model.params();
  torch::optim::SGD sgd(std::vector<torch::Tensor>{flat.set_requires_grad(false)},
                        torch::optim::SGDOptions(job.optimizer.lr).momentum(job.optimizer.momentum));
  std::vector<int64_t> all(train.count);
  for (int64_t i = 0; i < train.count; ++i) all[i] = i;
  worker::BatchSampler sampler(all, job.data.batch_size, worker::SamplerSeed(job.seed, 0));
  using clk = std::chrono::steady_clock;
  const auto start = clk::now();
  double next_snapshot = 0;
  Trained r;
  while (!stop->load()) {
    r.seconds = std::chrono::duration<double>(clk::now() - start).count();
    if (r.seconds >= max_seconds) break;
    if (r.seconds >= next_snapshot) {
      r.snapshots.emplace_back(r.seconds, flat.clone());
      next_snapshot += job.eval.snapshot_every_s;
    }
    torch::Tensor grad = model.NewGradBuffer();
    const auto& idx = sampler.Next();
    torch::Tensor sel =
        torch::from_blob(const_cast<int64_t*>(idx.data()), {static_cast<int64_t>(idx.size())}, torch::kInt64);
    auto loss =
        torch::nn::functional::cross_entropy(model.Forward(images.index_select(0, sel)), labels.index_select(0, sel));
    loss.backward();
    flat.mutable_grad() = grad;
    sgd.step();
    r.samples += static_cast<int64_t>(idx.size());
    ++r.steps;
  }
  r.snapshots.emplace_back(r.seconds, flat.clone());
  return r;
}

}  // namespace

Status RunPlainTraining(const BenchOptions& options, const std::atomic<bool>* stop) {
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(options.job_file));
  torch::set_num_threads(1);
  GD_ASSIGN_OR_RETURN(worker::ImageSet train, worker::LoadDataset(job.data, "train"));
  GD_ASSIGN_OR_RETURN(worker::ImageSet test, worker::LoadDataset(job.data, "test"));
  torch::Tensor test_images = worker::ImagesTensor(test), test_labels = worker::LabelsTensor(test);
  GD_ASSIGN_OR_RETURN(auto model, worker::FlatModel::Create(job.model, job.seed, torch::kCPU, worker::ShapeOf(train)));
  if (!model->has_network()) return InvalidArgument("plain training needs a model with a network (cnn or mlp)");
  const Trained r = Train(job, *model, train, options.seconds, stop);
  torch::Tensor flat = model->params();
  nlohmann::json curve = nlohmann::json::array();
  nlohmann::json to_target = nullptr;
  for (auto& [t, p] : r.snapshots) {
    flat.copy_(p);
    double acc = worker::Evaluate(*model, test_images, test_labels);
    curve.push_back({t, acc});
    if (to_target.is_null() && acc >= job.eval.target_accuracy) to_target = t;
  }
  nlohmann::json out = {{"samples", r.samples},          {"steps", r.steps},
                        {"seconds", r.seconds},          {"samples_per_second", r.samples / r.seconds},
                        {"accuracy_curve", curve},       {"final_accuracy", curve.back()[1]},
                        {"seconds_to_target", to_target}};
  if (!options.result_file.empty()) GD_RETURN_IF_ERROR(WriteFileAtomic(options.result_file, out.dump(2)));
  std::cout << out.dump(2) << std::endl;
  return Status::Ok();
}

}  // namespace geodesic::bench
