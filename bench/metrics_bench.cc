// `geodesic bench metrics`: what /metrics costs the processes, measured in
// process and so independent of a noisy machine: the time to build a
// worker's and a shard's metric families from their stats (each role does
// so every 2 s) and to serialize them for one scrape, from stats the size
// of a three-region job's; and the share of one core that costs at one
// publish every 2 s and one scrape a second (docs/observability.md).
#include <chrono>
#include <cstdio>

#include "bench/bench.h"
#include "common/format.h"
#include "server/role_metrics.h"
#include "transport/http_endpoint.h"
#include "worker/worker_metrics.h"

namespace geodesic::bench {
namespace {

stats::WorkerStats SampleWorker() {
  stats::WorkerStats s;
  s.set_steps(12345), s.set_samples(790080), s.set_bytes_sent(9e9), s.set_bytes_received(9e9);
  s.set_compute_seconds(100), s.set_comm_seconds(20), s.set_wait_seconds(5), s.set_loss(0.3);
  s.set_train_accuracy(0.9);
  for (const char* r : {"us", "eu", "asia"}) (*s.mutable_links_from_servers())[r].set_mbit(90);
  return s;
}

stats::ShardStats SampleShard() {
  stats::ShardStats s;
  s.set_updates_applied(99999), s.set_chunks(64), s.set_bytes_sent(9e9), s.set_serving(true);
  for (int k = 0; k < 8; ++k) (*s.mutable_staleness_histogram())[k] = 1000u * static_cast<uint32_t>(k + 1);
  for (const char* r : {"stale", "malformed", "bad_token"}) (*s.mutable_refused_by_reason())[r] = 3;
  return s;
}

// Mean microseconds of `fn` over `seconds` (at least 100 calls).
template <typename Fn>
double MeanMicros(double seconds, Fn fn) {
  const auto start = std::chrono::steady_clock::now();
  int64_t n = 0;
  double elapsed = 0;
  do {
    fn();
    ++n;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (n < 100 || elapsed < seconds);
  return elapsed / static_cast<double>(n) * 1e6;
}

}  // namespace

Status RunMetricsBench(const BenchOptions& options, const std::atomic<bool>* stop) {
  const transport::MetricLabels labels{.job = "bench", .region = "us", .role = "worker", .id = "3"};
  const stats::WorkerStats ws = SampleWorker();
  const stats::ShardStats ss = SampleShard();
  DurationHistogram pull, push;
  for (int i = 0; i < 1000; ++i) pull.Observe(0.001 * i), push.Observe(0.002 * i);
  worker::WorkerLive live{.traffic = {{"us", 1, 2, 3, 4}, {"eu", 1, 2, 3, 4}, {"asia", 1, 2, 3, 4}},
                          .pull_latency = &pull,
                          .push_latency = &push};
  transport::MetricsSnapshot worker_snapshot, shard_snapshot;
  const double worker_build =
      MeanMicros(options.seconds, [&] { worker_snapshot.Publish(worker::WorkerMetrics(ws, labels, live)); });
  const double shard_build =
      MeanMicros(options.seconds, [&] { shard_snapshot.Publish(server::ShardMetrics(ss, labels)); });
  size_t bytes = 0;
  const double worker_text = MeanMicros(options.seconds, [&] { bytes = worker_snapshot.Text().size(); });
  const double shard_text = MeanMicros(options.seconds, [&] { (void)shard_snapshot.Text(); });
  // Publish every 2 s, one scrape a second: microseconds per second of wall time.
  const double share = (std::max(worker_build, shard_build) / 2 + std::max(worker_text, shard_text)) / 1e6;
  std::printf("%-8s %14s %16s\n", "role", "build+publish", "serialize (scrape)");
  std::printf("%-8s %11.1f us %13.1f us\n", "worker", worker_build, worker_text);
  std::printf("%-8s %11.1f us %13.1f us\n", "shard", shard_build, shard_text);
  std::printf("worker exposition: %zu bytes; at one publish per 2 s and one scrape per s: %.4f%% of one core\n", bytes,
              share * 100);
  return stop->load() ? Cancelled("stopped") : Status::Ok();
}

}  // namespace geodesic::bench
