// MetricsBuilder: a role's metric families, built from its stats each time
// it publishes them (every stats interval, on its own loop), in
// prometheus-cpp's data model; MetricsSnapshot (http_endpoint.h) serves
// them. Names follow Prometheus' conventions: the geodesic_ prefix, _total
// on counters, base units in the name (_seconds, _bytes). Every series
// carries the process's job, region, role and id; extra labels come from
// small fixed sets (a direction, a refusal reason, a peer region), so the
// number of series stays bounded by the job's size.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/map.h>
#include <prometheus/metric_family.h>

namespace geodesic::transport {

struct MetricLabels {
  std::string job;
  std::string region;
  std::string role;  // coordinator | server | worker | evaluator | aggregator | launcher
  std::string id;
};

using ExtraLabels = std::vector<std::pair<std::string, std::string>>;

class MetricsBuilder {
 public:
  explicit MetricsBuilder(MetricLabels base) : base_(std::move(base)) {}

  // `name` without the geodesic_ prefix; a counter's must end in _total.
  void Counter(const std::string& name, const std::string& help, double value, const ExtraLabels& extra = {});
  void Gauge(const std::string& name, const std::string& help, double value, const ExtraLabels& extra = {});
  // `counts`: observations per exact value (e.g. staleness in clocks ->
  // count); buckets at each of `bounds` (ascending) and +Inf.
  void Histogram(const std::string& name, const std::string& help, const std::map<int64_t, uint64_t>& counts,
                 const std::vector<double>& bounds, const ExtraLabels& extra = {});
  // The same from already-bucketed data: cumulative counts per bound
  // (the last bound +Inf), with the sum of observations.
  void CumulativeHistogram(const std::string& name, const std::string& help,
                           const std::vector<std::pair<double, uint64_t>>& cumulative, double sum,
                           const ExtraLabels& extra = {});

  std::vector<prometheus::MetricFamily> Take() { return std::move(families_); }

 private:
  prometheus::ClientMetric& Add(const std::string& name, const std::string& help, prometheus::MetricType type,
                                const ExtraLabels& extra);

  MetricLabels base_;
  std::vector<prometheus::MetricFamily> families_;
  std::map<std::string, size_t> index_;
};

// Traffic and refusals, as every role counts them.
void AddTraffic(MetricsBuilder& b, double sent, double received);
void AddMessages(MetricsBuilder& b, double sent, double received);
void AddRefusals(MetricsBuilder& b, const google::protobuf::Map<std::string, uint32_t>& by_reason, uint32_t unanswered,
                 uint32_t sends_dropped);

}  // namespace geodesic::transport
