// Federated server strategies against hand computations.
#include "server/strategy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

namespace geodesic::server {
namespace {

TEST(StrategyTest, FedAvgAndFedAvgMStepByHand) {
  std::vector<float> x = {1, 2};
  const float d1[] = {0.5f, -1}, d2[] = {1, 1};
  MakeChunkStrategy({.kind = StrategyKind::kFedAvg, .server_lr = 1}, 2)->Apply(x.data(), d1, 2);
  EXPECT_EQ(x, (std::vector<float>{1.5f, 1}));
  auto m = MakeChunkStrategy({.kind = StrategyKind::kFedAvgM, .server_lr = 0.5, .momentum = 0.9}, 2);
  x = {0, 0};
  m->Apply(x.data(), d1, 2);  // v = d1; x += 0.5 v
  EXPECT_FLOAT_EQ(x[0], 0.25f);
  m->Apply(x.data(), d2, 2);  // v = 0.9 d1 + d2 = {1.45, 0.1}; x += 0.5 v
  EXPECT_FLOAT_EQ(x[0], 0.25f + 0.725f);
  EXPECT_FLOAT_EQ(x[1], -0.5f + 0.05f);
}

// One step of each adaptive strategy from x = 1, Δ = {0.2, -0.5}, η = 0.1,
// β1 = 0.9, β2 = 0.99, τ = 1e-3, v starting at τ² (computed by hand, in
// double, outside this code):
//   m = 0.1 Δ;  Adam: v = 0.99 τ² + 0.01 Δ²;  Yogi: v = τ² + 0.01 Δ²
//   (Δ² > τ²);  Adagrad: v = τ² + Δ²;  x = 1 + 0.1 m / (√v + τ).
TEST(StrategyTest, FedAdamYogiAdagradOneStepByHand) {
  const float delta[] = {0.2f, -0.5f};
  const struct {
    StrategyKind kind;
    double x0, x1;
  } cases[] = {{StrategyKind::kFedAdam, 1.095126052, 0.901979810},
               {StrategyKind::kFedYogi, 1.095124922, 0.901980002},
               {StrategyKind::kFedAdagrad, 1.009950125, 0.990019980}};
  for (const auto& c : cases) {
    std::vector<float> x = {1, 1};
    MakeChunkStrategy({.kind = c.kind, .server_lr = 0.1, .beta1 = 0.9, .beta2 = 0.99, .tau = 1e-3}, 2)
        ->Apply(x.data(), delta, 2);
    EXPECT_NEAR(x[0], c.x0, 1e-6) << static_cast<int>(c.kind);
    EXPECT_NEAR(x[1], c.x1, 1e-6) << static_cast<int>(c.kind);
  }
}

TEST(StrategyTest, SavedStateContinuesBitForBit) {
  const StrategySpec spec{.kind = StrategyKind::kFedYogi, .server_lr = 0.05};
  const float d1[] = {0.3f, -0.1f, 2}, d2[] = {-1, 0.4f, 0.5f};
  auto a = MakeChunkStrategy(spec, 3);
  std::vector<float> xa = {1, 2, 3};
  a->Apply(xa.data(), d1, 3);
  auto b = MakeChunkStrategy(spec, 3);
  ASSERT_TRUE(b->Load(a->Save()));
  std::vector<float> xb = xa;
  a->Apply(xa.data(), d2, 3);
  b->Apply(xb.data(), d2, 3);
  EXPECT_EQ(xa, xb);
  EXPECT_FALSE(MakeChunkStrategy(spec, 4)->Load(a->Save()));  // another chunk size
  EXPECT_FALSE(MakeChunkStrategy({.kind = StrategyKind::kFedAvgM}, 3)->Load(a->Save()));
}

// The shard's view: a round's mean push is -Δ, and the optimizer adapter
// steps the strategy by Δ, from `in` into `out`.
TEST(StrategyTest, AsTheShardsOptimizerItStepsByMinusThePush) {
  const StrategySpec spec{.kind = StrategyKind::kFedAdam, .server_lr = 0.1};
  auto direct = MakeChunkStrategy(spec, 2);
  auto shard = MakeStrategyOptimizer(spec, 2);
  const float delta[] = {0.2f, -0.5f}, push[] = {-0.4f, 1.0f};  // -Δ, scaled by 2
  std::vector<float> x = {1, 1}, in = {1, 1}, out(2);
  direct->Apply(x.data(), delta, 2);
  shard->Step(in.data(), out.data(), push, 2, /*grad_scale=*/0.5f, /*lr_scale=*/1.0f);
  EXPECT_EQ(out, x);
  EXPECT_EQ(in, (std::vector<float>{1, 1}));  // read, not written
  EXPECT_EQ(shard->StateSize(), 4u);          // m and v
  auto again = MakeStrategyOptimizer(spec, 2);
  ASSERT_TRUE(again->Load(shard->Save()));
}

TEST(StrategyTest, EveryFederatedJobRunsItsStrategy) {
  JobSpec job;
  EXPECT_FALSE(FederatedStrategyOf(job));  // not federated: the job's optimizer
  job.federated.clients = 10;
  job.training.outer_lr = 0.7;
  auto avg = FederatedStrategyOf(job);
  ASSERT_TRUE(avg);
  EXPECT_EQ(avg->kind, StrategyKind::kFedAvg);
  EXPECT_EQ(avg->server_lr, 0.7);
  job.training.outer_momentum = 0.9;
  auto avgm = FederatedStrategyOf(job);
  ASSERT_TRUE(avgm);
  EXPECT_EQ(avgm->kind, StrategyKind::kFedAvgM);
  EXPECT_EQ(avgm->momentum, 0.9);
  job.federated.strategy = FederatedStrategy::kFedYogi;
  job.training.outer_lr = 0.03;
  auto s = FederatedStrategyOf(job);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, StrategyKind::kFedYogi);
  EXPECT_EQ(s->server_lr, 0.03);
}

// FedAvgM as the shard's optimizer takes the steps the outer SGD with
// momentum took before federated jobs ran their strategy (to float
// rounding): the push is -Δ, so v and x move the same way.
TEST(StrategyTest, FedAvgMIsTheOuterMomentumStep) {
  OptimizerSpec sgd;
  sgd.name = OptimizerKind::kSgd;
  sgd.lr = 0.7;
  sgd.momentum = 0.9;
  sgd.weight_decay = 0;
  auto outer = MakeChunkOptimizer(sgd, 3);
  auto strategy = MakeStrategyOptimizer({.kind = StrategyKind::kFedAvgM, .server_lr = 0.7, .momentum = 0.9}, 3);
  std::vector<float> a = {1, -2, 3}, b = a;
  for (int round = 0; round < 5; ++round) {
    const std::vector<float> push = {0.1f * round, -0.05f, 0.02f * (3 - round)};
    outer->Step(a.data(), a.data(), push.data(), 3, 1.0f, 1.0f);
    strategy->Step(b.data(), b.data(), push.data(), 3, 1.0f, 1.0f);
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(a[j], b[j], 1e-6) << "round " << round << " value " << j;
  }
}

}  // namespace
}  // namespace geodesic::server
