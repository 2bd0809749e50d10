#include "worker/steps/image_batches.h"

#include <cmath>

#include "common/log.h"
#include "compression/codec.h"
#include "worker/model.h"
#include "worker/partition.h"

namespace geodesic::worker {
namespace {

// This worker's part of the training set (data.partition), and what the
// stats report about the whole split.
struct DrawnPart {
  std::vector<int64_t> indices;
  std::string digest;
  std::vector<int64_t> labels;  // samples per label
};

StatusOr<DrawnPart> DrawPart(const ImageSet& train, const JobSpec& job, int id) {
  // Every part gets at least one full batch, which the batch sampler needs.
  StatusOr<Partition> split = PartitionSamples(train.labels, train.classes, job.NumWorkers(), job.data.partition,
                                               job.seed, job.data.batch_size);
  if (!split.ok()) return InvalidArgument("data.partition: " + split.status().message());
  DrawnPart mine;
  mine.digest = PartitionDigest(*split);
  mine.labels = LabelCounts(*split, train.labels, train.classes)[id];
  mine.indices = std::move((*split)[id]);
  return mine;
}

}  // namespace

bool ImageGradient(StepEnv& env, FlatModel& model, torch::Tensor x, const torch::Tensor& y, int64_t step,
                   torch::Tensor& grad) {
  const JobSpec& job = env.job;
  Augment(x, job.data.augment, AugmentSeed(job.seed, env.id, step));
  torch::Tensor logits = model.Forward(x);
  torch::Tensor loss = torch::nn::functional::cross_entropy(logits, y);
  loss.backward();
  double l = loss.item<double>();
  double acc = logits.argmax(1).eq(y).to(torch::kFloat32).mean().item<double>();
  bool usable = std::isfinite(l) && compression::CountNonFinite(grad.data_ptr<float>(), model.num_params()) == 0;
  StepCounters& n = env.n;
  if (usable && ClipGradient(grad, job.optimizer.clip_norm)) ++n.clipped;
  if (usable) {
    n.loss_ema = n.loss_ema < 0 ? l : 0.95 * n.loss_ema + 0.05 * l;
    n.acc_ema = n.acc_ema < 0 ? acc : 0.95 * n.acc_ema + 0.05 * acc;
  }
  n.samples += y.size(0);
  return usable;
}

StatusOr<std::unique_ptr<PartitionBatches>> PartitionBatches::Create(StepEnv& env, const ImageSet& train) {
  const JobSpec& job = env.job;
  GD_ASSIGN_OR_RETURN(DrawnPart drawn, DrawPart(train, job, env.id));
  std::unique_ptr<PartitionBatches> b(new PartitionBatches(env));
  std::vector<int64_t>& part = drawn.indices;
  // Keep only this worker's partition, renumbered 0..n-1.
  b->images_ = ImagesTensor(train, &part);
  b->labels_ = LabelsTensor(train, &part);
  b->digest_ = drawn.digest;
  b->labels_per_class_ = drawn.labels;
  std::vector<int64_t> local(part.size());
  for (size_t i = 0; i < local.size(); ++i) local[i] = static_cast<int64_t>(i);
  b->sampler_ = std::make_unique<BatchSampler>(std::move(local), job.data.batch_size, SamplerSeed(job.seed, env.id));
  GD_LOG(INFO) << "partition: " << part.size() << " of " << train.count << " training samples ("
               << ToString(job.data.partition) << ", digest " << drawn.digest << ")";
  return b;
}

bool PartitionBatches::Gradient(FlatModel& model, int64_t step, torch::Tensor& grad) {
  const std::vector<int64_t>& idx = sampler_->Next();
  torch::Tensor sel =
      torch::from_blob(const_cast<int64_t*>(idx.data()), {static_cast<int64_t>(idx.size())}, torch::kInt64);
  return ImageGradient(env_, model, images_.index_select(0, sel), labels_.index_select(0, sel), step, grad);
}

void PartitionBatches::Skip(int64_t from, int64_t to) {
  for (int64_t k = from; k < to; ++k) sampler_->Next();
}

void PartitionBatches::AddDataStats(stats::WorkerStats* s) const {
  s->set_partition(ToString(env_.job.data.partition));
  s->set_partition_digest(digest_);
  s->set_partition_samples(labels_.size(0));
  for (int64_t n : labels_per_class_) s->add_partition_labels(n);
}

}  // namespace geodesic::worker
