// A worker's metric families, from the stats it already keeps
// (proto/stats.proto WorkerStats): what /metrics shows is what the job's
// summary adds up. Names and labels: transport/metrics.h; the list is in
// docs/observability.md.
#pragma once

#include <vector>

#include <prometheus/metric_family.h>

#include <nlohmann/json.hpp>

#include "common/histogram.h"
#include "config/job.h"
#include "proto/stats.pb.h"
#include "transport/metrics.h"
#include "worker/ps_client.h"

namespace geodesic::worker {

// What the stats record does not carry: bytes per server region, raw and
// on the wire, and the pull and push latencies.
struct WorkerLive {
  std::vector<RegionTraffic> traffic;
  const DurationHistogram* pull_latency = nullptr;
  const DurationHistogram* push_latency = nullptr;
};

// The evaluator's: its traffic, and once it evaluated the final model
// (`result` has test_accuracy) the accuracy.
std::vector<prometheus::MetricFamily> EvaluatorMetrics(const JobSpec& job, const transport::TrafficCounters& counters,
                                                       const nlohmann::json& result);

std::vector<prometheus::MetricFamily> WorkerMetrics(const stats::WorkerStats& s, const transport::MetricLabels& labels,
                                                    const WorkerLive& live = {});

}  // namespace geodesic::worker
