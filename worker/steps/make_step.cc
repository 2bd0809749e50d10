#include "worker/steps/make_step.h"

#include "common/log.h"
#include "worker/dataset.h"
#include "worker/examples.h"
#include "worker/federated_rounds.h"
#include "worker/model.h"
#include "worker/steps/elastic_units.h"
#include "worker/steps/federated_step.h"
#include "worker/steps/local_sgd_step.h"
#include "worker/steps/migration_gate.h"
#include "worker/steps/partition_batches.h"
#include "worker/steps/sgd_step.h"
#include "worker/steps/synthetic_gradients.h"

namespace geodesic::worker {
namespace {

StatusOr<torch::Device> SetUpTorch(const JobSpec& job) {
  torch::set_num_threads(job.training.threads);
  std::string chose;
  GD_ASSIGN_OR_RETURN(torch::Device device, ResolveDevice(job.training.device, &chose));
  GD_LOG(INFO) << "device: " << chose;
  if (device.is_cuda()) GD_LOG(WARNING) << "cuda training keeps parameters on the host between steps";
  return torch::Device(torch::kCPU);  // Debian's LibTorch is CPU-only; the flat buffers live on the host.
}

StatusOr<StepParts> MakeFederated(StepEnv& env, const StepPlace& place, torch::Device device) {
  const JobSpec& job = env.job;
  GD_ASSIGN_OR_RETURN(ClientSplit train, LoadClientSplit(job));
  const SampleShape shape = train.shape;
  GD_ASSIGN_OR_RETURN(std::unique_ptr<FederatedRounds> rounds, FederatedRounds::Create(job, env.id, train));
  GD_LOG(INFO) << "federated: executor " << env.id << " of " << job.NumWorkers() << " for " << job.federated.clients
               << " clients (" << ToString(job.data.partition) << ", digest " << rounds->digest() << "), "
               << job.federated.per_round << " a round";
  GD_ASSIGN_OR_RETURN(std::unique_ptr<FlatModel> model, FlatModel::Create(job.model, job.seed, device, shape));
  StepParts parts;
  parts.step = std::make_unique<FederatedStep>(
      env, std::move(model), std::move(rounds),
      GatewayPlace{.ctx = place.ctx, .bind = place.gateway_bind, .keys = place.keys}, place.traffic);
  parts.gate = std::make_shared<OpenGate>();
  return parts;
}

// The data of a job that trains on minibatches, and its gate.
struct Data {
  std::shared_ptr<Minibatches> batches;
  std::shared_ptr<StepGate> gate;
  SampleShape shape;  // synthetic: none needed
};

StatusOr<Data> LoadData(StepEnv& env) {
  const JobSpec& job = env.job;
  const bool synthetic = job.model.name == ModelKind::kSynthetic;
  Data d;
  if (job.membership.elastic) {
    GD_ASSIGN_OR_RETURN(std::shared_ptr<ElasticUnits> units, ElasticUnits::Create(env));
    d.shape = ShapeOf(units->train());
    d.gate = units;
    if (!synthetic) d.batches = units;
  } else if (!synthetic) {
    GD_ASSIGN_OR_RETURN(TrainingPart part, LoadTrainingPart(job, env.id));
    d.shape = part.shape;
    d.batches = PartitionBatches::Create(env, std::move(part));
  }
  if (synthetic) d.batches = std::make_shared<SyntheticGradients>(env);
  if (!d.gate && job.wan.replan) d.gate = std::make_shared<MigrationGate>(env);
  if (!d.gate) d.gate = std::make_shared<OpenGate>();
  return d;
}

}  // namespace

StatusOr<StepParts> MakeStep(StepEnv& env, const StepPlace& place) {
  const JobSpec& job = env.job;
  GD_ASSIGN_OR_RETURN(torch::Device device, SetUpTorch(job));
  env.clocks = job.ClockLimit();
  env.total_steps = job.StepsPerWorker();
  // Data first: a missing dataset should fail before we join the job.
  if (job.federated.enabled()) return MakeFederated(env, place, device);
  GD_ASSIGN_OR_RETURN(Data data, LoadData(env));
  env.total_steps = data.gate->TotalSteps(env.total_steps);
  GD_ASSIGN_OR_RETURN(std::unique_ptr<FlatModel> model, FlatModel::Create(job.model, job.seed, device, data.shape));
  StepParts parts;
  if (job.training.local_steps > 1)
    parts.step = std::make_unique<LocalSgdStep>(env, std::move(model), std::move(data.batches));
  else
    parts.step = std::make_unique<SgdStep>(env, std::move(model), std::move(data.batches));
  parts.gate = std::move(data.gate);
  return parts;
}

}  // namespace geodesic::worker
