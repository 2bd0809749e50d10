// The coordinator's metric families, from the stats it already keeps
// (proto/stats.proto): what /metrics shows is what the job's summary adds
// up. Names and labels: transport/metrics.h; the list is in
// docs/observability.md. Thread-safe (a pure function).
#pragma once

#include <vector>

#include <prometheus/metric_family.h>

#include "proto/stats.pb.h"
#include "transport/metrics.h"

namespace geodesic::coordinator {

std::vector<prometheus::MetricFamily> CoordinatorMetrics(const stats::CoordinatorStats& s,
                                                         const transport::MetricLabels& labels);

}  // namespace geodesic::coordinator
