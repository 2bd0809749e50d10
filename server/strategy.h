// Federated server strategies: what a shard does with a round's client
// updates (each client's model minus the global model it started from).
//
// The update rules (docs/federated.md has them with their costs), for the
// round's mean update Δ (the executors' sums, worker/federated_rounds.h):
//   FedAvg    x += η Δ
//   FedAvgM   v = β v + Δ;  x += η v                       (Hsu et al., 2019)
//   FedAdam   m = β1 m + (1-β1) Δ;  v = β2 v + (1-β2) Δ²;  x += η m / (√v + τ)
//   FedYogi   the same m;  v = v - (1-β2) Δ² sign(v - Δ²)
//   FedAdagrad the same m;  v = v + Δ²                     (Reddi et al., 2021,
//             Algorithm 2: no bias correction, v starts at τ²)
//   SCAFFOLD  x as FedAvg with η = the global step size;
//             c += (|S| / N) mean(Δc_i)                     (Karimireddy et al., 2020)
//             c is FedAvg's step too: the shards keep it after the model,
//             and the executors push its change scaled by 1 / η
//             (worker/federated_rounds.h)
//   FedBuff   x as FedAvg (FedAvgM), with Δ = Σ s_i Δ_i / K over a step's K
//             updates, s_i = 1/sqrt(1 + staleness)       (Nguyen et al., 2022)
//
// One ChunkStrategy per chunk, like ChunkOptimizer; not synchronized
// (the shard's loop thread owns them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "server/optimizer.h"

namespace geodesic::server {

enum class StrategyKind { kFedAvg, kFedAvgM, kFedAdam, kFedYogi, kFedAdagrad };

struct StrategySpec {
  StrategyKind kind = StrategyKind::kFedAvg;
  double server_lr = 1.0;  // η
  double momentum = 0.9;   // FedAvgM's β
  double beta1 = 0.9;      // FedAdam, FedYogi, FedAdagrad
  double beta2 = 0.99;
  double tau = 1e-3;  // adaptivity: larger τ, closer to FedAvgM
};

class ChunkStrategy {
 public:
  virtual ~ChunkStrategy() = default;
  // x (n values) += the strategy's step for the round's mean update `delta`.
  virtual void Apply(float* x, const float* delta, size_t n) = 0;
  // Server state (momentum, moments) for checkpoints, as ChunkOptimizer's.
  virtual ChunkOptimizer::State Save() const = 0;
  virtual bool Load(const ChunkOptimizer::State& state) = 0;
};

std::unique_ptr<ChunkStrategy> MakeChunkStrategy(const StrategySpec& spec, size_t n);

// A strategy as the shard's optimizer for federated rounds: the shard hands
// it the round's mean push, -Δ (worker/federated_rounds.h), which Step
// turns back into Δ for Apply. lr_scale (schedules) is not applied; rounds
// are synchronous, so StepAsync is Step.
std::unique_ptr<ChunkOptimizer> MakeStrategyOptimizer(const StrategySpec& spec, size_t n);

// A federated job's strategy, with server step size training.outer_lr:
// fedavg is FedAvg, or FedAvgM with training.outer_momentum > 0; scaffold
// is FedAvg over the model and the control variate after it. Nullopt
// for other jobs (they run JobSpec::ShardOptimizer).
std::optional<StrategySpec> FederatedStrategyOf(const JobSpec& job);

}  // namespace geodesic::server
