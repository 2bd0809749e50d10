#include "server/role_metrics.h"

namespace geodesic::server {

namespace {

// Staleness buckets (clocks): exact up to 4, then powers of two.
const std::vector<double> kStalenessBounds = {0, 1, 2, 3, 4, 8, 16, 32, 64};

void AddReplication(transport::MetricsBuilder& b, const stats::ShardStats& s) {
  if (s.has_replication_ops_sent())
    b.Counter("replication_ops_total", "Replication ops a primary sent to its backup, or a backup applied.",
              s.replication_ops_sent(), {{"op", "sent"}});
  if (s.has_replication_ops_resent())
    b.Counter("replication_ops_total", "Replication ops a primary sent to its backup, or a backup applied.",
              s.replication_ops_resent(), {{"op", "resent"}});
  if (s.has_replication_ops_applied())
    b.Counter("replication_ops_total", "Replication ops a primary sent to its backup, or a backup applied.",
              s.replication_ops_applied(), {{"op", "applied"}});
  if (s.has_replication_ops_pending())
    b.Gauge("replication_lag_ops", "Replication ops a primary sent that its backup has not acknowledged yet.",
            s.replication_ops_pending());
  if (s.has_replication_degraded())
    b.Gauge("replication_degraded", "1 while a replicated primary goes on without its backup.",
            s.replication_degraded());
  b.Gauge("promoted", "1 once this backup has taken over its shard (a failover).", s.promoted());
}

}  // namespace

std::vector<prometheus::MetricFamily> ShardMetrics(const stats::ShardStats& s, const transport::MetricLabels& labels) {
  transport::MetricsBuilder b(labels);
  transport::AddTraffic(b, s.bytes_sent(), s.bytes_received());
  transport::AddMessages(b, s.messages_sent(), s.messages_received());
  transport::AddRefusals(b, s.refused_by_reason(), s.refusals_unanswered(), s.sends_dropped());
  b.Gauge("serving", "1 while this process serves its shard (a primary, or a promoted backup).", s.serving());
  b.Gauge("chunks", "Parameter chunks this shard owns.", s.chunks());
  b.Counter("updates_applied_total", "Chunk updates applied to the shard's parameters.", s.updates_applied());
  b.Counter("updates_taken_total", "Chunk updates taken from workers (applied or replicated).", s.updates_taken());
  b.Counter("duplicate_pushes_total", "Resent pushes answered as duplicates.", s.duplicates());
  b.Counter("stale_updates_dropped_total", "Updates dropped as staler than the bound.", s.stale_dropped());
  std::map<int64_t, uint64_t> staleness(s.staleness_histogram().begin(), s.staleness_histogram().end());
  b.Histogram("update_staleness_clocks", "Staleness of applied chunk updates (the shard's clock minus the push's).",
              staleness, kStalenessBounds);
  b.Counter("checkpoints_written_total", "Checkpoints written.", s.checkpoints_written());
  b.Gauge("last_checkpoint_clock", "Clock of the newest checkpoint; -1 before one.", s.last_checkpoint_clock());
  b.Gauge("last_checkpoint_duration_seconds", "How long the newest checkpoint took.", s.last_checkpoint_ms() / 1e3);
  if (s.has_connections_refused())
    b.Counter("handshakes_refused_total", "Secured: CURVE handshakes refused.", s.connections_refused());
  b.Counter("connections_limited_total", "Connections closed over a per-address or total limit.",
            s.connections_limited());
  if (s.has_migration_chunks_sent()) {
    b.Counter("migrated_chunks_total", "Chunks handed to or taken from another shard by a re-plan.",
              s.migration_chunks_sent(), {{"direction", "out"}});
    b.Counter("migrated_chunks_total", "Chunks handed to or taken from another shard by a re-plan.",
              s.migration_chunks_adopted(), {{"direction", "in"}});
  }
  AddReplication(b, s);
  return b.Take();
}

}  // namespace geodesic::server
