// geodesic: one binary, one subcommand per role or tool.
//
// Flags and the job file are parsed here, once, into the Options structs the
// libraries take; nothing below main reads the environment.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <iostream>
#include <zmq.hpp>

#include "bench/bench.h"
#include "common/files.h"
#include "common/log.h"
#include "config/job.h"
#include "deploy/launcher.h"
#include "server/checkpoint.h"
#include "server/coordinator.h"
#include "server/server.h"
#include "transport/routes.h"
#include "transport/security.h"
#include "wan/planner.h"
#include "worker/model.h"
#include "worker/trainer.h"

namespace {

std::atomic<bool> g_stop{false};
std::atomic<uint64_t> g_checkpoint_requests{0};
std::atomic<uint64_t> g_replan_requests{0};

void OnSignal(int) { g_stop.store(true); }
void OnCheckpointSignal(int) { g_checkpoint_requests.fetch_add(1); }
void OnReplanSignal(int) { g_replan_requests.fetch_add(1); }

void InstallSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Servers write a checkpoint on SIGUSR1 (`geodesic checkpoint RUN_DIR`).
  sa.sa_handler = OnCheckpointSignal;
  sigaction(SIGUSR1, &sa, nullptr);
  // The coordinator re-plans on SIGUSR2 (`geodesic wan replan RUN_DIR`).
  sa.sa_handler = OnReplanSignal;
  sigaction(SIGUSR2, &sa, nullptr);
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
  std::vector<std::string> routes;
  void Add(CLI::App* app) {
    app->add_option("--job", job_file, "job file (YAML)")->required()->check(CLI::ExistingFile);
    app->add_option("--set", overrides, "override a job-file key, e.g. training.staleness_bound=0");
    app->add_option("--route", routes,
                    "connect to TO whenever told to connect to FROM: FROM=TO (the launcher routes "
                    "cross-region traffic through emulated links this way; repeatable)");
  }
};

// Credentials of a member (server, worker, evaluator) in a secured job: a
// fresh keypair, the coordinator's public key, and the join token, which
// comes from a file or the environment, never from argv (`ps` shows argv).
struct MemberSecurityFlags {
  std::string coordinator_key_file;
  std::string token_file;
  void Add(CLI::App* app) {
    app->add_option("--coordinator-key-file", coordinator_key_file,
                    "secured jobs: file with the coordinator's CURVE public key (the launcher writes "
                    "RUN_DIR/coordinator.key)");
    app->add_option("--token-file", token_file,
                    "secured jobs: file with this member's join token (`geodesic token`); default: the "
                    "GEODESIC_TOKEN environment variable");
  }
};

geodesic::StatusOr<geodesic::transport::MemberCredentials> MemberCredentials(const geodesic::JobSpec& job,
                                                                             const MemberSecurityFlags& f) {
  using namespace geodesic;
  transport::MemberCredentials c;
  if (job.security.mode != SecurityMode::kCurve) return c;
  GD_ASSIGN_OR_RETURN(c.keys, transport::GenerateCurveKeyPair());
  if (f.coordinator_key_file.empty())
    return InvalidArgument("security.mode is curve: --coordinator-key-file is required");
  GD_ASSIGN_OR_RETURN(std::string key, ReadFile(f.coordinator_key_file));
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
  if (!transport::IsCurveKey(key))
    return InvalidArgument("--coordinator-key-file " + f.coordinator_key_file +
                           ": not a CURVE public key (40 Z85 characters)");
  c.coordinator_key = key;
  if (!f.token_file.empty()) {
    GD_ASSIGN_OR_RETURN(c.token, ReadFile(f.token_file));
  } else if (const char* env = std::getenv("GEODESIC_TOKEN")) {
    c.token = env;
  }
  while (!c.token.empty() && std::isspace(static_cast<unsigned char>(c.token.back()))) c.token.pop_back();
  if (c.token.empty())
    return InvalidArgument(
        "security.mode is curve: this member needs a join token (--token-file, or GEODESIC_TOKEN; mint one with "
        "`geodesic token`)");
  return c;
}

// The job secret: --secret-file, else the job's security.secret_file.
geodesic::StatusOr<std::string> JobSecret(const geodesic::JobSpec& job, const std::string& flag) {
  std::string path = flag.empty() ? job.security.secret_file : flag;
  if (path.empty())
    return geodesic::InvalidArgument("security.mode is curve: give --secret-file or set security.secret_file");
  return geodesic::transport::LoadSecret(path);
}

struct PlanFlags {
  std::string job_file;
  std::vector<std::string> overrides;
  geodesic::wan::PlannerOptions options;
  bool json = false;
};

// geodesic plan: builds the job's model for its parameter count, plans, and
// compares with the bytes-balanced placement the coordinator uses without
// the planner.
int RunPlan(const PlanFlags& f) {
  using namespace geodesic;
  auto job = LoadJobFile(f.job_file, f.overrides);
  if (!job.ok()) return Fail(job.status());
  auto model = worker::FlatModel::Create(job->model, job->seed);
  if (!model.ok()) return Fail(model.status());
  const cluster::ChunkLayout layout((*model)->num_params(), cluster::ChunkElemsFor(job->wire.chunk_bytes));
  auto planner = wan::Planner::Create(*job, layout, f.options);
  if (!planner.ok()) return Fail(planner.status());
  const std::vector<int32_t> balanced = cluster::PlaceChunks(layout, job->NumServers()).owner;
  const wan::Plan plan = planner->MakePlan(planner->declared_links(), {balanced});
  std::cout << wan::PlanReport(*planner, plan, {{"bytes-balanced", balanced}}, f.json);
  return 0;
}

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
  c_cmd->add_option("--state-file", coord.state_file,
                    "keep the coordinator's state here; continue from it if it exists (a restart)");
  c_cmd->add_flag("--no-evaluator", no_evaluator, "do not wait for an evaluator before ending the job");
  std::string coord_resume;
  c_cmd->add_option("--resume", coord_resume, "start workers at the clocks of this resume plan (JSON)")
      ->check(CLI::ExistingFile);
  std::string coord_secret_file;
  c_cmd->add_option("--secret-file", coord_secret_file,
                    "secured jobs: the job secret that join tokens are checked against (default: "
                    "security.secret_file)");
  c_cmd->add_option("--key-file", coord.key_file, "secured jobs: write the coordinator's CURVE public key here");
  std::string coord_keypair_file;
  c_cmd->add_option("--keypair-file", coord_keypair_file,
                    "secured jobs: keep the coordinator's CURVE keypair in this file (created, mode 0600, if "
                    "missing), so that a restarted coordinator has the key its members know");

  // server
  JobFlags server_job;
  server::ServerProcessOptions srv;
  auto* s_cmd = app.add_subcommand("server", "run one parameter-server shard");
  server_job.Add(s_cmd);
  s_cmd->add_option("--id", srv.id, "server id (0-based, as counted in the job file)")->required();
  s_cmd->add_option("--coordinator", srv.coordinator, "coordinator endpoint")->required();
  s_cmd->add_option("--bind", srv.bind, "endpoint to bind (default: the region's host, free port)");
  s_cmd->add_option("--stats-file", srv.stats_file, "write stats JSON here");
  s_cmd->add_option("--checkpoint-dir", srv.checkpoint_dir, "write checkpoints under this directory");
  s_cmd->add_option("--resume", srv.resume_file, "load the shard from this resume plan (JSON) before serving")
      ->check(CLI::ExistingFile);
  s_cmd->add_flag("--recover", srv.recover,
                  "restarted after a crash: load this shard's newest checkpoint from --checkpoint-dir");
  s_cmd->add_flag("--backup", srv.backup,
                  "be this shard's backup (replication.backups: 1): apply the primary's updates and take over "
                  "when it dies");
  MemberSecurityFlags server_sec;
  server_sec.Add(s_cmd);

  // worker
  JobFlags worker_job;
  worker::WorkerProcessOptions wrk;
  auto* w_cmd = app.add_subcommand("worker", "run one training worker");
  worker_job.Add(w_cmd);
  w_cmd->add_option("--id", wrk.id, "worker id (0-based, as counted in the job file)")->required();
  w_cmd->add_option("--coordinator", wrk.coordinator, "coordinator endpoint")->required();
  w_cmd->add_option("--stats-file", wrk.stats_file, "write stats JSON here");
  w_cmd->add_option("--snapshot-dir", wrk.snapshot_dir, "worker 0: save parameter snapshots here");
  MemberSecurityFlags worker_sec;
  worker_sec.Add(w_cmd);

  // eval
  JobFlags eval_job;
  worker::EvaluatorOptions ev;
  auto* e_cmd = app.add_subcommand("eval", "wait for training to end, then evaluate the final model and snapshots");
  eval_job.Add(e_cmd);
  e_cmd->add_option("--coordinator", ev.coordinator, "coordinator endpoint")->required();
  e_cmd->add_option("--snapshot-dir", ev.snapshot_dir, "where worker 0 saved snapshots");
  e_cmd->add_option("--result-file", ev.result_file, "write the result JSON here")->required();
  e_cmd->add_option("--dump-params", ev.dump_params, "also write the final parameters as raw float32");
  MemberSecurityFlags eval_sec;
  eval_sec.Add(e_cmd);

  // token
  std::string token_job, token_role, token_secret;
  int token_id = -1;
  int64_t token_ttl = 0;
  auto* tk_cmd = app.add_subcommand("token", "print a join token for a secured job (security.mode: curve)");
  tk_cmd->add_option("--job", token_job, "job file (YAML)")->required()->check(CLI::ExistingFile);
  tk_cmd->add_option("--role", token_role, "server | worker | evaluator | client")
      ->required()
      ->check(CLI::IsMember({"server", "worker", "evaluator", "client"}));
  tk_cmd->add_option("--id", token_id, "bind the token to this id of the role (default: any id)")
      ->check(CLI::Range(0, 1 << 20));
  tk_cmd->add_option("--ttl", token_ttl, "seconds the token stays valid (default: security.token_ttl_s)")
      ->check(CLI::Range(int64_t{1}, int64_t{366} * 86400));
  tk_cmd->add_option("--secret-file", token_secret, "the job secret (default: security.secret_file)");

  // launch
  deploy::LaunchOptions launch;
  auto* l_cmd = app.add_subcommand("launch", "run a whole job on this machine: coordinator, servers, workers");
  auto* job_arg = l_cmd->add_option("job", launch.job_file, "job file (YAML)")->check(CLI::ExistingFile);
  l_cmd
      ->add_option("--resume", launch.resume_dir,
                   "continue the stopped job in this run directory from its checkpoints (job file optional)")
      ->check(CLI::ExistingDirectory);
  l_cmd->add_option("--set", launch.overrides, "override a job-file key, e.g. training.staleness_bound=0");
  l_cmd->add_option("--summary", launch.summary_file, "write the job summary JSON here");
  l_cmd->add_option("--run-dir", launch.run_dir, "directory for logs, stats and snapshots (default runs/<job>-<time>)");
  l_cmd->add_option("--kill", launch.kills,
                    "fault injection: signal ROLE:ID after SECONDS of training: ROLE:ID@SECONDS[:SIGNAL], "
                    "e.g. worker:2@5 (SIGKILL), worker:2@5:STOP then worker:2@9:CONT (repeatable)");
  l_cmd->add_option("--cut", launch.cuts,
                    "partition on emulated links: cut regions A and B apart after SECONDS of training for "
                    "DURATION seconds: A:B@SECONDS+DURATION, e.g. us:asia@10+5 (repeatable)");
  l_cmd->add_flag("--restart-workers", launch.restart_workers,
                  "restart a worker that dies; it rejoins at the live workers' clock (default: go on without it)");
  l_cmd->add_flag("--quiet", launch.quiet, "no live progress line");

  // wan
  std::string wan_action, wan_run_dir, wan_a, wan_b;
  auto* wn_cmd = app.add_subcommand(
      "wan", "cut or heal an emulated link of a running job, or make it re-plan its shard placement now (wan.replan)");
  wn_cmd->add_option("action", wan_action, "cut | heal | replan")
      ->required()
      ->check(CLI::IsMember({"cut", "heal", "replan"}));
  wn_cmd->add_option("run_dir", wan_run_dir, "the job's run directory")->required()->check(CLI::ExistingDirectory);
  wn_cmd->add_option("region_a", wan_a, "one region (cut, heal)");
  wn_cmd->add_option("region_b", wan_b, "the other region (cut, heal)");

  // plan
  PlanFlags plan_flags;
  double compute_ms = 0;
  auto* p_cmd = app.add_subcommand("plan", "print the planner's shard placement, codecs and predicted step time");
  p_cmd->add_option("job", plan_flags.job_file, "job file (YAML)")->required()->check(CLI::ExistingFile);
  p_cmd->add_option("--set", plan_flags.overrides, "override a job-file key, e.g. wan.replan_drift=0.3");
  auto* compute_opt = p_cmd->add_option("--compute-ms", compute_ms,
                                        "compute time of one step per worker, ms (default: 30 per batch of 64 for "
                                        "the CNN; see docs/planner.md)");
  compute_opt->check(CLI::Range(0.0, 1e6));
  p_cmd->add_flag("--json", plan_flags.json, "print JSON");

  // status
  std::string status_run_dir;
  std::string ckpt_run_dir;
  auto* ck_cmd = app.add_subcommand("checkpoint", "ask every server of a running job to write a checkpoint now");
  ck_cmd->add_option("run_dir", ckpt_run_dir, "the job's run directory")->required()->check(CLI::ExistingDirectory);
  auto* st_cmd = app.add_subcommand("status", "print a running job's status (from its run directory) as JSON");
  st_cmd->add_option("run_dir", status_run_dir, "the job's run directory")->required()->check(CLI::ExistingDirectory);

  // bench
  // One options struct per bench subcommand: CLI11 writes an option's
  // default into its variable when the option is declared, so subcommands
  // sharing a variable would see the last-declared subcommand's default.
  bench::BenchOptions bt_opts, bo_opts, bp_opts, bc_opts, bw_opts, bn_opts, bk_opts, bs_opts;
  auto* b_cmd = app.add_subcommand("bench", "benchmarks (see docs/benchmarks.md)");
  b_cmd->require_subcommand(1);
  auto* bt_cmd = b_cmd->add_subcommand("transport", "push+pull goodput through one shard vs raw ZeroMQ");
  bt_cmd->add_flag("--json", bt_opts.json, "print JSON records");
  bt_cmd->add_flag("--curve", bt_opts.curve,
                   "also run a shard of the same job with security.mode curve, side by side in the same rounds");
  // Vector defaults are set where they are used, not with default_val: with
  // LibTorch's headers in this file CLI11 prints them in a form it cannot read back.
  bt_cmd->add_option("--sizes-mb", bt_opts.sizes_mb, "payload sizes in MB (default 1 16 64)");
  bt_cmd->add_option("--seconds", bt_opts.seconds, "measuring time per size and system")->default_val(3.0);
  bt_cmd->add_option("--chunk-bytes", bt_opts.chunk_bytes, "chunk (message) size for both systems")
      ->default_val(int64_t{4} << 20);
  bt_cmd->add_option("--set", bt_opts.overrides, "override a key of the shard's job, e.g. optimizer.momentum=0");
  auto* bo_cmd = b_cmd->add_subcommand("ps-overhead", "samples/s of the 4-worker async job vs plain LibTorch");
  bo_cmd->add_flag("--json", bo_opts.json, "print JSON");
  bo_cmd->add_option("--job", bo_opts.job_file, "job file")->default_val("examples/fashion_mnist.yaml");
  bo_cmd->add_option("--baseline-seconds", bo_opts.seconds, "seconds of plain training")->default_val(40.0);
  bo_cmd->add_option("--processes", bo_opts.processes, "plain training processes (one per core)")->default_val(2);
  bo_cmd->add_option("--staleness-bound", bo_opts.staleness_bound, "staleness bound of the async run")->default_val(2);
  bo_cmd->add_option("--epochs", bo_opts.epochs, "epochs of the async run (0: the job's)")->default_val(4.0);
  auto* bp_cmd = b_cmd->add_subcommand("plain-train", "plain LibTorch training, no parameter server (a baseline)");
  bp_cmd->add_option("--job", bp_opts.job_file, "job file")->default_val("examples/fashion_mnist.yaml");
  bp_cmd->add_option("--seconds", bp_opts.seconds, "seconds to train")->default_val(30.0);
  bp_cmd->add_option("--result-file", bp_opts.result_file, "write JSON here");
  auto* bc_cmd = b_cmd->add_subcommand("codecs", "encode/decode speed of every codec vs memcpy, one thread");
  bc_cmd->add_flag("--json", bc_opts.json, "print JSON records");
  auto* mb_opt =
      bc_cmd->add_option("--mb", bc_opts.sizes_mb, "gradient size in MiB (several: one run each; default 64)");
  bc_cmd->add_option("--seconds", bc_opts.seconds, "measuring time per codec (at least 3 rounds)")->default_val(1.0);
  auto* bw_cmd = b_cmd->add_subcommand("compression", "train with every codec for the same steps: accuracy vs bytes");
  bw_cmd->add_option("--job", bw_opts.job_file, "job file")->default_val("examples/fashion_mnist.yaml");
  bw_cmd->add_option("--epochs", bw_opts.epochs, "epochs of every run (0: the job's)")->default_val(0.0);
  bw_cmd->add_option("--out", bw_opts.result_file, "output directory")->default_val("runs/compression");
  bw_cmd->add_option("--codecs", bw_opts.codecs, "codecs to sweep (each with/without zstd and error feedback)");
  bw_cmd->add_option("--mc-codecs", bw_opts.mc_codecs, "codecs also run with momentum correction (+zstd, EF)");
  bw_cmd->add_option("--direction", bw_opts.direction, "compress push, pull or both")->default_val("push");
  bw_cmd->add_flag("--resume", bw_opts.resume, "reuse finished runs of the same configuration in --out");
  auto* bn_cmd =
      b_cmd->add_subcommand("wan", "time to the target accuracy: LAN vs emulated WAN, staleness, compression");
  bn_cmd->add_option("--job", bn_opts.job_file, "multi-region job file")->default_val("examples/three_regions.yaml");
  bn_cmd->add_option("--epochs", bn_opts.epochs, "epochs of every run (0: the job's)")->default_val(4.0);
  bn_cmd->add_option("--out", bn_opts.result_file, "output directory")->default_val("runs/wan");
  bn_cmd->add_option("--configs", bn_opts.configs,
                     "configurations: lan, wan-bsp, wan-ssp, wan-ssp-best, wan-bsp-best, lan-local, wan-local, ddp "
                     "(default all but wan-bsp-best)");
  bn_cmd->add_option("--local-steps", bn_opts.local_steps, "steps per round of the local SGD configurations")
      ->default_val(6);
  bn_cmd->add_option("--local-epochs", bn_opts.local_epochs, "epochs of the local SGD configurations")
      ->default_val(5.0);
  bn_cmd
      ->add_option("--ddp-cap-x", bn_opts.ddp_cap_x,
                   "ddp: stop after this many times the best Geodesic WAN time to the target")
      ->default_val(12.0);
  bn_cmd->add_option("--ddp-max-s", bn_opts.ddp_max_s, "ddp: the time cap when no Geodesic WAN run reached it")
      ->default_val(900.0);
  bn_cmd->add_option("--staleness-bound", bn_opts.staleness_bound, "bound of the bounded-staleness runs")
      ->default_val(2);
  bn_cmd->add_option("--snapshot-every", bn_opts.snapshot_every_s, "seconds between accuracy-curve snapshots")
      ->default_val(2.0);
  bn_cmd->add_option("--set", bn_opts.overrides, "override a key of every run's job");
  auto* bk_cmd = b_cmd->add_subcommand("links", "configured vs probed RTT and Mbit/s of a job's emulated links");
  bk_cmd->add_flag("--json", bk_opts.json, "print JSON records");
  bk_cmd->add_option("--job", bk_opts.job_file, "job file whose wan.links to emulate and probe")
      ->default_val("examples/three_regions.yaml");
  bench::BenchOptions bf_opts;
  auto* bf_cmd = b_cmd->add_subcommand(
      "failover", "replicated shards: steps/s with and without backups, and failover time over several kills");
  bf_cmd->add_flag("--json", bf_opts.json, "print JSON");
  bf_cmd->add_option("--kills", bf_opts.kills, "runs with a primary SIGKILLed 1.5 s into training")->default_val(5);
  bf_cmd->add_option("--rounds", bf_opts.rounds, "plain/replicated throughput pairs")->default_val(2);
  bf_cmd->add_option("--out", bf_opts.result_file, "run directories go here")->default_val("runs/failover");
  bf_cmd->add_option("--set", bf_opts.overrides, "override a key of every run's job");
  bf_cmd
      ->add_option("--rtt-ms", bf_opts.link_rtt_ms,
                   "join the two regions by an emulated link of this RTT (replication and the workers' "
                   "cross-region traffic cross it); 0: loopback")
      ->default_val(0)
      ->check(CLI::Range(0.0, 10000.0));
  bf_cmd->add_option("--mbit", bf_opts.link_mbit, "with --rtt-ms: the link's bandwidth (0: unlimited)")
      ->default_val(0)
      ->check(CLI::Range(0.0, 1e6));
  auto* bs_cmd = b_cmd->add_subcommand("zmq-sink", "(internal) raw ZeroMQ peer for bench transport");
  bs_cmd->add_option("--endpoint", bs_opts.endpoint)->required();
  bs_cmd->group("");

  CLI11_PARSE(app, argc, argv);
  InstallSignalHandlers();

  auto load = [](const JobFlags& f) -> StatusOr<JobSpec> {
    GD_ASSIGN_OR_RETURN(auto routes, transport::ParseRoutes(f.routes));
    transport::SetRoutes(std::move(routes));
    return LoadJobFile(f.job_file, f.overrides);
  };

  if (c_cmd->parsed()) {
    SetLogPrefix("coordinator");
    auto job = load(coord_job);
    if (!job.ok()) return Fail(job.status());
    coord.coordinator = server::CoordinatorOptions::FromJob(*job);
    coord.coordinator.expect_evaluator = !no_evaluator;
    if (!coord_resume.empty()) {
      auto text = ReadFile(coord_resume);
      auto plan =
          text.ok() ? server::ResumePlan::FromJson(*text, coord_resume) : StatusOr<server::ResumePlan>(text.status());
      if (!plan.ok()) return Fail(plan.status());
      coord.coordinator.worker_start_clocks = plan->worker_clocks;
    }
    if (job->security.mode == SecurityMode::kCurve) {
      auto secret = JobSecret(*job, coord_secret_file);
      if (!secret.ok()) return Fail(secret.status());
      coord.coordinator.secret = *secret;
      auto keys = coord_keypair_file.empty() ? transport::GenerateCurveKeyPair()
                                             : transport::LoadOrCreateKeyPair(coord_keypair_file);
      if (!keys.ok()) return Fail(keys.status());
      coord.keys = *keys;
    }
    zmq::context_t ctx(1);
    coord.replan_requests = &g_replan_requests;
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
    srv.checkpoint_requests = &g_checkpoint_requests;
    auto cred = MemberCredentials(*job, server_sec);
    if (!cred.ok()) return Fail(cred.status());
    srv.credentials = *cred;
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
    auto cred = MemberCredentials(*job, worker_sec);
    if (!cred.ok()) return Fail(cred.status());
    wrk.credentials = *cred;
    zmq::context_t ctx(1);
    Status s = worker::RunWorker(wrk, ctx, &g_stop);
    return s.ok() ? 0 : Fail(s);
  }
  if (e_cmd->parsed()) {
    SetLogPrefix("evaluator");
    auto job = load(eval_job);
    if (!job.ok()) return Fail(job.status());
    ev.job = *job;
    auto cred = MemberCredentials(*job, eval_sec);
    if (!cred.ok()) return Fail(cred.status());
    ev.credentials = *cred;
    zmq::context_t ctx(1);
    Status s = worker::RunEvaluator(ev, ctx, &g_stop);
    return s.ok() ? 0 : Fail(s);
  }
  if (l_cmd->parsed()) {
    SetLogPrefix("launch");
    if (job_arg->count() == 0 && launch.resume_dir.empty())
      return Fail(InvalidArgument("launch needs a job file (or --resume RUN_DIR)"));
    auto r = deploy::Launch(launch, &g_stop);
    if (!r.ok()) return Fail(r.status());
    return *r;
  }
  if (ck_cmd->parsed()) {
    auto asked = deploy::RequestCheckpoint(ckpt_run_dir);
    if (!asked.ok()) return Fail(asked.status());
    std::cout << "asked " << *asked << " server(s) for a checkpoint; see " << ckpt_run_dir << "/checkpoints\n";
    return 0;
  }
  if (wn_cmd->parsed()) {
    if (wan_action == "replan") {
      Status s = deploy::RequestReplan(wan_run_dir);
      if (s.ok()) std::cout << "asked the coordinator to re-plan; see " << wan_run_dir << "/logs\n";
      return s.ok() ? 0 : Fail(s);
    }
    if (wan_a.empty() || wan_b.empty()) return Fail(geodesic::InvalidArgument("wan cut/heal needs two regions"));
    Status s = deploy::ControlLink(wan_run_dir, wan_action, wan_a, wan_b);
    return s.ok() ? 0 : Fail(s);
  }
  if (tk_cmd->parsed()) {
    auto job = LoadJobFile(token_job);
    if (!job.ok()) return Fail(job.status());
    if (job->security.mode != SecurityMode::kCurve)
      return Fail(
          InvalidArgument(token_job + ": security.mode is " + ToString(job->security.mode) + "; tokens need curve"));
    auto secret = JobSecret(*job, token_secret);
    if (!secret.ok()) return Fail(secret.status());
    auto token = transport::MintToken(
        *secret, {.job = job->name,
                  .role = token_role,
                  .id = token_id,
                  .expiry_unix = transport::UnixNow() + (token_ttl > 0 ? token_ttl : job->security.token_ttl_s)});
    if (!token.ok()) return Fail(token.status());
    std::cout << *token << std::endl;
    return 0;
  }
  if (p_cmd->parsed()) {
    if (compute_opt->count() > 0) plan_flags.options.compute_ms = compute_ms;
    return RunPlan(plan_flags);
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
      s = bench::RunTransportBench(bt_opts, &g_stop);
    else if (bo_cmd->parsed())
      s = bench::RunPsOverheadBench(bo_opts, &g_stop);
    else if (bp_cmd->parsed())
      s = bench::RunPlainTraining(bp_opts, &g_stop);
    else if (bc_cmd->parsed()) {
      if (mb_opt->count() == 0) bc_opts.sizes_mb = {64};
      s = bench::RunCodecBench(bc_opts, &g_stop);
    } else if (bw_cmd->parsed())
      s = bench::RunCompressionSweep(bw_opts, &g_stop);
    else if (bn_cmd->parsed())
      s = bench::RunWanExperiment(bn_opts, &g_stop);
    else if (bf_cmd->parsed())
      s = bench::RunFailoverBench(bf_opts, &g_stop);
    else if (bk_cmd->parsed())
      s = bench::RunLinksBench(bk_opts, &g_stop);
    else if (bs_cmd->parsed())
      s = bench::RunZmqSink(bs_opts, &g_stop);
    return s.ok() ? 0 : Fail(s);
  }
  return 0;
}
