// The shard's metric families, from the stats they
// already keep (proto/stats.proto): what /metrics shows is what the job's
// summary adds up. Names and labels: transport/metrics.h; the list is in
// docs/observability.md.
#pragma once

#include <vector>

#include <prometheus/metric_family.h>

#include "proto/stats.pb.h"
#include "transport/metrics.h"

namespace geodesic::server {

std::vector<prometheus::MetricFamily> ShardMetrics(const stats::ShardStats& s, const transport::MetricLabels& labels);

}  // namespace geodesic::server
