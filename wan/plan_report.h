// What `geodesic plan` prints about a plan: the link matrix, the placement
// (chunks and bytes per server), the codecs per region pair, the predicted
// time per link, per region pair and per step, and the same prediction for
// other placements. A pure function of its arguments; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "wan/planner.h"

namespace geodesic::wan {

// The report of `plan`, made by `planner`, compared with round robin and
// each of `baselines` (name, owners) under the plan's codecs. Text, or JSON
// if `json`.
std::string PlanReport(const Planner& planner, const Plan& plan,
                       const std::vector<std::pair<std::string, std::vector<int32_t>>>& baselines, bool json);

// The bytes one step moves between regions: push and pull over every
// ordered pair of two different regions.
double WanBytesPerStep(const Prediction& p);

// Regional aggregators (regions.NAME.aggregator) on and off: the predicted
// WAN bytes per step and step time of `as_job` (the job as written, which
// has aggregators where `job_has` says) and of `other` (the same job with
// an aggregator in every region, or in none). Text, or a JSON object if `json`.
std::string AggregatorComparison(const Plan& as_job, const Plan& other, bool job_has, bool json);

}  // namespace geodesic::wan
