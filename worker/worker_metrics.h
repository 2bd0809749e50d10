// A worker's metric families, from the stats it already keeps
// (proto/stats.proto WorkerStats): what /metrics shows is what the job's
// summary adds up. Names and labels: transport/metrics.h; the list is in
// docs/observability.md.
#pragma once

#include <vector>

#include <prometheus/metric_family.h>

#include "proto/stats.pb.h"
#include "transport/metrics.h"

namespace geodesic::worker {

std::vector<prometheus::MetricFamily> WorkerMetrics(const stats::WorkerStats& s, const transport::MetricLabels& labels);

}  // namespace geodesic::worker
