// A federated client's local step and SCAFFOLD control, by hand.
#include "worker/client_update.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace geodesic::worker {
namespace {

TEST(ClientUpdateTest, PlainStepIsSgd) {
  std::vector<float> y = {1, -2};
  const float g[] = {0.5f, 1}, x[] = {0, 0};
  LocalStep(y.data(), g, x, nullptr, nullptr, 2, {.lr = 0.1});
  EXPECT_FLOAT_EQ(y[0], 0.95f);
  EXPECT_FLOAT_EQ(y[1], -2.1f);
}

// FedProx adds μ (y - x); SCAFFOLD adds c - c_i; momentum accumulates.
TEST(ClientUpdateTest, ProxCorrectionAndMomentumByHand) {
  std::vector<float> y = {1, 1}, buf = {0, 0};
  const float g[] = {0.2f, -0.4f}, x[] = {0.5f, 2}, corr[] = {0.1f, 0.3f};
  const LocalOptimizerSpec spec{.lr = 0.5, .momentum = 0.9, .prox_mu = 0.1};
  LocalStep(y.data(), g, x, corr, buf.data(), 2, spec);
  // d = g + 0.1 (y - x) + corr = {0.2 + 0.05 + 0.1, -0.4 - 0.1 + 0.3} = {0.35, -0.2}
  EXPECT_FLOAT_EQ(buf[0], 0.35f);
  EXPECT_FLOAT_EQ(y[0], 1 - 0.5f * 0.35f);
  EXPECT_FLOAT_EQ(y[1], 1 + 0.5f * 0.2f);
  const float y0 = y[0];
  LocalStep(y.data(), g, x, corr, buf.data(), 2, spec);
  // d = 0.2 + 0.1 (y0 - 0.5) + 0.1; b = 0.9 * 0.35 + d
  const float d = 0.2f + 0.1f * (y0 - 0.5f) + 0.1f;
  EXPECT_FLOAT_EQ(buf[0], 0.9f * 0.35f + d);
  EXPECT_FLOAT_EQ(y[0], y0 - 0.5f * (0.9f * 0.35f + d));
}

// FedProx with μ = 0 is FedAvg's local step, bit for bit, over many steps.
TEST(ClientUpdateTest, ProxWithZeroMuIsFedAvgBitForBit) {
  const size_t n = 4096;
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  std::vector<float> x(n), a, b, ba(n, 0.0f), bb(n, 0.0f), g(n);
  for (float& v : x) v = normal(rng);
  a = b = x;
  for (int step = 0; step < 20; ++step) {
    for (float& v : g) v = normal(rng);
    LocalStep(a.data(), g.data(), x.data(), nullptr, ba.data(), n, {.lr = 0.05, .momentum = 0.9});
    LocalStep(b.data(), g.data(), x.data(), nullptr, bb.data(), n, {.lr = 0.05, .momentum = 0.9, .prox_mu = 0});
  }
  EXPECT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0);
}

// SCAFFOLD option II: c_i+ - c_i = -c + (x - y) / (K η).
TEST(ClientUpdateTest, ScaffoldControlDeltaByHand) {
  const float c[] = {0.1f, -0.2f}, x[] = {1, 1}, y[] = {0.8f, 1.3f};
  float out[2];
  ScaffoldControlDelta(c, x, y, /*steps=*/4, /*lr=*/0.05, 2, out);
  EXPECT_NEAR(out[0], -0.1 + 0.2 / 0.2, 1e-6);  // (1 - 0.8) / (4 * 0.05) = 1
  EXPECT_NEAR(out[1], 0.2 - 0.3 / 0.2, 1e-6);
}

}  // namespace
}  // namespace geodesic::worker
