#include "server/strategy.h"

#include <algorithm>
#include <cmath>

namespace geodesic::server {

namespace {

class FedAvg final : public ChunkStrategy {
 public:
  explicit FedAvg(double lr) : lr_(lr) {}
  void Apply(float* x, const float* delta, size_t n) override {
    for (size_t j = 0; j < n; ++j) x[j] = static_cast<float>(x[j] + lr_ * delta[j]);
  }
  ChunkOptimizer::State Save() const override { return {}; }
  bool Load(const ChunkOptimizer::State& s) override { return s.counters.empty() && s.arrays.empty(); }

 private:
  double lr_;
};

class FedAvgM final : public ChunkStrategy {
 public:
  FedAvgM(double lr, double beta, size_t n) : lr_(lr), beta_(beta), v_(n, 0.0f) {}
  void Apply(float* x, const float* delta, size_t n) override {
    for (size_t j = 0; j < n; ++j) {
      v_[j] = static_cast<float>(beta_ * v_[j] + delta[j]);
      x[j] = static_cast<float>(x[j] + lr_ * v_[j]);
    }
  }
  ChunkOptimizer::State Save() const override { return {{}, {v_}}; }
  bool Load(const ChunkOptimizer::State& s) override {
    if (!s.counters.empty() || s.arrays.size() != 1 || s.arrays[0].size() != v_.size()) return false;
    v_ = s.arrays[0];
    return true;
  }

 private:
  double lr_, beta_;
  std::vector<float> v_;
};

// FedAdam, FedYogi and FedAdagrad differ only in the second moment.
class FedAdaptive final : public ChunkStrategy {
 public:
  FedAdaptive(const StrategySpec& s, size_t n) : spec_(s), m_(n, 0.0f), v_(n, static_cast<float>(s.tau * s.tau)) {}
  void Apply(float* x, const float* delta, size_t n) override {
    const double b1 = spec_.beta1, b2 = spec_.beta2;
    for (size_t j = 0; j < n; ++j) {
      const double d = delta[j], d2 = d * d, v = v_[j];
      m_[j] = static_cast<float>(b1 * m_[j] + (1 - b1) * d);
      if (spec_.kind == StrategyKind::kFedAdam)
        v_[j] = static_cast<float>(b2 * v + (1 - b2) * d2);
      else if (spec_.kind == StrategyKind::kFedYogi)
        v_[j] = static_cast<float>(v - (1 - b2) * d2 * (v > d2 ? 1.0 : v < d2 ? -1.0 : 0.0));
      else
        v_[j] = static_cast<float>(v + d2);
      x[j] = static_cast<float>(x[j] + spec_.server_lr * m_[j] / (std::sqrt(static_cast<double>(v_[j])) + spec_.tau));
    }
  }
  ChunkOptimizer::State Save() const override { return {{}, {m_, v_}}; }
  bool Load(const ChunkOptimizer::State& s) override {
    if (!s.counters.empty() || s.arrays.size() != 2 || s.arrays[0].size() != m_.size() ||
        s.arrays[1].size() != v_.size())
      return false;
    m_ = s.arrays[0];
    v_ = s.arrays[1];
    return true;
  }

 private:
  StrategySpec spec_;
  std::vector<float> m_, v_;
};

class StrategyOptimizer final : public ChunkOptimizer {
 public:
  StrategyOptimizer(const StrategySpec& spec, size_t n) : strategy_(MakeChunkStrategy(spec, n)), delta_(n) {}
  void Step(const float* in, float* out, const float* grad, size_t n, float grad_scale, float) override {
    for (size_t j = 0; j < n; ++j) delta_[j] = -grad[j] * grad_scale;
    if (out != in) std::copy(in, in + n, out);
    strategy_->Apply(out, delta_.data(), n);
  }
  void StepAsync(const float* in, float* out, const float* grad, size_t n, float grad_scale, float lr_scale,
                 int) override {
    Step(in, out, grad, n, grad_scale, lr_scale);
  }
  bool ScalesGradientForStaleness() const override { return true; }
  size_t StateSize() const override {
    size_t total = 0;
    for (const auto& a : strategy_->Save().arrays) total += a.size();
    return total;
  }
  State Save() const override { return strategy_->Save(); }
  bool Load(const State& state) override { return strategy_->Load(state); }

 private:
  std::unique_ptr<ChunkStrategy> strategy_;
  std::vector<float> delta_;
};

}  // namespace

std::optional<StrategySpec> FederatedStrategyOf(const JobSpec& job) {
  const FederatedSpec& f = job.federated;
  if (!f.enabled()) return std::nullopt;
  // SCAFFOLD's server step is FedAvg's, on the model and the control
  // variate alike (the executors scale the latter's push by 1 / η).
  if (f.strategy == FederatedStrategy::kScaffold)
    return StrategySpec{.kind = StrategyKind::kFedAvg, .server_lr = job.training.outer_lr};
  if (f.strategy == FederatedStrategy::kFedAvg || f.strategy == FederatedStrategy::kFedBuff)
    return StrategySpec{.kind = job.training.outer_momentum > 0 ? StrategyKind::kFedAvgM : StrategyKind::kFedAvg,
                        .server_lr = job.training.outer_lr,
                        .momentum = job.training.outer_momentum};
  const StrategyKind kind = f.strategy == FederatedStrategy::kFedAdam   ? StrategyKind::kFedAdam
                            : f.strategy == FederatedStrategy::kFedYogi ? StrategyKind::kFedYogi
                                                                        : StrategyKind::kFedAdagrad;
  return StrategySpec{
      .kind = kind, .server_lr = job.training.outer_lr, .beta1 = f.beta1, .beta2 = f.beta2, .tau = f.tau};
}

std::unique_ptr<ChunkOptimizer> MakeStrategyOptimizer(const StrategySpec& spec, size_t n) {
  return std::make_unique<StrategyOptimizer>(spec, n);
}

std::unique_ptr<ChunkStrategy> MakeChunkStrategy(const StrategySpec& spec, size_t n) {
  switch (spec.kind) {
    case StrategyKind::kFedAvg:
      return std::make_unique<FedAvg>(spec.server_lr);
    case StrategyKind::kFedAvgM:
      return std::make_unique<FedAvgM>(spec.server_lr, spec.momentum, n);
    default:
      return std::make_unique<FedAdaptive>(spec, n);
  }
}

}  // namespace geodesic::server
