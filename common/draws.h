// Seeded random draws with fixed algorithms, so that a seed gives the same
// numbers on every platform and standard library (std::*_distribution
// does not promise that). Used by the partitioners, the federated
// population, DP noise and the clients' batch orders.
//
//   Draws<std::mt19937_64> d(std::mt19937_64(seed));  // a stream from a seed
//   CounterDraws d(DrawKey({seed, purpose, client, round}));
//                           // the draws of one (seed, purpose, client, round),
//                           // independent of the order anything else draws in
//
// Header-only; a Draws object is not synchronized.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <numbers>
#include <utility>
#include <vector>

namespace geodesic {

// SplitMix64's finalizer: a bijection that spreads every input bit.
constexpr uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline constexpr uint64_t kGolden64 = 0x9E3779B97F4A7C15ull;

// One key from several values: Mix64 folded over them, in order.
constexpr uint64_t DrawKey(std::initializer_list<uint64_t> parts) {
  uint64_t k = 0;
  bool first = true;
  for (uint64_t p : parts) {
    k = Mix64(first ? p : k ^ p);
    first = false;
  }
  return k;
}

// A counter-based source: the i-th value of `key` is Mix64(key + i * golden).
class CounterSource {
 public:
  explicit CounterSource(uint64_t key) : key_(key) {}
  uint64_t operator()() { return Mix64(key_ + ++i_ * kGolden64); }

 private:
  uint64_t key_;
  uint64_t i_ = 0;
};

// Draws over any source of uniform 64-bit values.
template <class Source>
class Draws {
 public:
  explicit Draws(Source source) : s_(std::move(source)) {}

  uint64_t Below(uint64_t n) { return s_() % n; }                                   // the modulo bias is below n / 2^64
  double Uniform() { return (static_cast<double>(s_() >> 11) + 0.5) * 0x1.0p-53; }  // in (0, 1)
  // Box-Muller: two standard normals from two uniforms.
  std::pair<double, double> NormalPair() {
    const double r = std::sqrt(-2.0 * std::log(Uniform())), t = 2.0 * std::numbers::pi * Uniform();
    return {r * std::cos(t), r * std::sin(t)};
  }
  double Normal() { return NormalPair().first; }
  double LogNormal(double median, double sigma) { return median * std::exp(sigma * Normal()); }
  // Marsaglia and Tsang; shape < 1 through Gamma(shape + 1) * U^(1/shape).
  double Gamma(double shape) {
    if (shape < 1) return Gamma(shape + 1) * std::pow(Uniform(), 1.0 / shape);
    const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      const double x = Normal(), v0 = 1 + c * x;
      if (v0 <= 0) continue;
      const double v = v0 * v0 * v0, u = Uniform();
      if (u < 1 - 0.0331 * x * x * x * x || std::log(u) < 0.5 * x * x + d * (1 - v + std::log(v))) return d * v;
    }
  }
  // Fisher-Yates, from the back.
  template <class T>
  void Shuffle(std::vector<T>& v) {
    for (int64_t i = static_cast<int64_t>(v.size()) - 1; i > 0; --i)
      std::swap(v[i], v[Below(static_cast<uint64_t>(i + 1))]);
  }

 private:
  Source s_;
};

using CounterDraws = Draws<CounterSource>;

}  // namespace geodesic
