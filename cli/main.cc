// geodesic: one binary, one subcommand per role or tool.
//
// Flags and the job file are parsed here, once, into the Options structs the
// libraries take; nothing below main reads the environment.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <iostream>
#include <zmq.hpp>

#include "bench/bench.h"
#include "common/job.h"
#include "common/log.h"
#include "deploy/launcher.h"
#include "server/coordinator.h"
#include "server/server.h"
#include "worker/trainer.h"

namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

void InstallSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int Fail(const geodesic::Status& s) {
  if (s.code() == geodesic::Code::kCancelled) {
    GD_LOG(INFO) << "stopped: " << s.message();
    return 130;
  }
  GD_LOG(ERROR) << s;
  return 1;
}

struct JobFlags {
  std::string job_file;
  std::vector<std::string> overrides;
  void Add(CLI::App* app) {
    app->add_option("--job", job_file, "job file (YAML)")->required()->check(CLI::ExistingFile);
    app->add_option("--set", overrides, "override a job-file key, e.g. training.staleness_bound=0");
  }
};

}  // namespace

int main(int argc, char** argv) {
  using namespace geodesic;
  // ZeroMQ allocates a buffer per received message. With glibc's default,
  // every multi-MiB message is a fresh mmap (page faults, zeroing) and an
  // munmap when freed; keeping such buffers on the heap makes receives of
  // 1-32 MiB chunks reuse memory instead (measured: docs/benchmarks.md).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  CLI::App app{"geodesic: training across cloud regions and edge devices with sharded parameter servers", "geodesic"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "geodesic 0.1 (wire protocol 1)");

  // coordinator
  JobFlags coord_job;
  server::CoordinatorProcessOptions coord;
  bool no_evaluator = false;
  auto* c_cmd = app.add_subcommand("coordinator", "run the job's coordinator (membership, leases, shard map)");
  coord_job.Add(c_cmd);
  c_cmd->add_option("--bind", coord.bind, "ZeroMQ endpoint to bind (port * picks a free one)")
      ->default_val("tcp://127.0.0.1:*");
  c_cmd->add_option("--endpoint-file", coord.endpoint_file, "write the bound endpoint here");
  c_cmd->add_option("--stats-file", coord.stats_file, "write stats JSON here");
  c_cmd->add_flag("--no-evaluator", no_evaluator, "do not wait for an evaluator before ending the job");

  // server
  JobFlags server_job;
  server::ServerProcessOptions srv;
  auto* s_cmd = app.add_subcommand("server", "run one parameter-server shard");
  server_job.Add(s_cmd);
  s_cmd->add_option("--id", srv.id, "server id (0-based, as counted in the job file)")->required();
  s_cmd->add_option("--coordinator", srv.coordinator, "coordinator endpoint")->required();
  s_cmd->add_option("--bind", srv.bind, "endpoint to bind (default: the region's host, free port)");
  s_cmd->add_option("--stats-file", srv.stats_file, "write stats JSON here");

  // worker
  JobFlags worker_job;
  worker::WorkerProcessOptions wrk;
  auto* w_cmd = app.add_subcommand("worker", "run one training worker");
  worker_job.Add(w_cmd);
  w_cmd->add_option("--id", wrk.id, "worker id (0-based, as counted in the job file)")->required();
  w_cmd->add_option("--coordinator", wrk.coordinator, "coordinator endpoint")->required();
  w_cmd->add_option("--stats-file", wrk.stats_file, "write stats JSON here");
  w_cmd->add_option("--snapshot-dir", wrk.snapshot_dir, "worker 0: save parameter snapshots here");

  // eval
  JobFlags eval_job;
  worker::EvaluatorOptions ev;
  auto* e_cmd = app.add_subcommand("eval", "wait for training to end, then evaluate the final model and snapshots");
  eval_job.Add(e_cmd);
  e_cmd->add_option("--coordinator", ev.coordinator, "coordinator endpoint")->required();
  e_cmd->add_option("--snapshot-dir", ev.snapshot_dir, "where worker 0 saved snapshots");
  e_cmd->add_option("--result-file", ev.result_file, "write the result JSON here")->required();
  e_cmd->add_option("--dump-params", ev.dump_params, "also write the final parameters as raw float32");

  // launch
  deploy::LaunchOptions launch;
  auto* l_cmd = app.add_subcommand("launch", "run a whole job on this machine: coordinator, servers, workers");
  l_cmd->add_option("job", launch.job_file, "job file (YAML)")->required()->check(CLI::ExistingFile);
  l_cmd->add_option("--set", launch.overrides, "override a job-file key, e.g. training.staleness_bound=0");
  l_cmd->add_option("--summary", launch.summary_file, "write the job summary JSON here");
  l_cmd->add_option("--run-dir", launch.run_dir, "directory for logs, stats and snapshots (default runs/<job>-<time>)");
  l_cmd->add_option("--kill", launch.kills,
                    "fault injection: signal ROLE:ID after SECONDS of training: ROLE:ID@SECONDS[:SIGNAL], "
                    "e.g. worker:2@5 (SIGKILL), worker:2@5:STOP then worker:2@9:CONT (repeatable)");
  l_cmd->add_flag("--quiet", launch.quiet, "no live progress line");

  // status
  std::string status_run_dir;
  auto* st_cmd = app.add_subcommand("status", "print a running job's status (from its run directory) as JSON");
  st_cmd->add_option("run_dir", status_run_dir, "the job's run directory")->required()->check(CLI::ExistingDirectory);

  // bench
  bench::BenchOptions bench_opts;
  auto* b_cmd = app.add_subcommand("bench", "benchmarks (see docs/benchmarks.md)");
  b_cmd->require_subcommand(1);
  auto* bt_cmd = b_cmd->add_subcommand("transport", "push+pull goodput through one shard vs raw ZeroMQ");
  bt_cmd->add_flag("--json", bench_opts.json, "print JSON records");
  bt_cmd->add_option("--sizes-mb", bench_opts.sizes_mb, "payload sizes in MB")
      ->default_val(std::vector<int>{1, 16, 64});
  bt_cmd->add_option("--seconds", bench_opts.seconds, "measuring time per size and system")->default_val(3.0);
  bt_cmd->add_option("--chunk-bytes", bench_opts.chunk_bytes, "chunk (message) size for both systems")
      ->default_val(int64_t{4} << 20);
  bt_cmd->add_option("--set", bench_opts.overrides, "override a key of the shard's job, e.g. optimizer.momentum=0");
  auto* bo_cmd = b_cmd->add_subcommand("ps-overhead", "samples/s of the 4-worker async job vs plain LibTorch");
  bo_cmd->add_flag("--json", bench_opts.json, "print JSON");
  bo_cmd->add_option("--job", bench_opts.job_file, "job file")->default_val("examples/fashion_mnist.yaml");
  bo_cmd->add_option("--baseline-seconds", bench_opts.seconds, "seconds of plain training")->default_val(40.0);
  bo_cmd->add_option("--processes", bench_opts.processes, "plain training processes (one per core)")->default_val(2);
  bo_cmd->add_option("--staleness-bound", bench_opts.staleness_bound, "staleness bound of the async run")
      ->default_val(2);
  bo_cmd->add_option("--epochs", bench_opts.epochs, "epochs of the async run (0: the job's)")->default_val(4.0);
  auto* bp_cmd = b_cmd->add_subcommand("plain-train", "plain LibTorch training, no parameter server (a baseline)");
  bp_cmd->add_option("--job", bench_opts.job_file, "job file")->default_val("examples/fashion_mnist.yaml");
  bp_cmd->add_option("--seconds", bench_opts.seconds, "seconds to train")->default_val(30.0);
  bp_cmd->add_option("--result-file", bench_opts.result_file, "write JSON here");
  auto* bc_cmd = b_cmd->add_subcommand("codecs", "encode/decode speed of every codec vs memcpy, one thread");
  bc_cmd->add_flag("--json", bench_opts.json, "print JSON records");
  bc_cmd->add_option("--mb", bench_opts.sizes_mb, "gradient size in MiB (several: one run each)")
      ->default_val(std::vector<int>{64});
  bc_cmd->add_option("--seconds", bench_opts.seconds, "measuring time per codec (at least 3 rounds)")->default_val(1.0);
  auto* bw_cmd = b_cmd->add_subcommand("compression", "train with every codec for the same steps: accuracy vs bytes");
  bw_cmd->add_option("--job", bench_opts.job_file, "job file")->default_val("examples/fashion_mnist.yaml");
  bw_cmd->add_option("--epochs", bench_opts.epochs, "epochs of every run (0: the job's)")->default_val(0.0);
  bw_cmd->add_option("--out", bench_opts.result_file, "output directory")->default_val("runs/compression");
  bw_cmd->add_option("--codecs", bench_opts.codecs, "codecs to sweep (each with/without zstd and error feedback)");
  bw_cmd->add_option("--mc-codecs", bench_opts.mc_codecs, "codecs also run with momentum correction (+zstd, EF)");
  bw_cmd->add_option("--direction", bench_opts.direction, "compress push, pull or both")->default_val("push");
  auto* bs_cmd = b_cmd->add_subcommand("zmq-sink", "(internal) raw ZeroMQ peer for bench transport");
  bs_cmd->add_option("--endpoint", bench_opts.endpoint)->required();
  bs_cmd->group("");

  CLI11_PARSE(app, argc, argv);
  InstallSignalHandlers();

  auto load = [](const JobFlags& f) { return LoadJobFile(f.job_file, f.overrides); };

  if (c_cmd->parsed()) {
    SetLogPrefix("coordinator");
    auto job = load(coord_job);
    if (!job.ok()) return Fail(job.status());
    coord.coordinator = server::CoordinatorOptions::FromJob(*job);
    coord.coordinator.expect_evaluator = !no_evaluator;
    zmq::context_t ctx(1);
    server::Coordinator c(coord, ctx, RealClock::Get());
    Status s = c.Run(&g_stop);
    return s.ok() ? 0 : Fail(s);
  }
  if (s_cmd->parsed()) {
    SetLogPrefix("server " + std::to_string(srv.id));
    auto job = load(server_job);
    if (!job.ok()) return Fail(job.status());
    if (srv.id < 0 || srv.id >= job->NumServers())
      return Fail(InvalidArgument("--id " + std::to_string(srv.id) + " but the job has " +
                                  std::to_string(job->NumServers()) + " servers"));
    srv.job = *job;
    if (srv.bind.empty()) srv.bind = "tcp://" + job->RegionOfServer(srv.id).host + ":*";
    zmq::context_t ctx(1);
    server::Server server(srv, ctx, RealClock::Get());
    Status s = server.Run(&g_stop);
    return s.ok() ? 0 : Fail(s);
  }
  if (w_cmd->parsed()) {
    SetLogPrefix("worker " + std::to_string(wrk.id));
    auto job = load(worker_job);
    if (!job.ok()) return Fail(job.status());
    if (wrk.id < 0 || wrk.id >= job->NumWorkers())
      return Fail(InvalidArgument("--id " + std::to_string(wrk.id) + " but the job has " +
                                  std::to_string(job->NumWorkers()) + " workers"));
    wrk.job = *job;
    zmq::context_t ctx(1);
    Status s = worker::RunWorker(wrk, ctx, &g_stop);
    return s.ok() ? 0 : Fail(s);
  }
  if (e_cmd->parsed()) {
    SetLogPrefix("evaluator");
    auto job = load(eval_job);
    if (!job.ok()) return Fail(job.status());
    ev.job = *job;
    zmq::context_t ctx(1);
    Status s = worker::RunEvaluator(ev, ctx, &g_stop);
    return s.ok() ? 0 : Fail(s);
  }
  if (l_cmd->parsed()) {
    SetLogPrefix("launch");
    auto r = deploy::Launch(launch, &g_stop);
    if (!r.ok()) return Fail(r.status());
    return *r;
  }
  if (st_cmd->parsed()) {
    auto r = deploy::QueryStatus(status_run_dir, 3000);
    if (!r.ok()) return Fail(r.status());
    std::cout << *r << std::endl;
    return 0;
  }
  if (b_cmd->parsed()) {
    SetLogPrefix("bench");
    Status s;
    if (bt_cmd->parsed())
      s = bench::RunTransportBench(bench_opts, &g_stop);
    else if (bo_cmd->parsed())
      s = bench::RunPsOverheadBench(bench_opts, &g_stop);
    else if (bp_cmd->parsed())
      s = bench::RunPlainTraining(bench_opts, &g_stop);
    else if (bc_cmd->parsed())
      s = bench::RunCodecBench(bench_opts, &g_stop);
    else if (bw_cmd->parsed())
      s = bench::RunCompressionSweep(bench_opts, &g_stop);
    else if (bs_cmd->parsed())
      s = bench::RunZmqSink(bench_opts, &g_stop);
    return s.ok() ? 0 : Fail(s);
  }
  return 0;
}
