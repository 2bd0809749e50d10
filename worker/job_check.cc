#include "worker/job_check.h"

#include "worker/dataset.h"
#include "worker/model.h"

namespace geodesic::worker {
namespace {

// The samples the job's model takes: both splits of its dataset read and
// checked (same shape, classes, the count epochs are taken over), so that
// a missing or malformed file is one clear error before anything starts.
StatusOr<SampleShape> CheckData(const JobSpec& job) {
  if (job.model.name == ModelKind::kSynthetic) return SampleShape{};
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

StatusOr<int64_t> CheckModelOnData(const JobSpec& job) {
  GD_ASSIGN_OR_RETURN(SampleShape shape, CheckData(job));
  GD_ASSIGN_OR_RETURN(std::unique_ptr<FlatModel> model, FlatModel::Create(job.model, job.seed, torch::kCPU, shape));
  return model->num_params();
}

}  // namespace geodesic::worker
