// DP-FedAvg's clipping, noise and Rényi accountant, against closed forms and
// an independent numerical integration.
#include "worker/federated/privacy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

namespace geodesic::federated {
namespace {

TEST(PrivacyTest, ClipToNormScalesOnlyLongUpdatesAndZeroesBrokenOnes) {
  float d[] = {3, 4};
  EXPECT_DOUBLE_EQ(ClipToNorm(d, 2, 10), 1.0);
  EXPECT_EQ(d[0], 3.0f);
  EXPECT_DOUBLE_EQ(ClipToNorm(d, 2, 1), 0.2);
  EXPECT_FLOAT_EQ(d[0], 0.6f);
  EXPECT_FLOAT_EQ(d[1], 0.8f);
  float bad[] = {1, NAN, 2};
  EXPECT_EQ(ClipToNorm(bad, 3, 1), 0.0);
  EXPECT_EQ(bad[0], 0.0f);
  EXPECT_EQ(bad[2], 0.0f);
}

TEST(PrivacyTest, NoiseHasTheAskedDeviationAndFollowsTheSeed) {
  const size_t n = 200001;
  std::vector<float> a(n, 0.0f), b(n, 0.0f);
  AddGaussianNoise(a.data(), n, 2.5, 9);
  AddGaussianNoise(b.data(), n, 2.5, 9);
  EXPECT_EQ(a, b);
  std::vector<float> c(n, 0.0f);
  AddGaussianNoise(c.data(), n, 2.5, 10);
  EXPECT_NE(a, c);
  double sum = 0, sq = 0;
  for (float v : a) sum += v, sq += double(v) * v;
  const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.03);  // 5 standard errors
  EXPECT_NEAR(sd, 2.5, 0.02);
}

// Without subsampling the Gaussian mechanism's RDP is α / (2 z²).
TEST(PrivacyTest, FullParticipationIsTheGaussianMechanism) {
  for (int a : {2, 5, 32}) EXPECT_DOUBLE_EQ(SubsampledGaussianRdp(1.0, 1.3, a), a / (2 * 1.3 * 1.3));
  EXPECT_EQ(SubsampledGaussianRdp(0.0, 1.3, 4), 0.0);
}

// The RDP of the subsampled Gaussian is log E_{x~N(0,z²)}[((1-q) + q
// exp((2x-1)/(2z²)))^α] / (α-1): integrated here numerically (Simpson,
// independent of the binomial expansion the code uses).
double RdpByIntegration(double q, double z, int alpha) {
  // The integrand peaks near x = α (for q near 1); it is summed in log
  // space, shifted by its largest term, so large orders do not overflow.
  const int steps = 400000;
  const double lo = -30 * z, hi = 30 * z + alpha, h = (hi - lo) / steps;
  auto log_f = [&](double x) {
    const double u = (2 * x - 1) / (2 * z * z);
    const double log_ratio = u > 0 ? u + std::log(q + (1 - q) * std::exp(-u)) : std::log((1 - q) + q * std::exp(u));
    return -x * x / (2 * z * z) - std::log(z * std::sqrt(2 * std::numbers::pi)) + alpha * log_ratio;
  };
  std::vector<double> logs(steps + 1);
  double top = -1e300;
  for (int i = 0; i <= steps; ++i) top = std::max(top, logs[i] = log_f(lo + i * h));
  double s = 0;
  for (int i = 0; i <= steps; ++i) s += std::exp(logs[i] - top) * (i == 0 || i == steps ? 1 : i % 2 ? 4 : 2);
  return (top + std::log(s * h / 3)) / (alpha - 1);
}

TEST(PrivacyTest, SubsampledRdpMatchesNumericalIntegration) {
  for (double q : {0.01, 0.1, 0.5})
    for (double z : {0.8, 1.1, 2.0})
      for (int a : {2, 3, 8, 20}) {
        const double ours = SubsampledGaussianRdp(q, z, a), integrated = RdpByIntegration(q, z, a);
        EXPECT_NEAR(ours, integrated, 1e-7 + 1e-6 * integrated) << "q " << q << " z " << z << " alpha " << a;
      }
}

// ε after T rounds, by hand for q = 1 (RDP α/(2z²)), over the same orders.
TEST(PrivacyTest, EpsilonIsTheBestOrdersConversion) {
  const double z = 2.0, delta = 1e-5;
  const int64_t rounds = 10;
  double best = 1e300;
  for (int a = 2; a <= 256; ++a) {
    const double r = rounds * a / (2 * z * z);
    best = std::min(best, r + std::log((a - 1.0) / a) - (std::log(delta) + std::log(double(a))) / (a - 1.0));
  }
  DpGuarantee g = EpsilonAfter(1.0, z, rounds, delta);
  EXPECT_NEAR(g.epsilon, best, 1e-12);
  EXPECT_GE(g.order, 2);
  // More noise, fewer rounds or a smaller sampling rate: less ε.
  EXPECT_LT(EpsilonAfter(0.1, 1.5, 100, delta).epsilon, EpsilonAfter(0.1, 1.0, 100, delta).epsilon);
  EXPECT_LT(EpsilonAfter(0.1, 1.0, 50, delta).epsilon, EpsilonAfter(0.1, 1.0, 100, delta).epsilon);
  EXPECT_LT(EpsilonAfter(0.05, 1.0, 100, delta).epsilon, EpsilonAfter(0.1, 1.0, 100, delta).epsilon);
}

}  // namespace
}  // namespace geodesic::federated
