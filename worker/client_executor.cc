#include "worker/client_executor.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstring>

#include "common/draws.h"
#include "compression/codec.h"
#include "worker/batcher.h"
#include "worker/examples.h"
#include "worker/model.h"
#include "worker/objective.h"

namespace geodesic::worker {

struct ClientExecutor::Impl {
  std::unique_ptr<FlatModel> model;
  torch::Tensor grad;
  Examples train;
  std::vector<float> momentum;
  uint64_t seed = 0;
  int batch_size = 0;
  LocalOptimizerSpec local;
  AugmentSpec augment;

  int64_t Steps(const ClientRound& r) const {
    return LocalStepsFor(static_cast<int64_t>(r.indices->size()), batch_size, r.local_epochs, r.local_steps);
  }

  // One minibatch's loss and gradient into `grad`, its images augmented
  // with draws from `augment_seed`; false when not finite.
  bool Gradient(const std::vector<int64_t>& batch, uint64_t augment_seed, double* loss, double* accuracy) {
    grad.zero_();
    torch::Tensor sel =
        torch::from_blob(const_cast<int64_t*>(batch.data()), {static_cast<int64_t>(batch.size())}, torch::kInt64);
    Examples b = train.Rows(sel);
    if (!b.tokens()) Augment(b.x, augment, augment_seed);
    BatchScore s = model->Score(b.x, b.y);
    s.loss.backward();
    *loss = s.loss.item<double>();
    *accuracy = s.accuracy.value_or(-1.0);
    return std::isfinite(*loss) && compression::CountNonFinite(grad.data_ptr<float>(), grad.numel()) == 0;
  }

  // Accuracy of the model as it is on the first `count` of `indices`.
  double Accuracy(const std::vector<int64_t>& indices, int64_t count) {
    count = std::min<int64_t>(count, static_cast<int64_t>(indices.size()));
    torch::Tensor sel = torch::from_blob(const_cast<int64_t*>(indices.data()), {count}, torch::kInt64);
    const Examples e = train.Rows(sel);
    return ScoreOn(*model, e.x, e.y).accuracy.value_or(-1.0);
  }
};

ClientExecutor::ClientExecutor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClientExecutor::~ClientExecutor() = default;

StatusOr<std::unique_ptr<ClientExecutor>> ClientExecutor::Create(const ModelSpec& model, uint64_t seed,
                                                                 const Examples& train, const SampleShape& shape,
                                                                 int batch_size, const LocalOptimizerSpec& local,
                                                                 const AugmentSpec& augment) {
  if (batch_size < 1) return InvalidArgument("batch size must be at least 1");
  auto impl = std::make_unique<Impl>();
  GD_ASSIGN_OR_RETURN(impl->model, FlatModel::Create(model, seed, torch::kCPU, shape));
  if (!impl->model->has_network()) return InvalidArgument("federated clients need a model with a network");
  impl->grad = impl->model->NewGradBuffer();
  impl->train = train;
  // Its buffers, if any, follow its own data (docs/models.md).
  if (!train.tokens()) impl->model->SetBufferImages(train.Head(EvalSpec{}.buffer_samples).x);
  impl->seed = seed;
  impl->batch_size = batch_size;
  impl->local = local;
  impl->augment = augment;
  if (local.momentum != 0) impl->momentum.assign(impl->model->num_params(), 0.0f);
  return std::unique_ptr<ClientExecutor>(new ClientExecutor(std::move(impl)));
}

int64_t ClientExecutor::num_params() const { return impl_->model->num_params(); }

StatusOr<ClientOutcome> ClientExecutor::Train(const float* global, const ClientRound& r) {
  Impl& m = *impl_;
  if (!r.indices || static_cast<int64_t>(r.indices->size()) < m.batch_size)
    return InvalidArgument("client " + std::to_string(r.client) + " has fewer samples than one batch");
  const int64_t n = num_params();
  float* y = m.model->params().data_ptr<float>();
  std::memcpy(y, global, n * sizeof(float));
  std::fill(m.momentum.begin(), m.momentum.end(), 0.0f);
  ClientOutcome out;
  if (r.eval_samples > 0 && m.model->objective().classifies()) {
    const auto e0 = std::chrono::steady_clock::now();
    out.eval_accuracy = m.Accuracy(*r.indices, r.eval_samples);
    out.eval_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
  }
  const uint64_t client_seed = ClientSeed(m.seed, r.client, r.round);
  BatchSampler sampler(*r.indices, m.batch_size, client_seed);
  out.steps = m.Steps(r);
  double loss_sum = 0, accuracy_sum = 0;
  for (int64_t k = 0; k < out.steps; ++k) {
    const std::vector<int64_t>& batch = sampler.Next();
    double loss = 0, accuracy = 0;
    if (!m.Gradient(batch, AugmentSeed(client_seed, 0, k), &loss, &accuracy)) {
      out.finite = false;
      return out;
    }
    LocalStep(y, m.grad.data_ptr<float>(), global, r.correction, m.momentum.empty() ? nullptr : m.momentum.data(), n,
              m.local);
    loss_sum += loss;
    accuracy_sum += accuracy;
    out.samples += static_cast<int64_t>(batch.size());
  }
  out.mean_loss = loss_sum / static_cast<double>(out.steps);
  out.mean_accuracy = accuracy_sum / static_cast<double>(out.steps);
  out.delta.resize(n);
  for (int64_t j = 0; j < n; ++j) out.delta[j] = y[j] - global[j];
  if (compression::CountNonFinite(out.delta.data(), n) != 0) {
    out.finite = false;
    out.delta.clear();
    return out;
  }
  if (r.server_control) {
    out.control_delta.resize(n);
    ScaffoldControlDelta(r.server_control, global, y, out.steps, m.local.lr, n, out.control_delta.data());
  }
  return out;
}

int64_t LocalStepsFor(int64_t samples, int batch_size, double local_epochs, int64_t local_steps) {
  if (local_steps > 0) return local_steps;
  const int64_t batches = samples / batch_size;
  return std::max<int64_t>(1, static_cast<int64_t>(std::floor(local_epochs * static_cast<double>(batches))));
}

uint64_t ClientSeed(uint64_t job_seed, int64_t client, int64_t round) {
  constexpr uint64_t kBatchStream = 0x6261746368;  // "batch"
  return DrawKey({job_seed, kBatchStream, static_cast<uint64_t>(client), static_cast<uint64_t>(round)});
}

}  // namespace geodesic::worker
