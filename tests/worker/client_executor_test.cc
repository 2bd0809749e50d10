// Federated clients trained one after another by one executor.
#include "worker/client_executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "tests/worker/band_images.h"
#include "worker/examples.h"

namespace geodesic::worker {
namespace {

ModelSpec Mlp() {
  ModelSpec spec;
  spec.name = ModelKind::kMlp;
  spec.mlp_hidden = {32};
  return spec;
}
const ModelSpec kMlp = Mlp();

struct Fixture {
  ImageSet train = Bands();
  std::vector<int64_t> mine = std::vector<int64_t>(320);
  std::unique_ptr<ClientExecutor> exec;
  std::vector<float> global;
  explicit Fixture(LocalOptimizerSpec local = {.lr = 0.05, .momentum = 0.9}, AugmentSpec augment = {}) {
    std::iota(mine.begin(), mine.end(), 0);
    exec = std::move(ClientExecutor::Create(kMlp, 1, ImageExamples(train), ShapeOf(train), 32, local, augment)).value();
    global.assign(exec->num_params(), 0.0f);
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0, 0.05f);
    for (float& v : global) v = normal(rng);
  }
  ClientOutcome Run(ClientRound r) {
    r.indices = &mine;
    auto o = exec->Train(global.data(), r);
    EXPECT_TRUE(o.ok()) << o.status();
    return o.ok() ? *o : ClientOutcome{};
  }
};

TEST(ClientExecutorTest, TrainsAClientAndReportsItsUpdate) {
  Fixture f;
  ClientOutcome one = f.Run({.client = 3, .round = 0, .local_epochs = 1});
  ASSERT_TRUE(one.finite);
  EXPECT_EQ(one.steps, 10);  // 320 samples, batches of 32
  EXPECT_EQ(one.samples, 320);
  ASSERT_EQ(one.delta.size(), f.global.size());
  EXPECT_GT(std::inner_product(one.delta.begin(), one.delta.end(), one.delta.begin(), 0.0), 0.0);
  // Training on from the update lowers the client's loss.
  ClientOutcome more = f.Run({.client = 3, .round = 0, .local_epochs = 4});
  EXPECT_EQ(more.steps, 40);
  EXPECT_LT(more.mean_loss, one.mean_loss);
  EXPECT_EQ(f.Run({.client = 3, .round = 0, .local_steps = 7}).steps, 7);
}

// The same client, round and global model give the same update bit for bit,
// whichever clients the executor ran in between; another round draws
// another batch order.
TEST(ClientExecutorTest, UpdatesAreDeterministicAndIndependentOfOtherClients) {
  Fixture f;
  ClientOutcome a = f.Run({.client = 1, .round = 2});
  f.Run({.client = 9, .round = 2});
  ClientOutcome b = f.Run({.client = 1, .round = 2});
  ASSERT_EQ(a.delta.size(), b.delta.size());
  EXPECT_EQ(std::memcmp(a.delta.data(), b.delta.data(), a.delta.size() * sizeof(float)), 0);
  ClientOutcome c = f.Run({.client = 1, .round = 3});
  EXPECT_NE(std::memcmp(a.delta.data(), c.delta.data(), a.delta.size() * sizeof(float)), 0);
}

// data.augment applies to clients as to workers: it changes the update,
// and the same client, round and step draw the same changes.
TEST(ClientExecutorTest, AugmentationChangesTheUpdateAndRepeatsForTheSameDraws) {
  Fixture plain, augmented({.lr = 0.05, .momentum = 0.9}, {.crop = 2, .flip = true});
  const ClientRound r{.client = 3, .round = 0, .local_epochs = 1};
  const ClientOutcome a = plain.Run(r), b = augmented.Run(r), c = augmented.Run(r);
  ASSERT_TRUE(a.finite && b.finite && c.finite);
  EXPECT_NE(a.delta, b.delta);
  EXPECT_EQ(b.delta, c.delta);
  EXPECT_NE(augmented.Run({.client = 3, .round = 1, .local_epochs = 1}).delta, b.delta);
}

TEST(ClientExecutorTest, FedProxWithZeroMuIsFedAvgBitForBit) {
  Fixture plain({.lr = 0.05, .momentum = 0.9}), prox({.lr = 0.05, .momentum = 0.9, .prox_mu = 0});
  ClientOutcome a = plain.Run({.client = 4, .round = 1, .local_epochs = 2});
  ClientOutcome b = prox.Run({.client = 4, .round = 1, .local_epochs = 2});
  EXPECT_EQ(std::memcmp(a.delta.data(), b.delta.data(), a.delta.size() * sizeof(float)), 0);
  // And a real μ pulls the client towards the global model.
  Fixture pulled({.lr = 0.05, .momentum = 0.9, .prox_mu = 1.0});
  ClientOutcome c = pulled.Run({.client = 4, .round = 1, .local_epochs = 2});
  auto norm = [](const std::vector<float>& v) { return std::inner_product(v.begin(), v.end(), v.begin(), 0.0); };
  EXPECT_LT(norm(c.delta), norm(a.delta));
}

TEST(ClientExecutorTest, ScaffoldControlFollowsTheUpdate) {
  Fixture f({.lr = 0.05});
  std::vector<float> c(f.global.size(), 0.01f), correction(f.global.size(), 0.002f);
  ClientOutcome o = f.Run({.client = 2, .round = 0, .correction = correction.data(), .server_control = c.data()});
  ASSERT_EQ(o.control_delta.size(), f.global.size());
  for (size_t j = 0; j < 5; ++j)  // c_i+ - c_i = -c + (x - y) / (K η) = -c - delta / (K η)
    EXPECT_NEAR(o.control_delta[j], -0.01 - o.delta[j] / (o.steps * 0.05), 1e-4);
}

TEST(ClientExecutorTest, ABrokenGlobalModelOrATinyClientIsRefusedNotTrained) {
  Fixture f;
  f.global[0] = NAN;
  ClientOutcome o = f.Run({.client = 0, .round = 0});
  EXPECT_FALSE(o.finite);
  EXPECT_TRUE(o.delta.empty());
  std::vector<int64_t> few = {1, 2, 3};
  auto r = f.exec->Train(f.global.data(), {.client = 7, .indices = &few});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("fewer samples than one batch"), std::string::npos);
}

}  // namespace
}  // namespace geodesic::worker
