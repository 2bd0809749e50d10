// `geodesic bench ...`: measurements that compare Geodesic with a baseline
// in the same run (docs/benchmarks.md has the numbers and how to rerun).
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "common/status.h"

namespace geodesic::bench {

struct BenchOptions {
  bool json = false;
  bool curve = false;  // transport: also a CurveZMQ shard, measured in the same rounds
  std::vector<int> sizes_mb{1, 16, 64};
  double seconds = 3.0;
  int processes = 2;
  int busy_threads = 0;  // links: threads that keep the cores busy while the emulator's cost is measured
  std::string job_file = "examples/fashion_mnist.yaml";
  std::string result_file;
  std::string endpoint;
  std::string binary;                  // default: this binary
  int64_t chunk_bytes = 4 << 20;       // transport: chunk (message) size of both systems
  int64_t staleness_bound = 2;         // ps-overhead: the async run's bound
  double epochs = 4;                   // ps-overhead: epochs of the async run (0: the job's)
  std::vector<std::string> overrides;  // transport, ps-overhead, wan, sweep: --set for the runs' jobs
  // compression: codecs swept with and without zstd and error feedback, and
  // codecs run (with zstd and error feedback) under momentum correction.
  std::vector<std::string> codecs{"fp16", "bf16", "int8", "int4", "sign", "topk:0.01", "randk:0.01"};
  std::vector<std::string> mc_codecs{"topk:0.01", "topk:0.005"};
  std::string direction = "push";    // compression: push, pull or both
  bool resume = false;               // compression: reuse finished runs of the same configuration in --out
  std::vector<std::string> configs;  // wan: which configurations (empty: all)
  double snapshot_every_s = 2;       // wan: accuracy-curve resolution
  int local_steps = 6;               // wan: local SGD configurations' steps per round
  bool overlap_rounds = true;        // wan: whether their rounds overlap the next round's compute
  int overlap_steps = 0;             // wan: with overlap, training.overlap_steps
  int fragments = 1;                 // wan: local SGD configurations' training.fragments
  // wan: the DiLoCo configurations' AdamW learning rate, and their outer
  // Nesterov SGD's rate and momentum (docs/wan.md says how they were tuned).
  std::string diloco_inner_lr = "0.002";
  std::string diloco_outer_lr = "1.0";
  std::string diloco_outer_momentum = "0.3";
  double local_epochs = 5;  // wan: their epochs (local SGD needs more samples than BSP)
  // wan: runs of each configuration, in ABBA order (the configurations in
  // order, then reversed, ...), so that drift on a shared machine falls on
  // every configuration alike; the table reports each one's median.
  int repeats = 1;
  // wan, configuration ddp: PyTorch DDP over the kernel links stops after
  // this many times the best Geodesic WAN time to the target (or after
  // ddp_max_s when none reached it), so a slow baseline costs bounded time.
  double ddp_cap_x = 12;
  double ddp_max_s = 900;
  int kills = 5;           // failover: runs with a primary killed
  int rounds = 2;          // failover: plain/replicated throughput pairs
  double link_rtt_ms = 0;  // failover: > 0, join the two regions by an emulated link of this RTT...
  double link_mbit = 0;    // ...and this bandwidth (0: unlimited)
};

// Push+pull goodput through one real server shard process vs raw ZeroMQ
// moving the same bytes between two processes.
Status RunTransportBench(const BenchOptions& options, const std::atomic<bool>* stop);
// Samples/s of the job (via the launcher) vs plain LibTorch training in
// `processes` independent single-thread processes.
Status RunPsOverheadBench(const BenchOptions& options, const std::atomic<bool>* stop);
// Plain LibTorch training of the job's model on one thread, no parameter server.
Status RunPlainTraining(const BenchOptions& options, const std::atomic<bool>* stop);
// Encode and decode speed of every codec on a `sizes_mb` MiB gradient, one
// thread, against memcpy of the same buffer in the same rounds.
Status RunCodecBench(const BenchOptions& options, const std::atomic<bool>* stop);
// What building and serving /metrics costs a process (docs/observability.md).
Status RunMetricsBench(const BenchOptions& options, const std::atomic<bool>* stop);
// Trains the job once per codec configuration for the same steps and writes
// a table, CSV and plot of accuracy against bytes per step (docs/compression.md).
Status RunCompressionSweep(const BenchOptions& options, const std::atomic<bool>* stop);
// The multi-region experiment: time to the target accuracy with and without
// emulated WAN links, bounded staleness, compression and the planner.
Status RunWanExperiment(const BenchOptions& options, const std::atomic<bool>* stop);
// Configured vs measured RTT and throughput of every declared link of a job
// (default: the three-region example), emulated and probed as a launch does.
Status RunLinksBench(const BenchOptions& options, const std::atomic<bool>* stop);
// Steps/s of a synthetic job without and with shard backups, then the
// failover time (median over `kills` SIGKILLs of a primary) and zero loss.
Status RunFailoverBench(const BenchOptions& options, const std::atomic<bool>* stop);
// The raw ZeroMQ peer of the transport bench.
Status RunZmqSink(const BenchOptions& options, const std::atomic<bool>* stop);

}  // namespace geodesic::bench
