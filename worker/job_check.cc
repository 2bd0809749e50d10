#include "worker/job_check.h"

#include "worker/dataset.h"
#include "worker/examples.h"
#include "worker/model.h"
#include "worker/tokens.h"

namespace geodesic::worker {
namespace {

// The samples the job's model takes: both splits of its dataset read and
// checked (same shape, classes, the count epochs are taken over), so that
// a missing or malformed file is one clear error before anything starts.
// Token data: both splits read (ids below data.vocab, whole ids, documents
// in order), the windows epochs are counted over, and the partition drawn.
// The shape's vocabulary covers the largest id of either split.
StatusOr<SampleShape> CheckTokens(const JobSpec& job) {
  GD_ASSIGN_OR_RETURN(TokenSet test, LoadTokens(job.data, "test"));
  GD_ASSIGN_OR_RETURN(TokenSet train, LoadTokens(job.data, "train"));
  if (job.federated.enabled()) {
    auto clients = PartitionWindows(train, static_cast<int>(job.federated.clients), job.data.partition, job.seed,
                                    job.data.batch_size);
    if (!clients.ok()) return InvalidArgument("data.partition over federated.clients: " + clients.status().message());
    return ShapeOf(test.max_token > train.max_token ? test : train, job.data);
  }
  GD_RETURN_IF_ERROR(CheckTokenEpochs(job, train));
  GD_RETURN_IF_ERROR(PartitionWindows(train, job.NumWorkers(), job.data.partition, job.seed).status());
  return ShapeOf(test.max_token > train.max_token ? test : train, job.data);
}

StatusOr<SampleShape> CheckData(const JobSpec& job) {
  if (job.model.name == ModelKind::kSynthetic) return SampleShape{};
  if (job.data.dataset == DatasetKind::kTokens) return CheckTokens(job);
  GD_ASSIGN_OR_RETURN(ImageSet test, LoadDataset(job.data, "test"));
  GD_ASSIGN_OR_RETURN(ImageSet train, LoadDataset(job.data, "train"));
  GD_RETURN_IF_ERROR(CheckTrainingSet(job, train));
  const SampleShape a = ShapeOf(train), b = ShapeOf(test);
  if (a.ToString() != b.ToString())
    return InvalidArgument("data.path: " + job.data.path + ": the training set has " + a.ToString() +
                           ", the test set " + b.ToString());
  return a;
}

}  // namespace

Status CheckDevice(const JobSpec& job, std::string* chose) {
  return ResolveDevice(job.training.device, chose).status();
}

StatusOr<wire::ModelSignature> CheckModelOnData(const JobSpec& job) {
  GD_ASSIGN_OR_RETURN(SampleShape shape, CheckData(job));
  GD_ASSIGN_OR_RETURN(std::unique_ptr<FlatModel> model, FlatModel::Create(job.model, job.seed, torch::kCPU, shape));
  return model->signature();
}

}  // namespace geodesic::worker
