#include "worker/federated/population.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/draws.h"

namespace geodesic::federated {
namespace {

enum Purpose : uint64_t { kProfile = 1, kAvailable = 2, kDropout = 3, kSelect = 4 };

// The draws of (seed, purpose, client, round), independent of draw order.
CounterDraws DrawsFor(uint64_t seed, Purpose purpose, int64_t client, int64_t round) {
  return CounterDraws(CounterSource(
      DrawKey({seed ^ (purpose * kGolden64), static_cast<uint64_t>(client), static_cast<uint64_t>(round)})));
}

}  // namespace

ClientProfile DrawProfile(const ProfileSpec& spec, int64_t client, uint64_t seed) {
  CounterDraws d = DrawsFor(seed, kProfile, client, 0);
  ClientProfile p;
  p.step_seconds = d.LogNormal(spec.step_seconds, spec.compute_sigma);
  p.uplink_mbit = d.LogNormal(spec.uplink_mbit_median, spec.uplink_sigma);
  p.downlink_mbit = d.LogNormal(spec.downlink_mbit_median, spec.downlink_sigma);
  p.latency_ms = d.LogNormal(spec.latency_ms_median, spec.latency_sigma);
  if (d.Uniform() < spec.slow_fraction) p.step_seconds *= spec.slow_factor;
  return p;
}

double ClientSeconds(const ClientProfile& p, int64_t steps, double down_bytes, double up_bytes) {
  return 2 * p.latency_ms / 1e3 + 8 * down_bytes / (p.downlink_mbit * 1e6) +
         static_cast<double>(steps) * p.step_seconds + 8 * up_bytes / (p.uplink_mbit * 1e6);
}

bool Available(const ProfileSpec& spec, int64_t client, int64_t round, uint64_t seed) {
  return spec.availability >= 1 || DrawsFor(seed, kAvailable, client, round).Uniform() < spec.availability;
}

bool DropsOut(const ProfileSpec& spec, int64_t client, int64_t round, uint64_t seed) {
  return spec.dropout > 0 && DrawsFor(seed, kDropout, client, round).Uniform() < spec.dropout;
}

std::vector<int64_t> SelectClients(const SelectionSpec& selection, const ProfileSpec& profiles,
                                   const std::vector<int64_t>& samples_per_client, int64_t round, uint64_t seed) {
  // Each available client gets a key; the largest keys win. Uniform: u;
  // weighted: u^(1/w), compared as log(u)/w.
  std::vector<std::pair<double, int64_t>> keyed;
  for (int64_t c = 0; c < static_cast<int64_t>(samples_per_client.size()); ++c) {
    if (!Available(profiles, c, round, seed)) continue;
    const double u = DrawsFor(seed, kSelect, c, round).Uniform();
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

RoundClose CloseRound(const std::vector<Candidate>& selected, int64_t per_round, double deadline) {
  RoundClose out;
  std::vector<const Candidate*> in;
  for (const Candidate& c : selected) {
    if (c.dropped)
      ++out.dropped;
    else
      in.push_back(&c);
  }
  std::sort(in.begin(), in.end(), [](const Candidate* a, const Candidate* b) {
    return a->seconds < b->seconds || (a->seconds == b->seconds && a->client < b->client);
  });
  for (const Candidate* c : in) {
    if (static_cast<int64_t>(out.accepted.size()) < per_round && (deadline <= 0 || c->seconds <= deadline)) {
      out.accepted.push_back(c->client);
      out.seconds = c->seconds;
    } else {
      ++out.late;
    }
  }
  if (static_cast<int64_t>(out.accepted.size()) < per_round && deadline > 0) out.seconds = deadline;
  return out;
}

}  // namespace geodesic::federated
