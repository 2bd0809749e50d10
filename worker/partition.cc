#include "worker/partition.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <cstdio>

#include "common/draws.h"

namespace geodesic::worker {
namespace {

// Seeded draws with fixed algorithms (common/draws.h), from one stream.
using Rng = Draws<std::mt19937_64>;

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Consecutive slices of `order` of the given sizes.
Partition Cut(const std::vector<int64_t>& order, const std::vector<int64_t>& sizes) {
  Partition out(sizes.size());
  auto it = order.begin();
  for (size_t p = 0; p < sizes.size(); ++p) {
    out[p].assign(it, it + sizes[p]);
    it += sizes[p];
  }
  return out;
}

Partition Iid(int64_t n, int parts, uint64_t seed) {
  std::vector<int64_t> perm = Iota(n);
  Rng(std::mt19937_64(seed)).Shuffle(perm);
  std::vector<int64_t> sizes(parts);
  for (int p = 0; p < parts; ++p) sizes[p] = n * (p + 1) / parts - n * p / parts;
  return Cut(perm, sizes);
}

// Moves random samples from the largest parts into those under min_size.
void FillSmallParts(Partition& parts, int64_t min_size, Rng& rng) {
  for (auto& small : parts) {
    while (static_cast<int64_t>(small.size()) < min_size) {
      auto& big = *std::max_element(parts.begin(), parts.end(),
                                    [](const auto& a, const auto& b) { return a.size() < b.size(); });
      const size_t i = rng.Below(big.size());
      small.push_back(big[i]);
      big[i] = big.back();
      big.pop_back();
    }
  }
}

std::vector<std::vector<int64_t>> ByLabel(const std::vector<uint8_t>& labels, int num_labels) {
  std::vector<std::vector<int64_t>> by_label(num_labels);
  for (size_t i = 0; i < labels.size(); ++i) by_label[labels[i]].push_back(static_cast<int64_t>(i));
  return by_label;
}

Partition Dirichlet(const std::vector<uint8_t>& labels, int num_labels, int parts, double alpha, Rng& rng) {
  Partition out(parts);
  std::vector<double> share(parts);
  for (std::vector<int64_t>& mine : ByLabel(labels, num_labels)) {
    rng.Shuffle(mine);
    double sum = 0;
    for (double& s : share) sum += (s = rng.Gamma(alpha));
    if (!(sum > 0)) {  // every draw underflowed (tiny alpha): the whole label goes to one part
      std::fill(share.begin(), share.end(), 0.0);
      share[rng.Below(parts)] = sum = 1;
    }
    const auto n = static_cast<double>(mine.size());
    double acc = 0;
    int64_t begin = 0;
    for (int p = 0; p < parts; ++p) {
      acc += share[p];
      const int64_t end = p + 1 == parts ? static_cast<int64_t>(mine.size()) : std::llround(acc / sum * n);
      out[p].insert(out[p].end(), mine.begin() + begin, mine.begin() + std::max(begin, end));
      begin = std::max(begin, end);
    }
  }
  return out;
}

Partition LabelShards(const std::vector<uint8_t>& labels, int parts, int k, Rng& rng) {
  std::vector<int64_t> order = Iota(static_cast<int64_t>(labels.size()));
  rng.Shuffle(order);  // random order within each label, then sorted by label
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return labels[a] < labels[b]; });
  const int64_t n = static_cast<int64_t>(order.size()), shards = int64_t{parts} * k;
  std::vector<int64_t> shard_ids = Iota(shards);
  rng.Shuffle(shard_ids);
  Partition out(parts);
  for (int64_t i = 0; i < shards; ++i) {
    const int64_t s = shard_ids[i];
    out[i / k].insert(out[i / k].end(), order.begin() + n * s / shards, order.begin() + n * (s + 1) / shards);
  }
  return out;
}

Partition Lognormal(int64_t n, int parts, double sigma, int64_t min_size, Rng& rng) {
  std::vector<double> weight(parts);
  double sum = 0;
  for (double& w : weight) sum += (w = std::exp(sigma * rng.Normal()));
  const int64_t spare = n - int64_t{parts} * min_size;
  std::vector<int64_t> sizes(parts);
  int64_t given = 0;
  for (int p = 0; p < parts; ++p)
    given += sizes[p] = min_size + static_cast<int64_t>(std::floor(static_cast<double>(spare) * weight[p] / sum));
  for (int p = 0; given < n; p = (p + 1) % parts, ++given) ++sizes[p];  // rounding leftovers, < parts of them
  std::vector<int64_t> perm = Iota(n);
  rng.Shuffle(perm);
  return Cut(perm, sizes);
}

Status CheckFits(int64_t n, int parts, const PartitionSpec& spec, int64_t min_size) {
  const std::string what = ToString(spec) + " of " + std::to_string(n) + " samples into " + std::to_string(parts) +
                           " parts of at least " + std::to_string(min_size);
  if (parts < 1) return InvalidArgument("cannot split into " + std::to_string(parts) + " parts");
  if (n < int64_t{parts} * min_size) return InvalidArgument(what + ": too few samples");
  if (spec.kind == DataPartition::kShards) {
    const auto k = static_cast<int64_t>(spec.param);
    if (n / (parts * k) * k < min_size)
      return InvalidArgument(what + ": " + std::to_string(parts * k) + " shards of " + std::to_string(n / (parts * k)) +
                             " are too small; use a smaller K");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<Partition> PartitionSamples(const std::vector<uint8_t>& labels, int num_labels, int parts,
                                     const PartitionSpec& spec, uint64_t seed, int64_t min_size) {
  const auto n = static_cast<int64_t>(labels.size());
  GD_RETURN_IF_ERROR(CheckFits(n, parts, spec, min_size));
  for (uint8_t l : labels)
    if (l >= num_labels)
      return InvalidArgument("label " + std::to_string(l) + " outside [0, " + std::to_string(num_labels) + ")");
  // IID keeps the split jobs had before the other kinds existed; the others
  // draw from their own stream so that no two kinds share draws.
  if (spec.kind == DataPartition::kIid) return Iid(n, parts, seed);
  Rng rng(std::mt19937_64(seed ^ (kGolden64 * (static_cast<uint64_t>(spec.kind) + 1))));
  Partition out;
  if (spec.kind == DataPartition::kDirichlet)
    out = Dirichlet(labels, num_labels, parts, spec.param, rng);
  else if (spec.kind == DataPartition::kShards)
    out = LabelShards(labels, parts, static_cast<int>(spec.param), rng);
  else
    out = Lognormal(n, parts, spec.param, min_size, rng);
  FillSmallParts(out, min_size, rng);
  for (auto& part : out) std::sort(part.begin(), part.end());
  return out;
}

std::string PartitionDigest(const Partition& partition) {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xff)) * 0x100000001b3ULL;
  };
  mix(partition.size());
  for (const auto& part : partition) {
    mix(part.size());
    for (int64_t i : part) mix(static_cast<uint64_t>(i));
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::vector<std::vector<int64_t>> LabelCounts(const Partition& partition, const std::vector<uint8_t>& labels,
                                              int num_labels) {
  std::vector<std::vector<int64_t>> counts(partition.size(), std::vector<int64_t>(num_labels, 0));
  for (size_t p = 0; p < partition.size(); ++p)
    for (int64_t i : partition[p]) ++counts[p][labels[i]];
  return counts;
}

}  // namespace geodesic::worker
