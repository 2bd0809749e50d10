#include "worker/federated/privacy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/draws.h"

namespace geodesic::federated {

double L2Norm(const float* values, size_t n) {
  double sq = 0;
  for (size_t j = 0; j < n; ++j) sq += static_cast<double>(values[j]) * values[j];
  return std::sqrt(sq);
}

double ClipToNorm(float* delta, size_t n, double max_norm) {
  const double norm = L2Norm(delta, n);
  if (!std::isfinite(norm)) {
    std::fill(delta, delta + n, 0.0f);
    return 0;
  }
  if (norm <= max_norm) return 1;
  const double scale = max_norm / norm;
  for (size_t j = 0; j < n; ++j) delta[j] = static_cast<float>(delta[j] * scale);
  return scale;
}

void AddGaussianNoise(float* values, size_t n, double stddev, uint64_t key) {
  CounterDraws draws{CounterSource(key)};
  for (size_t j = 0; j < n; j += 2) {
    const auto [a, b] = draws.NormalPair();
    values[j] = static_cast<float>(values[j] + stddev * a);
    if (j + 1 < n) values[j + 1] = static_cast<float>(values[j + 1] + stddev * b);
  }
}

double SubsampledGaussianRdp(double q, double z, int alpha) {
  if (q <= 0) return 0;
  if (q >= 1) return alpha / (2 * z * z);
  // log-sum-exp over the binomial expansion's terms.
  std::vector<double> terms;
  double top = -std::numeric_limits<double>::infinity();
  for (int k = 0; k <= alpha; ++k) {
    const double log_binom = std::lgamma(alpha + 1.0) - std::lgamma(k + 1.0) - std::lgamma(alpha - k + 1.0);
    const double t = log_binom + (alpha - k) * std::log1p(-q) + k * std::log(q) + (double(k) * k - k) / (2 * z * z);
    terms.push_back(t);
    top = std::max(top, t);
  }
  double sum = 0;
  for (double t : terms) sum += std::exp(t - top);
  return (top + std::log(sum)) / (alpha - 1);
}

DpGuarantee EpsilonAfter(double q, double z, int64_t rounds, double delta) {
  DpGuarantee best{std::numeric_limits<double>::infinity(), 0};
  for (int a = 2; a <= 256; ++a) {
    const double r = static_cast<double>(rounds) * SubsampledGaussianRdp(q, z, a);
    const double eps = r + std::log((a - 1.0) / a) - (std::log(delta) + std::log(static_cast<double>(a))) / (a - 1.0);
    if (eps < best.epsilon) best = {std::max(eps, 0.0), a};
  }
  return best;
}

}  // namespace geodesic::federated
