#include "wan/aggregator_choice.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/format.h"
#include "wan/plan_report.h"

namespace geodesic::wan {
namespace {

struct Predicted {
  double exchange_ms = 0, wan_bytes = 0;
};

// The planner's prediction for `job` with region `region`'s aggregator on or off.
StatusOr<Predicted> PredictRegion(JobSpec job, size_t region, bool on, const cluster::ChunkLayout& layout,
                                  const PlannerOptions& options) {
  job.regions[region].aggregator = on;
  GD_ASSIGN_OR_RETURN(Planner planner, Planner::Create(job, layout, options));
  const Plan plan = planner.MakePlan();
  Predicted p{.exchange_ms = 0, .wan_bytes = WanBytesPerStep(plan.prediction)};
  for (const PairTime& t : plan.prediction.pairs)
    if (t.worker_region == job.regions[region].name) p.exchange_ms = std::max(p.exchange_ms, t.ms);
  return p;
}

}  // namespace

StatusOr<std::vector<AggregatorChoice>> ChooseAggregators(JobSpec* job, const cluster::ChunkLayout& layout,
                                                          const PlannerOptions& options) {
  std::vector<AggregatorChoice> out;
  const std::vector<std::string> limits = AggregatorLimits(*job);
  for (size_t i = 0; i < job->regions.size(); ++i) {
    RegionSpec& r = job->regions[i];
    AggregatorChoice c{.region = r.name, .chosen = r.aggregator_auto, .on = r.aggregator, .why = {}};
    if (!r.aggregator_auto) {
      c.why = r.aggregator ? "the job file says true" : "the job file says false or nothing";
    } else if (!limits.empty()) {
      c.why = "none: an aggregator " + limits.front();
    } else if (r.workers < 2) {
      c.why = "none: one worker has nothing to combine";
    } else {
      r.aggregator_auto = false;  // the regions after this one are planned with this one decided
      GD_ASSIGN_OR_RETURN(Predicted without, PredictRegion(*job, i, false, layout, options));
      GD_ASSIGN_OR_RETURN(Predicted with, PredictRegion(*job, i, true, layout, options));
      c.exchange_ms_without = without.exchange_ms;
      c.exchange_ms_with = with.exchange_ms;
      c.wan_bytes_without = without.wan_bytes;
      c.wan_bytes_with = with.wan_bytes;
      c.on = with.exchange_ms <= (1 - kAggregatorGain) * without.exchange_ms;
      c.why = StrFormat("%s: its workers' slowest exchange %.1f ms with one, %.1f ms without (%+.0f%%)",
                        c.on ? "one" : "none", with.exchange_ms, without.exchange_ms,
                        without.exchange_ms > 0 ? 100 * (with.exchange_ms / without.exchange_ms - 1) : 0.0);
    }
    r.aggregator_auto = false;
    r.aggregator = c.on;
    out.push_back(std::move(c));
  }
  return out;
}

std::string AggregatorChoiceReport(const std::vector<AggregatorChoice>& choices, bool json) {
  if (json) {
    nlohmann::json j = nlohmann::json::array();
    for (const AggregatorChoice& c : choices)
      j.push_back({{"region", c.region},
                   {"auto", c.chosen},
                   {"aggregator", c.on},
                   {"why", c.why},
                   {"exchange_ms_without", c.exchange_ms_without},
                   {"exchange_ms_with", c.exchange_ms_with}});
    return j.dump();
  }
  std::string out;
  for (const AggregatorChoice& c : choices)
    if (c.chosen) out += "  " + c.region + ": " + c.why + "\n";
  return out.empty() ? out : "aggregator: auto, per region:\n" + out;
}

}  // namespace geodesic::wan
