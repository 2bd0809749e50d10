// `geodesic bench ...`: one subcommand per benchmark (bench/bench.h).
//
// Each benchmark subcommand has its own BenchOptions: CLI11 writes an
// option's default into its variable when the option is declared, so
// subcommands sharing a variable would see the last-declared one's default.
// Vector defaults are set where they are used, not with default_val: with
// LibTorch's headers in the binary CLI11 prints them in a form it cannot read
// back.
#include <memory>

#include "bench/bench.h"
#include "cli/command.h"
#include "common/log.h"

namespace geodesic::cli {
namespace {

using bench::BenchOptions;
using BenchFn = Status (*)(const BenchOptions&, const std::atomic<bool>*);

// A benchmark subcommand of `parent`, its options bound by `declare`.
template <typename Declare>
Command AddBenchmark(CLI::App* parent, const char* name, const char* help, BenchFn fn, Declare declare) {
  auto o = std::make_shared<BenchOptions>();
  auto* cmd = parent->add_subcommand(name, help);
  declare(cmd, *o);
  return {cmd, [o, fn] {
            Status s = fn(*o, &g_stop);
            return s.ok() ? 0 : Fail(s);
          }};
}

Command AddTransport(CLI::App* b) {
  return AddBenchmark(b, "transport", "push+pull goodput through one shard vs raw ZeroMQ", bench::RunTransportBench,
                      [](CLI::App* cmd, BenchOptions& o) {
                        cmd->add_flag("--json", o.json, "print JSON records");
                        cmd->add_flag("--curve", o.curve,
                                      "also run a shard of the same job with security.mode curve, side by side in "
                                      "the same rounds");
                        cmd->add_option("--sizes-mb", o.sizes_mb, "payload sizes in MB (default 1 16 64)");
                        cmd->add_option("--seconds", o.seconds, "measuring time per size and system")->default_val(3.0);
                        cmd->add_option("--chunk-bytes", o.chunk_bytes, "chunk (message) size for both systems")
                            ->default_val(int64_t{4} << 20);
                        cmd->add_option("--set", o.overrides,
                                        "override a key of the shard's job, e.g. optimizer.momentum=0");
                      });
}

Command AddPsOverhead(CLI::App* b) {
  return AddBenchmark(
      b, "ps-overhead", "samples/s of the 4-worker async job vs plain LibTorch", bench::RunPsOverheadBench,
      [](CLI::App* cmd, BenchOptions& o) {
        cmd->add_flag("--json", o.json, "print JSON");
        cmd->add_option("--job", o.job_file, "job file")->default_val("examples/fashion_mnist.yaml");
        cmd->add_option("--baseline-seconds", o.seconds, "seconds of plain training")->default_val(40.0);
        cmd->add_option("--processes", o.processes, "plain training processes (one per core)")->default_val(2);
        cmd->add_option("--staleness-bound", o.staleness_bound, "staleness bound of the async run")->default_val(2);
        cmd->add_option("--epochs", o.epochs, "epochs of the async run (0: the job's)")->default_val(4.0);
        cmd->add_option("--set", o.overrides,
                        "override a key of the Geodesic run's job, e.g. training.pipeline_depth=2 (the plain "
                        "baseline trains the job file's model, batch and optimizer)");
      });
}

Command AddPlainTrain(CLI::App* b) {
  return AddBenchmark(b, "plain-train", "plain LibTorch training, no parameter server (a baseline)",
                      bench::RunPlainTraining, [](CLI::App* cmd, BenchOptions& o) {
                        cmd->add_option("--job", o.job_file, "job file")->default_val("examples/fashion_mnist.yaml");
                        cmd->add_option("--seconds", o.seconds, "seconds to train")->default_val(30.0);
                        cmd->add_option("--result-file", o.result_file, "write JSON here");
                      });
}

Command AddCodecs(CLI::App* b) {
  auto o = std::make_shared<BenchOptions>();
  auto* cmd = b->add_subcommand("codecs", "encode/decode speed of every codec vs memcpy, one thread");
  cmd->add_flag("--json", o->json, "print JSON records");
  auto* mb_opt = cmd->add_option("--mb", o->sizes_mb, "gradient size in MiB (several: one run each; default 64)");
  cmd->add_option("--seconds", o->seconds, "measuring time per codec (at least 3 rounds)")->default_val(1.0);
  return {cmd, [o, mb_opt] {
            if (mb_opt->count() == 0) o->sizes_mb = {64};
            Status s = bench::RunCodecBench(*o, &g_stop);
            return s.ok() ? 0 : Fail(s);
          }};
}

Command AddCompression(CLI::App* b) {
  return AddBenchmark(
      b, "compression", "train with every codec for the same steps: accuracy vs bytes", bench::RunCompressionSweep,
      [](CLI::App* cmd, BenchOptions& o) {
        cmd->add_option("--job", o.job_file, "job file")->default_val("examples/fashion_mnist.yaml");
        cmd->add_option("--epochs", o.epochs, "epochs of every run (0: the job's)")->default_val(0.0);
        cmd->add_option("--out", o.result_file, "output directory")->default_val("runs/compression");
        cmd->add_option("--codecs", o.codecs, "codecs to sweep (each with/without zstd and error feedback)");
        cmd->add_option("--mc-codecs", o.mc_codecs, "codecs also run with momentum correction (+zstd, EF)");
        cmd->add_option("--direction", o.direction, "compress push, pull or both")->default_val("push");
        cmd->add_flag("--resume", o.resume, "reuse finished runs of the same configuration in --out");
      });
}

void DeclareWanOptions(CLI::App* cmd, BenchOptions& o) {
  cmd->add_option("--job", o.job_file, "multi-region job file")->default_val("examples/three_regions.yaml");
  cmd->add_option("--epochs", o.epochs, "epochs of every run (0: the job's)")->default_val(4.0);
  cmd->add_option("--out", o.result_file, "output directory")->default_val("runs/wan");
  cmd->add_option("--configs", o.configs,
                  "configurations: lan, wan-bsp, wan-ssp, wan-ssp-best, wan-bsp-best, lan-local, wan-local, "
                  "lan-diloco, wan-diloco, ddp (default all but wan-bsp-best and the diloco ones)");
  cmd->add_option("--local-steps", o.local_steps, "steps per round of the local SGD configurations")->default_val(6);
  cmd->add_option("--overlap-steps", o.overlap_steps,
                  "overlapped local SGD and DiLoCo configurations fold each round's average in as soon as it has "
                  "arrived, waiting for it after this many steps (training.overlap_steps; 0: when the round ends)")
      ->default_val(0);
  cmd->add_option("--fragments", o.fragments,
                  "local SGD and DiLoCo configurations synchronize one of this many fragments of the model per round, "
                  "in turn (training.fragments, streaming DiLoCo)")
      ->default_val(1);
  cmd->add_flag("!--no-overlap", o.overlap_rounds,
                "local SGD and DiLoCo configurations wait for each round's average instead of overlapping it with "
                "the next round");
  cmd->add_option("--diloco-inner-lr", o.diloco_inner_lr, "AdamW learning rate of lan-diloco and wan-diloco")
      ->default_val(o.diloco_inner_lr);
  cmd->add_option("--diloco-outer-lr", o.diloco_outer_lr, "outer Nesterov learning rate of lan-diloco and wan-diloco")
      ->default_val(o.diloco_outer_lr);
  cmd->add_option("--diloco-outer-momentum", o.diloco_outer_momentum,
                  "outer Nesterov momentum of lan-diloco and wan-diloco")
      ->default_val(o.diloco_outer_momentum);
  cmd->add_option("--local-epochs", o.local_epochs, "epochs of the local SGD configurations")->default_val(5.0);
  cmd->add_option("--ddp-cap-x", o.ddp_cap_x,
                  "ddp: stop after this many times the best Geodesic WAN time to the target")
      ->default_val(12.0);
  cmd->add_option("--ddp-max-s", o.ddp_max_s, "ddp: the time cap when no Geodesic WAN run reached it")
      ->default_val(900.0);
  cmd->add_option("--repeats", o.repeats,
                  "runs of each configuration, in order then reversed (ABBA); the table reports medians and "
                  "wan-runs.csv every run")
      ->default_val(1)
      ->check(CLI::Range(1, 20));
  cmd->add_option("--staleness-bound", o.staleness_bound, "bound of the bounded-staleness runs")->default_val(2);
  cmd->add_option("--snapshot-every", o.snapshot_every_s, "seconds between accuracy-curve snapshots")->default_val(2.0);
  cmd->add_option("--set", o.overrides, "override a key of every run's job");
}

Command AddLinks(CLI::App* b) {
  return AddBenchmark(
      b, "links",
      "configured vs probed RTT and Mbit/s of a job's emulated links, and the emulator's CPU per MB "
      "relayed, per message and per idle connection",
      bench::RunLinksBench, [](CLI::App* cmd, BenchOptions& o) {
        cmd->add_flag("--json", o.json, "print JSON records");
        cmd->add_option("--job", o.job_file, "job file whose wan.links to emulate and probe")
            ->default_val("examples/three_regions.yaml");
        cmd->add_option("--seconds", o.seconds, "how long the idle connections are measured")->default_val(3.0);
        cmd->add_option("--busy", o.busy_threads,
                        "threads that spin while the emulator's cost is measured, as a job's processes keep the "
                        "cores busy (its delays then show what waiting for a core adds)")
            ->default_val(0)
            ->check(CLI::Range(0, 64));
      });
}

void DeclareFailoverOptions(CLI::App* cmd, BenchOptions& o) {
  cmd->add_flag("--json", o.json, "print JSON");
  cmd->add_option("--kills", o.kills, "runs with a primary SIGKILLed 1.5 s into training")->default_val(5);
  cmd->add_option("--rounds", o.rounds, "plain/replicated throughput pairs")->default_val(2);
  cmd->add_option("--out", o.result_file, "run directories go here")->default_val("runs/failover");
  cmd->add_option("--set", o.overrides, "override a key of every run's job");
  cmd->add_option("--rtt-ms", o.link_rtt_ms,
                  "join the two regions by an emulated link of this RTT (replication and the workers' "
                  "cross-region traffic cross it); 0: loopback")
      ->default_val(0)
      ->check(CLI::Range(0.0, 10000.0));
  cmd->add_option("--mbit", o.link_mbit, "with --rtt-ms: the link's bandwidth (0: unlimited)")
      ->default_val(0)
      ->check(CLI::Range(0.0, 1e6));
}

}  // namespace

Command AddBench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "benchmarks (see docs/benchmarks.md)");
  cmd->require_subcommand(1);
  std::vector<Command> benches = {
      AddTransport(cmd),
      AddPsOverhead(cmd),
      AddPlainTrain(cmd),
      AddCodecs(cmd),
      AddCompression(cmd),
      AddBenchmark(cmd, "wan", "time to the target accuracy: LAN vs emulated WAN, staleness, compression",
                   bench::RunWanExperiment, DeclareWanOptions),
      AddLinks(cmd),
      AddBenchmark(cmd, "metrics", "what building and serving /metrics costs a process (in process, per call)",
                   bench::RunMetricsBench,
                   [](CLI::App* m, BenchOptions& o) {
                     m->add_option("--seconds", o.seconds, "measuring time per case")->default_val(1.0);
                   }),
      AddBenchmark(cmd, "failover",
                   "replicated shards: steps/s with and without backups, and failover time over several kills",
                   bench::RunFailoverBench, DeclareFailoverOptions),
      AddBenchmark(cmd, "zmq-sink", "(internal) raw ZeroMQ peer for bench transport", bench::RunZmqSink,
                   [](CLI::App* sink, BenchOptions& o) {
                     sink->add_option("--endpoint", o.endpoint)->required();
                     sink->group("");
                   }),
  };
  return {cmd, [benches] {
            SetLogPrefix("bench");
            for (const Command& b : benches)
              if (b.app->parsed()) return b.run();
            return 0;
          }};
}

}  // namespace geodesic::cli
