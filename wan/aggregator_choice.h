// Where a regional aggregator pays (regions.NAME.aggregator: auto; docs/wan.md
// "Regional aggregation"). For each region that leaves it to the planner,
// the planner predicts the exchange of that region's workers with and
// without an aggregator (each with its own placement): the aggregator sends
// one push and one pull a clock instead of one per worker, and costs a hop
// over the region's own link (wan/planner.cc, AggregatorHopMs). It is put
// where it makes the region's slowest exchange at least kGain faster.
#pragma once

#include <string>
#include <vector>

#include "cluster/chunking.h"
#include "common/status.h"
#include "config/job.h"
#include "wan/planner.h"

namespace geodesic::wan {

struct AggregatorChoice {
  std::string region;
  bool chosen = false;  // `auto` (false: the job file says true or false)
  bool on = false;
  std::string why;
  // The region's slowest exchange (push to a region's shards and pull back)
  // and the WAN bytes a step of the whole job, without and with.
  double exchange_ms_without = 0, exchange_ms_with = 0;
  double wan_bytes_without = 0, wan_bytes_with = 0;
};

// Least fraction of a region's slowest exchange an aggregator must save.
inline constexpr double kAggregatorGain = 0.05;

// Resolves every `aggregator: auto` region of `job` (sets `aggregator`,
// clears `aggregator_auto`) and says why, a line per region. A job whose
// settings no aggregator combines (AggregatorLimits) gets none, with the
// first reason.
StatusOr<std::vector<AggregatorChoice>> ChooseAggregators(JobSpec* job, const cluster::ChunkLayout& layout,
                                                          const PlannerOptions& options = {});
// One line per region, or a JSON array.
std::string AggregatorChoiceReport(const std::vector<AggregatorChoice>& choices, bool json);

}  // namespace geodesic::wan
