#include "coordinator/metrics.h"

namespace geodesic::coordinator {

std::vector<prometheus::MetricFamily> CoordinatorMetrics(const stats::CoordinatorStats& s,
                                                         const transport::MetricLabels& labels) {
  transport::MetricsBuilder b(labels);
  transport::AddTraffic(b, s.bytes_sent(), s.bytes_received());
  transport::AddRefusals(b, s.refused_by_reason(), s.refusals_unanswered(), s.sends_dropped());
  if (s.has_handshakes_refused())
    b.Counter("handshakes_refused_total", "Secured: CURVE handshakes refused.", s.handshakes_refused());
  b.Counter("connections_limited_total", "Connections closed over a per-address or total limit.",
            s.connections_limited());
  b.Gauge("training_seconds", "Seconds from the rendezvous to now (or to the last worker done).", s.training_seconds());
  b.Gauge("job_finished", "1 once every worker has finished.", s.job_finished());
  b.Counter("replans_total", "Re-plans of the shard placement (wan.replan).", s.replans_size());
  b.Counter("failovers_total", "Backups promoted to take over their shard.", s.failovers());
  if (s.has_shard_map_version()) b.Gauge("shard_map_version", "The shard map's version.", s.shard_map_version());
  if (s.has_plan())
    b.Gauge("planned_step_seconds", "The placement's predicted worker step.", s.plan().predicted_step_ms() / 1e3);
  return b.Take();
}

}  // namespace geodesic::coordinator
