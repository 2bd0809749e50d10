#include "worker/worker_metrics.h"

#include <tuple>

namespace geodesic::worker {

namespace {

void AddStepSplit(transport::MetricsBuilder& b, const stats::WorkerStats& s) {
  const char* help = "Seconds of training by phase: computing, pushing and pulling, waiting at the staleness bound.";
  b.Counter("step_seconds_total", help, s.compute_seconds(), {{"phase", "compute"}});
  b.Counter("step_seconds_total", help, s.comm_seconds(), {{"phase", "communication"}});
  b.Counter("step_seconds_total", help, s.wait_seconds(), {{"phase", "staleness_wait"}});
  b.Gauge("training_seconds", "Seconds since this process started training.", s.training_seconds());
}

void AddLinks(transport::MetricsBuilder& b, const stats::WorkerStats& s) {
  for (const auto& [region, l] : s.links_from_servers()) {
    const transport::ExtraLabels peer = {{"peer_region", region}};
    b.Gauge("link_rtt_seconds", "Passive estimate: least pull round trip to the region's shards.", l.min_rtt_ms() / 1e3,
            peer);
    b.Gauge("link_bandwidth_bytes_per_second", "Passive estimate: EWMA of pull reply throughput from the region.",
            l.mbit() * 1e6 / 8, peer);
  }
}

// federated.gateway: what real clients, and whoever else connected, cost the gateway.
void AddGateway(transport::MetricsBuilder& b, const stats::GatewayStats& g) {
  for (const auto& [reason, n] : g.refused_by_reason())
    b.Counter("gateway_refusals_total", "Client gateway: hellos, updates and messages refused, by reason.", n,
              {{"reason", reason}});
  b.Counter("gateway_refusals_unanswered_total", "Client gateway: refusals past the connection's answer budget.",
            g.refusals_unanswered());
  b.Counter("gateway_updates_dropped_total",
            "Client gateway: updates ignored (not attached, another connection, a round not asked).",
            g.updates_dropped());
  b.Counter("gateway_timeouts_total", "Client gateway: real clients that sent no update by a round's deadline.",
            g.timeouts());
  b.Counter("gateway_not_waited_total",
            "Client gateway: clients that timed out before, not there when their turn came (trained virtually).",
            g.not_waited());
  b.Gauge("gateway_clients_attached", "Client gateway: real clients attached now.", g.attached());
  b.Counter("gateway_connections_limited_total",
            "Client gateway: connections the connection guard reset or took (per-address limits).",
            g.connections_limited());
  b.Counter("gateway_handshakes_failed_total",
            "Client gateway: handshakes ZeroMQ failed (plaintext peers, wrong keys).", g.handshakes_failed());
}

void AddFederated(transport::MetricsBuilder& b, const stats::WorkerStats& s) {
  if (!s.has_clients_trained()) return;
  b.Counter("federated_rounds_total", "Federated rounds this executor ran.", s.rounds_size());
  b.Counter("federated_clients_total", "Selected clients by outcome.", s.clients_trained(), {{"outcome", "trained"}});
  b.Counter("federated_clients_total", "Selected clients by outcome.", s.clients_dropped(), {{"outcome", "dropped"}});
  b.Counter("federated_clients_total", "Selected clients by outcome.", s.client_updates_unusable(),
            {{"outcome", "unusable"}});
  b.Counter("federated_clients_total", "Selected clients by outcome.", s.client_updates_refused(),
            {{"outcome", "refused"}});
  b.Counter("federated_clients_total", "Selected clients by outcome.", s.clients_late(), {{"outcome", "late"}});
  if (s.has_real_client_updates())
    b.Counter("federated_real_client_updates_total", "Usable updates from real client processes.",
              s.real_client_updates());
  if (s.has_gateway()) AddGateway(b, s.gateway());
}

void AddLive(transport::MetricsBuilder& b, const WorkerLive& live) {
  const char* help =
      "Bytes exchanged with the shards of a region: on the wire (headers included) and raw (the fp32 values "
      "before encoding).";
  for (const RegionTraffic& t : live.traffic) {
    for (const auto& [direction, wire, raw] :
         {std::tuple{"sent", t.wire_sent, t.raw_sent}, std::tuple{"received", t.wire_received, t.raw_received}}) {
      b.Counter("peer_bytes_total", help, static_cast<double>(wire),
                {{"peer_region", t.region}, {"direction", direction}, {"encoding", "wire"}});
      b.Counter("peer_bytes_total", help, static_cast<double>(raw),
                {{"peer_region", t.region}, {"direction", direction}, {"encoding", "raw"}});
    }
  }
  if (live.pull_latency)
    b.CumulativeHistogram("pull_latency_seconds", "Pulls: request to the last shard's reply (holds included).",
                          live.pull_latency->Cumulative(), live.pull_latency->sum());
  if (live.push_latency)
    b.CumulativeHistogram("push_latency_seconds", "Pushes: sent to acknowledged, per shard.",
                          live.push_latency->Cumulative(), live.push_latency->sum());
}

}  // namespace

std::vector<prometheus::MetricFamily> EvaluatorMetrics(const JobSpec& job, const transport::TrafficCounters& counters,
                                                       const nlohmann::json& result) {
  transport::MetricsBuilder b(
      {.job = job.name, .region = job.CoordinatorRegion().name, .role = "evaluator", .id = "0"});
  transport::AddTraffic(b, static_cast<double>(counters.bytes_sent.load()),
                        static_cast<double>(counters.bytes_received.load()));
  auto has = [&](const char* key) { return result.is_object() && result.contains(key) && result[key].is_number(); };
  b.Gauge("evaluated", "1 once the final model was evaluated on the test set.", has("test_loss"));
  if (has("test_accuracy"))
    b.Gauge("test_accuracy", "The final model's accuracy on the test set (0..1).",
            result["test_accuracy"].get<double>());
  if (has("test_loss"))
    b.Gauge("test_loss", "The final model's mean loss on the test (validation) set.",
            result["test_loss"].get<double>());
  if (has("test_perplexity"))
    b.Gauge("test_perplexity", "exp(test_loss) of a model of token data.", result["test_perplexity"].get<double>());
  return b.Take();
}

std::vector<prometheus::MetricFamily> WorkerMetrics(const stats::WorkerStats& s, const transport::MetricLabels& labels,
                                                    const WorkerLive& live) {
  transport::MetricsBuilder b(labels);
  b.Counter("steps_total", "Minibatch steps run.", s.steps());
  b.Counter("samples_total", "Training samples processed.", s.samples());
  b.Counter("clocks_total", "Clocks advanced (pushes), rejoin jumps excluded.", s.clocks());
  b.Counter("skipped_steps_total", "Steps whose push was not sent.", s.skipped_steps());
  if (s.has_clipped_steps())
    b.Counter("clipped_steps_total", "Minibatch gradients scaled down to optimizer.clip_norm.", s.clipped_steps());
  if (s.has_early_merges())
    b.Counter("early_merges_total", "Overlapped rounds whose average was folded in mid-round.", s.early_merges());
  if (s.has_merge_wait_seconds())
    b.Counter("merge_wait_seconds_total", "Waiting mid-round for an overlapped round's average.",
              s.merge_wait_seconds());
  b.Counter("pushes_refused_total", "Pushes the shards refused.", s.pushes_refused());
  b.Counter("redirects_total", "Requests redirected to another shard.", s.redirects());
  b.Counter("pull_resyncs_total", "Full pulls after a gap.", s.pull_resyncs());
  transport::AddTraffic(b, s.bytes_sent(), s.bytes_received());
  transport::AddMessages(b, s.messages_sent(), s.messages_received());
  AddStepSplit(b, s);
  b.Gauge("error_feedback_residual_norm", "L2 norm of the error-feedback residual.", s.residual_norm());
  if (s.loss() >= 0) b.Gauge("training_loss", "EWMA of the training loss.", s.loss());
  if (s.train_accuracy() >= 0)
    b.Gauge("training_accuracy", "EWMA of the training accuracy (0..1).", s.train_accuracy());
  b.Gauge("finished", "1 once this worker has run its last step.", s.finished());
  AddLinks(b, s);
  AddFederated(b, s);
  AddLive(b, live);
  return b.Take();
}

}  // namespace geodesic::worker
