#include "transport/metrics.h"

#include <limits>

#include "common/log.h"

namespace geodesic::transport {

prometheus::ClientMetric& MetricsBuilder::Add(const std::string& name, const std::string& help,
                                              prometheus::MetricType type, const ExtraLabels& extra) {
  const std::string full = "geodesic_" + name;
  auto [it, fresh] = index_.try_emplace(full, families_.size());
  if (fresh) families_.push_back({.name = full, .help = help, .type = type, .metric = {}});
  prometheus::MetricFamily& f = families_[it->second];
  GD_CHECK(f.type == type) << full << " added as two types";
  prometheus::ClientMetric& m = f.metric.emplace_back();
  m.label = {{"job", base_.job}, {"region", base_.region}, {"role", base_.role}, {"id", base_.id}};
  for (const auto& [k, v] : extra) m.label.push_back({k, v});
  return m;
}

void MetricsBuilder::Counter(const std::string& name, const std::string& help, double value, const ExtraLabels& extra) {
  GD_CHECK(name.size() > 6 && name.ends_with("_total")) << name << ": a counter's name ends in _total";
  Add(name, help, prometheus::MetricType::Counter, extra).counter.value = value;
}

void MetricsBuilder::Gauge(const std::string& name, const std::string& help, double value, const ExtraLabels& extra) {
  Add(name, help, prometheus::MetricType::Gauge, extra).gauge.value = value;
}

void MetricsBuilder::Histogram(const std::string& name, const std::string& help,
                               const std::map<int64_t, uint64_t>& counts, const std::vector<double>& bounds,
                               const ExtraLabels& extra) {
  std::vector<std::pair<double, uint64_t>> cumulative;
  double sum = 0;
  uint64_t total = 0;
  auto it = counts.begin();
  for (double bound : bounds) {
    for (; it != counts.end() && static_cast<double>(it->first) <= bound; ++it)
      total += it->second, sum += static_cast<double>(it->first) * static_cast<double>(it->second);
    cumulative.emplace_back(bound, total);
  }
  for (; it != counts.end(); ++it)
    total += it->second, sum += static_cast<double>(it->first) * static_cast<double>(it->second);
  cumulative.emplace_back(std::numeric_limits<double>::infinity(), total);
  CumulativeHistogram(name, help, cumulative, sum, extra);
}

void MetricsBuilder::CumulativeHistogram(const std::string& name, const std::string& help,
                                         const std::vector<std::pair<double, uint64_t>>& cumulative, double sum,
                                         const ExtraLabels& extra) {
  prometheus::ClientMetric& m = Add(name, help, prometheus::MetricType::Histogram, extra);
  m.histogram.sample_sum = sum;
  m.histogram.sample_count = cumulative.empty() ? 0 : cumulative.back().second;
  for (const auto& [bound, n] : cumulative) m.histogram.bucket.push_back({.cumulative_count = n, .upper_bound = bound});
}

void AddTraffic(transport::MetricsBuilder& b, double sent, double received) {
  const char* help = "Bytes this process sent or received on the wire, headers included.";
  b.Counter("wire_bytes_total", help, sent, {{"direction", "sent"}});
  b.Counter("wire_bytes_total", help, received, {{"direction", "received"}});
}

void AddMessages(MetricsBuilder& b, double sent, double received) {
  const char* help = "Messages this process sent or received.";
  b.Counter("messages_total", help, sent, {{"direction", "sent"}});
  b.Counter("messages_total", help, received, {{"direction", "received"}});
}

void AddRefusals(transport::MetricsBuilder& b, const google::protobuf::Map<std::string, uint32_t>& by_reason,
                 uint32_t unanswered, uint32_t sends_dropped) {
  for (const auto& [reason, n] : by_reason)
    b.Counter("refusals_total", "Messages refused, by reason (the wire's Refusal enum).", n, {{"reason", reason}});
  b.Counter("refusals_unanswered_total", "Refusals past the peer's answer budget, not answered.", unanswered);
  b.Counter("sends_dropped_total", "Replies and sends dropped because the peer's queue was full.", sends_dropped);
}

}  // namespace geodesic::transport
