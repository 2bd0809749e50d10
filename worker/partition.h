// Splitting a labelled training set into parts (workers today, federated
// clients later): IID, label skew (Dirichlet), label shards (McMahan et al.)
// and quantity skew (log-normal sizes); config/job.h's PartitionSpec names
// them. Seeded and deterministic: the same labels, parts, spec and seed give
// the same split (common/draws.h on mt19937_64, whose output the standard
// fixes, rather than libstdc++'s distributions; only libm's log, exp and
// cos could differ between platforms), and PartitionDigest names it in the
// job summary so two runs can be checked for the same split. docs/partitions.md has the
// algorithms and their costs. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/job.h"

namespace geodesic::worker {

// Sample indices per part. Every index of [0, labels.size()) is in exactly
// one part, and every part holds at least `min_size` (a worker needs one
// full batch). IID keeps IidPartition's order (a slice of one seeded
// permutation); the others list each part's indices in ascending order.
using Partition = std::vector<std::vector<int64_t>>;

// num_labels: labels are in [0, num_labels). Refused (InvalidArgument, with
// the numbers) when the set is too small for `parts` parts of `min_size`,
// or, for shards:K, for parts * K shards of at least min_size / K samples.
StatusOr<Partition> PartitionSamples(const std::vector<uint8_t>& labels, int num_labels, int parts,
                                     const PartitionSpec& spec, uint64_t seed, int64_t min_size);

// 16 hex digits (64-bit FNV-1a over the part count, each part's size and
// indices in order).
std::string PartitionDigest(const Partition& partition);

// counts[part][label].
std::vector<std::vector<int64_t>> LabelCounts(const Partition& partition, const std::vector<uint8_t>& labels,
                                              int num_labels);

}  // namespace geodesic::worker
