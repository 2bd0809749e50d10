#include "worker/plain_training.h"

#include <chrono>

#include "worker/batcher.h"
#include "worker/dataset.h"
#include "worker/model.h"

namespace geodesic::worker {
namespace {

// The timed loop; `snapshots` gets (seconds, flat parameters).
PlainRun Train(const JobSpec& job, FlatModel& model, const ImageSet& train, double max_seconds,
               const std::atomic<bool>* stop, std::vector<std::pair<double, torch::Tensor>>* snapshots) {
  torch::Tensor images = ImagesTensor(train), labels = LabelsTensor(train);
  torch::Tensor flat = model.params();
  torch::optim::SGD sgd(std::vector<torch::Tensor>{flat.set_requires_grad(false)},
                        torch::optim::SGDOptions(job.optimizer.lr).momentum(job.optimizer.momentum));
  std::vector<int64_t> all(train.count);
  for (int64_t i = 0; i < train.count; ++i) all[i] = i;
  BatchSampler sampler(all, job.data.batch_size, SamplerSeed(job.seed, 0));
  using clk = std::chrono::steady_clock;
  const auto start = clk::now();
  double next_snapshot = 0;
  PlainRun r;
  while (!stop->load()) {
    r.seconds = std::chrono::duration<double>(clk::now() - start).count();
    if (r.seconds >= max_seconds) break;
    if (r.seconds >= next_snapshot) {
      snapshots->emplace_back(r.seconds, flat.clone());
      next_snapshot += job.eval.snapshot_every_s;
    }
    torch::Tensor grad = model.NewGradBuffer();
    const auto& idx = sampler.Next();
    torch::Tensor sel =
        torch::from_blob(const_cast<int64_t*>(idx.data()), {static_cast<int64_t>(idx.size())}, torch::kInt64);
    model.Score(images.index_select(0, sel), labels.index_select(0, sel)).loss.backward();
    flat.mutable_grad() = grad;
    sgd.step();
    r.samples += static_cast<int64_t>(idx.size());
    ++r.steps;
  }
  snapshots->emplace_back(r.seconds, flat.clone());
  return r;
}

}  // namespace

StatusOr<PlainRun> TrainPlain(const JobSpec& job, double max_seconds, const std::atomic<bool>* stop) {
  torch::set_num_threads(1);
  GD_ASSIGN_OR_RETURN(ImageSet train, LoadDataset(job.data, "train"));
  GD_ASSIGN_OR_RETURN(ImageSet test, LoadDataset(job.data, "test"));
  torch::Tensor test_images = ImagesTensor(test), test_labels = LabelsTensor(test);
  GD_ASSIGN_OR_RETURN(auto model, FlatModel::Create(job.model, job.seed, torch::kCPU, ShapeOf(train)));
  if (!model->has_network()) return InvalidArgument("plain training needs a model with a network (cnn or mlp)");
  std::vector<std::pair<double, torch::Tensor>> snapshots;
  PlainRun r = Train(job, *model, train, max_seconds, stop, &snapshots);
  torch::Tensor flat = model->params();
  for (auto& [t, p] : snapshots) {
    flat.copy_(p);
    r.curve.emplace_back(t, Evaluate(*model, test_images, test_labels));
  }
  return r;
}

}  // namespace geodesic::worker
