#include "worker/steps/partition_batches.h"

#include <cmath>

#include "common/log.h"
#include "compression/codec.h"
#include "worker/model.h"
#include "worker/partition.h"

namespace geodesic::worker {
namespace {

StatusOr<TrainingPart> ImagePart(const JobSpec& job, int id) {
  GD_ASSIGN_OR_RETURN(ImageSet train, LoadDataset(job.data, "train"));
  GD_RETURN_IF_ERROR(CheckTrainingSet(job, train));
  // Every part gets at least one full batch, which the batch sampler needs.
  StatusOr<Partition> split = PartitionSamples(train.labels, train.classes, job.NumWorkers(), job.data.partition,
                                               job.seed, job.data.batch_size);
  if (!split.ok()) return InvalidArgument("data.partition: " + split.status().message());
  TrainingPart part;
  part.shape = ShapeOf(train);
  part.split_samples = train.count;
  part.digest = PartitionDigest(*split);
  part.labels = LabelCounts(*split, train.labels, train.classes)[id];
  part.examples = ImageExamples(train, &(*split)[id]);
  return part;
}

StatusOr<TrainingPart> TokenPart(const JobSpec& job, int id) {
  GD_ASSIGN_OR_RETURN(TokenSet train, LoadTokens(job.data, "train"));
  GD_RETURN_IF_ERROR(CheckTokenEpochs(job, train));
  GD_ASSIGN_OR_RETURN(Partition split, PartitionWindows(train, job.NumWorkers(), job.data.partition, job.seed));
  TrainingPart part;
  part.shape = ShapeOf(train, job.data);
  part.split_samples = train.windows();
  part.digest = PartitionDigest(split);
  part.examples = TokenExamples(train, &split[id]);
  return part;
}

}  // namespace

StatusOr<TrainingPart> LoadTrainingPart(const JobSpec& job, int id) {
  return job.data.dataset == DatasetKind::kTokens ? TokenPart(job, id) : ImagePart(job, id);
}

bool BatchGradient(StepEnv& env, FlatModel& model, Examples batch, int64_t step, torch::Tensor& grad) {
  const JobSpec& job = env.job;
  if (!batch.tokens()) Augment(batch.x, job.data.augment, AugmentSeed(job.seed, env.id, step));
  BatchScore score = model.Score(batch.x, batch.y);
  score.loss.backward();
  const double l = score.loss.item<double>();
  bool usable = std::isfinite(l) && compression::CountNonFinite(grad.data_ptr<float>(), model.num_params()) == 0;
  StepCounters& n = env.n;
  if (usable && ClipGradient(grad, job.optimizer.clip_norm)) ++n.clipped;
  if (usable) {
    n.loss_ema = n.loss_ema < 0 ? l : 0.95 * n.loss_ema + 0.05 * l;
    if (score.accuracy) n.acc_ema = n.acc_ema < 0 ? *score.accuracy : 0.95 * n.acc_ema + 0.05 * *score.accuracy;
  }
  n.samples += batch.size();
  return usable;
}

std::unique_ptr<PartitionBatches> PartitionBatches::Create(StepEnv& env, TrainingPart part) {
  const JobSpec& job = env.job;
  std::unique_ptr<PartitionBatches> b(new PartitionBatches(env));
  const int64_t n = part.examples.size();
  std::vector<int64_t> local(n);
  for (int64_t i = 0; i < n; ++i) local[i] = i;
  b->sampler_ = std::make_unique<BatchSampler>(std::move(local), job.data.batch_size, SamplerSeed(job.seed, env.id));
  GD_LOG(INFO) << "partition: " << n << " of " << part.split_samples << " training "
               << (part.examples.tokens() ? "windows" : "samples") << " (" << ToString(job.data.partition)
               << ", digest " << part.digest << ")";
  b->part_ = std::move(part);
  return b;
}

bool PartitionBatches::Gradient(FlatModel& model, int64_t step, torch::Tensor& grad) {
  return BatchGradient(env_, model, part_.examples.Rows(sampler_->Next()), step, grad);
}

void PartitionBatches::Skip(int64_t from, int64_t to) {
  for (int64_t k = from; k < to; ++k) sampler_->Next();
}

void PartitionBatches::AddDataStats(stats::WorkerStats* s) const {
  s->set_partition(ToString(env_.job.data.partition));
  s->set_partition_digest(part_.digest);
  s->set_partition_samples(part_.examples.size());
  for (int64_t n : part_.labels) s->add_partition_labels(n);
}

}  // namespace geodesic::worker
