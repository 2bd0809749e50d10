#include "cluster/population.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

namespace geodesic::cluster {
namespace {

enum Purpose : uint64_t { kProfile = 1, kAvailable = 2, kDropout = 3, kSelect = 4 };

uint64_t Mix(uint64_t z) {  // SplitMix64's finalizer
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A counter-based generator: the i-th draw for (seed, purpose, client, round).
class Draws {
 public:
  Draws(uint64_t seed, Purpose purpose, int64_t client, int64_t round)
      : key_(Mix(Mix(Mix(seed ^ (purpose * 0x9E3779B97F4A7C15ull)) ^ static_cast<uint64_t>(client)) ^
                 static_cast<uint64_t>(round))) {}
  double Uniform() { return (static_cast<double>(Mix(key_ + ++i_ * 0x9E3779B97F4A7C15ull) >> 11) + 0.5) * 0x1.0p-53; }
  double Normal() {
    const double u1 = Uniform(), u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  double LogNormal(double median, double sigma) { return median * std::exp(sigma * Normal()); }

 private:
  uint64_t key_;
  uint64_t i_ = 0;
};

}  // namespace

ClientProfile DrawProfile(const ProfileSpec& spec, int64_t client, uint64_t seed) {
  Draws d(seed, kProfile, client, 0);
  ClientProfile p;
  p.compute_factor = d.LogNormal(spec.compute_median, spec.compute_sigma);
  p.uplink_mbit = d.LogNormal(spec.uplink_mbit_median, spec.uplink_sigma);
  p.downlink_mbit = d.LogNormal(spec.downlink_mbit_median, spec.downlink_sigma);
  p.latency_ms = d.LogNormal(spec.latency_ms_median, spec.latency_sigma);
  if (d.Uniform() < spec.slow_fraction) p.compute_factor *= spec.slow_factor;
  return p;
}

bool Available(const ProfileSpec& spec, int64_t client, int64_t round, uint64_t seed) {
  return spec.availability >= 1 || Draws(seed, kAvailable, client, round).Uniform() < spec.availability;
}

bool DropsOut(const ProfileSpec& spec, int64_t client, int64_t round, uint64_t seed) {
  return spec.dropout > 0 && Draws(seed, kDropout, client, round).Uniform() < spec.dropout;
}

std::vector<int64_t> SelectClients(const SelectionSpec& selection, const ProfileSpec& profiles,
                                   const std::vector<int64_t>& samples_per_client, int64_t round, uint64_t seed) {
  // Each available client gets a key; the largest keys win. Uniform: u;
  // weighted: u^(1/w), compared as log(u)/w.
  std::vector<std::pair<double, int64_t>> keyed;
  for (int64_t c = 0; c < static_cast<int64_t>(samples_per_client.size()); ++c) {
    if (!Available(profiles, c, round, seed)) continue;
    const double u = Draws(seed, kSelect, c, round).Uniform();
    if (!selection.weighted) {
      keyed.emplace_back(u, c);
    } else if (samples_per_client[c] > 0) {
      keyed.emplace_back(std::log(u) / static_cast<double>(samples_per_client[c]), c);
    }
  }
  const auto want = static_cast<size_t>(
      std::ceil(static_cast<double>(selection.per_round) * (1.0 + std::max(0.0, selection.over_selection)) - 1e-9));
  const size_t take = std::min(want, keyed.size());
  std::partial_sort(
      keyed.begin(), keyed.begin() + static_cast<std::ptrdiff_t>(take), keyed.end(),
      [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  std::vector<int64_t> out;
  for (size_t i = 0; i < take; ++i) out.push_back(keyed[i].second);
  return out;
}

}  // namespace geodesic::cluster
