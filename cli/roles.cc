// The job's members (coordinator, server, worker, evaluator) and the join
// tokens of secured jobs.
#include <unistd.h>
#include <zmq.hpp>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>

#include "aggregator/aggregator.h"
#include "cli/command.h"
#include "common/files.h"
#include "common/log.h"
#include "config/job.h"
#include "coordinator/coordinator.h"
#include "server/checkpoint.h"
#include "server/server.h"
#include "transport/http_endpoint.h"
#include "transport/routes.h"
#include "transport/security.h"
#include "worker/real_client.h"
#include "worker/trainer.h"

namespace geodesic::cli {
namespace {

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
  // Installs the routes (process-wide) and loads the job.
  StatusOr<JobSpec> Load() const {
    GD_ASSIGN_OR_RETURN(auto parsed, transport::ParseRoutes(routes));
    transport::SetRoutes(std::move(parsed));
    return LoadJobFile(job_file, overrides);
  }
};

// Credentials of a member (server, worker, evaluator, aggregator) in a secured job: a
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

void TrimTrailingSpace(std::string& s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
}

StatusOr<transport::MemberCredentials> MemberCredentials(const JobSpec& job, const MemberSecurityFlags& f) {
  transport::MemberCredentials c;
  if (job.security.mode != SecurityMode::kCurve) return c;
  GD_ASSIGN_OR_RETURN(c.keys, transport::GenerateCurveKeyPair());
  if (f.coordinator_key_file.empty())
    return InvalidArgument("security.mode is curve: --coordinator-key-file is required");
  GD_ASSIGN_OR_RETURN(std::string key, ReadFile(f.coordinator_key_file));
  TrimTrailingSpace(key);
  if (!transport::IsCurveKey(key))
    return InvalidArgument("--coordinator-key-file " + f.coordinator_key_file +
                           ": not a CURVE public key (40 Z85 characters)");
  c.coordinator_key = key;
  if (!f.token_file.empty()) {
    GD_ASSIGN_OR_RETURN(c.token, ReadFile(f.token_file));
  } else if (const char* env = std::getenv("GEODESIC_TOKEN")) {
    c.token = env;
  }
  TrimTrailingSpace(c.token);
  if (c.token.empty())
    return InvalidArgument(
        "security.mode is curve: this member needs a join token (--token-file, or GEODESIC_TOKEN; mint one with "
        "`geodesic token`)");
  return c;
}

// The job secret: --secret-file, else the job's security.secret_file, else
// the GEODESIC_JOB_SECRET environment variable (a Kubernetes Secret's value).
StatusOr<std::string> JobSecret(const JobSpec& job, const std::string& flag) {
  std::string path = flag.empty() ? job.security.secret_file : flag;
  if (!path.empty()) return transport::LoadSecret(path);
  if (const char* env = std::getenv("GEODESIC_JOB_SECRET")) return transport::ParseSecret(env, "GEODESIC_JOB_SECRET");
  return InvalidArgument(
      "security.mode is curve: give --secret-file, set security.secret_file, or set GEODESIC_JOB_SECRET");
}

// The coordinator's keypair: --keypair-file (kept there), else the
// GEODESIC_COORDINATOR_KEYPAIR environment variable, else a fresh one.
StatusOr<transport::CurveKeyPair> CoordinatorKeys(const std::string& keypair_file) {
  if (!keypair_file.empty()) return transport::LoadOrCreateKeyPair(keypair_file);
  if (const char* env = std::getenv("GEODESIC_COORDINATOR_KEYPAIR"))
    return transport::ParseKeyPair(env, "GEODESIC_COORDINATOR_KEYPAIR");
  return transport::GenerateCurveKeyPair();
}

// --stats-file; its directory is created as the flag is read, so that
// processes sharing a fresh run directory (a compose volume) need no set-up
// step (a directory that cannot be made fails the stats write, which says so).
void AddStatsFileFlag(CLI::App* cmd, std::string* path) {
  cmd->add_option("--stats-file", *path,
                  "write stats JSON here (its directory is created; {id} in it becomes the member's id)")
      ->each([](const std::string& file) {
        std::error_code ec;
        const auto dir = std::filesystem::path(file).parent_path();
        if (!dir.empty()) std::filesystem::create_directories(dir, ec);
      });
}

Status CheckId(const char* role, int id, int count) {
  if (id >= 0 && id < count) return Status::Ok();
  return InvalidArgument("--id " + std::to_string(id) + " but the job has " + std::to_string(count) + " " + role);
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host.starts_with("127.") || host == "::1" || host == "[::1]";
}

// A secured job's /metrics shows what CURVE hides on the wire (the job's
// name, clocks, loss, accuracy): beyond loopback it needs a token.
Status CheckMetricsExposure(const JobSpec& job, const transport::HttpOptions& o) {
  if (job.security.mode != SecurityMode::kCurve || o.bind.empty() || !o.metrics_token_file.empty()) return Status::Ok();
  if (IsLoopback(o.bind.substr(0, o.bind.rfind(':')))) return Status::Ok();
  return InvalidArgument("security.mode is curve: /metrics on " + o.bind +
                         " would show the job's name, clocks, loss and accuracy to anyone who reaches it; give "
                         "--metrics-token-file FILE (Prometheus sends it as a bearer token) or an --http-bind on "
                         "loopback");
}

struct CoordinatorFlags {
  JobFlags job;
  coordinator::CoordinatorProcessOptions options;
  bool no_evaluator = false;
  std::string resume;
  std::string secret_file;
  std::string keypair_file;
};

// Fills in what the flags name but the options hold as values: the resume
// plan's clocks and, in secured jobs, the secret and the keypair.
Status CompleteCoordinatorOptions(const JobSpec& job, CoordinatorFlags& f) {
  coordinator::CoordinatorProcessOptions& o = f.options;
  o.coordinator = coordinator::CoordinatorOptions::FromJob(job);
  o.coordinator.expect_evaluator = !f.no_evaluator;
  if (!f.resume.empty()) {
    GD_ASSIGN_OR_RETURN(std::string text, ReadFile(f.resume));
    GD_ASSIGN_OR_RETURN(server::ResumePlan plan, server::ResumePlan::FromJson(text, f.resume));
    o.coordinator.worker_start_clocks = plan.worker_clocks;
  }
  if (job.security.mode == SecurityMode::kCurve) {
    GD_ASSIGN_OR_RETURN(o.coordinator.secret, JobSecret(job, f.secret_file));
    GD_ASSIGN_OR_RETURN(o.keys, CoordinatorKeys(f.keypair_file));
  }
  o.replan_requests = &g_replan_requests;
  return Status::Ok();
}

int RunCoordinator(CoordinatorFlags& f) {
  SetLogPrefix("coordinator");
  auto job = f.job.Load();
  if (!job.ok()) return Fail(job.status());
  if (Status s = CompleteCoordinatorOptions(*job, f); !s.ok()) return Fail(s);
  if (Status s = CheckMetricsExposure(*job, f.options.http); !s.ok()) return Fail(s);
  f.options.region = job->CoordinatorRegion().name;
  zmq::context_t ctx(1);
  coordinator::Coordinator c(f.options, ctx, RealClock::Get());
  Status s = c.Run(&g_stop);
  return s.ok() ? 0 : Fail(s);
}

// A member's flags: the job, its Options struct, and its credentials.
template <typename Options>
struct MemberFlags {
  JobFlags job;
  Options options;
  MemberSecurityFlags security;
  int id_offset = -1;  // --id-from-hostname
};

// --id N, or --id-from-hostname OFFSET: OFFSET plus the ordinal at the end
// of this host's name (a StatefulSet names its pods NAME-0, NAME-1, ...), so
// that one pod template serves every member of a region (docs/deploy.md).
void AddIdFlags(CLI::App* cmd, int* id, int* offset, const std::string& what) {
  *id = -1;
  auto* plain = cmd->add_option("--id", *id, what + " id (0-based, as counted in the job file)");
  cmd->add_option("--id-from-hostname", *offset,
                  "the id is OFFSET plus the number the host name ends in (NAME-N: a StatefulSet pod)")
      ->check(CLI::NonNegativeNumber)
      ->excludes(plain);
}

Status ResolveId(int offset, int* id) {
  if (offset < 0) return *id >= 0 ? Status::Ok() : InvalidArgument("give --id N or --id-from-hostname OFFSET");
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  const std::string host = name;
  const size_t dash = host.rfind('-');
  const std::string ordinal = dash == std::string::npos ? "" : host.substr(dash + 1);
  if (ordinal.empty() || ordinal.size() > 6 || ordinal.find_first_not_of("0123456789") != std::string::npos)
    return InvalidArgument("--id-from-hostname: the host name '" + host +
                           "' does not end in -N (the ordinal of a StatefulSet's pod)");
  *id = offset + std::stoi(ordinal);
  return Status::Ok();
}

// Loads the job, lets `prepare` check and complete the options with it, adds
// the job and the credentials, and runs the member until it ends or g_stop.
template <typename Options, typename Prepare, typename Run>
int RunMember(MemberFlags<Options>& f, const std::string& log_prefix, Prepare prepare, Run run) {
  SetLogPrefix(log_prefix);
  auto job = f.job.Load();
  if (!job.ok()) return Fail(job.status());
  if (Status s = prepare(*job, f.options); !s.ok()) return Fail(s);
  if constexpr (requires { f.options.http; }) {
    if (Status s = CheckMetricsExposure(*job, f.options.http); !s.ok()) return Fail(s);
  }
  f.options.job = *job;
  auto cred = MemberCredentials(*job, f.security);
  if (!cred.ok()) return Fail(cred.status());
  f.options.credentials = *cred;
  zmq::context_t ctx(1);
  Status s = run(f.options, ctx);
  return s.ok() ? 0 : Fail(s);
}

using ServerFlags = MemberFlags<server::ServerProcessOptions>;
using AggregatorFlags = MemberFlags<aggregator::AggregatorOptions>;
using WorkerFlags = MemberFlags<worker::WorkerProcessOptions>;
using EvaluatorFlags = MemberFlags<worker::EvaluatorOptions>;

// "{id}" in a stats file's path becomes the member's id, resolved from its
// host name where --id-from-hostname says so: one pod template names each
// pod's stats file apart (deploy/render_kubernetes.cc).
void SubstituteId(std::string* path, int id) {
  for (size_t at; (at = path->find("{id}")) != std::string::npos;) path->replace(at, 4, std::to_string(id));
}

int RunServer(ServerFlags& f) {
  if (Status s = ResolveId(f.id_offset, &f.options.id); !s.ok()) return Fail(s);
  SubstituteId(&f.options.stats_file, f.options.id);
  auto prepare = [](const JobSpec& job, server::ServerProcessOptions& o) {
    GD_RETURN_IF_ERROR(CheckId("servers", o.id, job.NumServers()));
    o.checkpoint_requests = &g_checkpoint_requests;
    if (o.bind.empty()) o.bind = "tcp://" + job.RegionOfServer(o.id).host + ":*";
    return Status::Ok();
  };
  return RunMember(f, "server " + std::to_string(f.options.id), prepare,
                   [](const server::ServerProcessOptions& o, zmq::context_t& ctx) {
                     server::Server server(o, ctx, RealClock::Get());
                     Status s = server.Run(&g_stop);
                     server.Linger(s.ok());
                     return s;
                   });
}

int RunWorker(WorkerFlags& f) {
  if (Status s = ResolveId(f.id_offset, &f.options.id); !s.ok()) return Fail(s);
  SubstituteId(&f.options.stats_file, f.options.id);
  auto prepare = [](const JobSpec& job, const worker::WorkerProcessOptions& o) {
    return CheckId("workers", o.id, job.NumWorkers());
  };
  return RunMember(
      f, "worker " + std::to_string(f.options.id), prepare,
      [](const worker::WorkerProcessOptions& o, zmq::context_t& ctx) { return worker::RunWorker(o, ctx, &g_stop); });
}

using ClientFlags = MemberFlags<worker::RealClientOptions>;

int RunClient(ClientFlags& f) {
  return RunMember(
      f, "client " + std::to_string(f.options.client),
      [](const JobSpec&, const worker::RealClientOptions&) { return Status::Ok(); },
      [](const worker::RealClientOptions& o, zmq::context_t& ctx) {
        auto r = worker::RunRealClient(o, ctx, &g_stop);
        if (!r.ok()) return r.status();
        GD_LOG(INFO) << "client " << o.client << ": " << r->tasks << " update(s) sent, " << r->refused << " refused"
                     << (r->job_finished ? "; the job has finished" : "; left");
        return Status::Ok();
      });
}

int RunAggregator(AggregatorFlags& f, const std::string& region) {
  auto prepare = [&region](const JobSpec& job, aggregator::AggregatorOptions& o) {
    o.region = job.RegionIndex(region);
    if (o.region < 0) return InvalidArgument("--region " + region + " is not a region of job " + job.name);
    if (!job.regions[o.region].aggregator)
      return InvalidArgument("region " + region + " has no aggregator (set regions." + region + ".aggregator: true)");
    return Status::Ok();
  };
  return RunMember(f, "aggregator " + region, prepare, [](const aggregator::AggregatorOptions& o, zmq::context_t& ctx) {
    return aggregator::RunAggregator(o, ctx, &g_stop);
  });
}

int RunEvaluator(EvaluatorFlags& f) {
  return RunMember(
      f, "evaluator", [](const JobSpec&, const worker::EvaluatorOptions&) { return Status::Ok(); },
      [](const worker::EvaluatorOptions& o, zmq::context_t& ctx) { return worker::RunEvaluator(o, ctx, &g_stop); });
}

struct TokenFlags {
  std::string job_file, role, secret_file;
  int id = -1;
  bool any_id = false;
  int64_t ttl_s = 0;
};

// A client token admits a real client to the gateways as the id it names:
// one for any id lets its holder train every client, so it takes --any-id.
Status CheckTokenId(const TokenFlags& f) {
  if (f.id >= 0 && f.any_id) return InvalidArgument("--id and --any-id: give one");
  if (f.role != "client" || f.id >= 0) return Status::Ok();
  if (!f.any_id)
    return InvalidArgument(
        "a client token is bound to one client id: give --id K (or --any-id for a token that admits its holder as "
        "every client id)");
  std::cerr << "warning: this client token admits its holder as any client id of the job: whoever holds it may "
               "train (and poison) every client's share of the rounds; mint one per client with --id instead"
            << std::endl;
  return Status::Ok();
}

int RunToken(const TokenFlags& f) {
  if (Status s = CheckTokenId(f); !s.ok()) return Fail(s);
  auto job = LoadJobFile(f.job_file);
  if (!job.ok()) return Fail(job.status());
  if (job->security.mode != SecurityMode::kCurve)
    return Fail(
        InvalidArgument(f.job_file + ": security.mode is " + ToString(job->security.mode) + "; tokens need curve"));
  auto secret = JobSecret(*job, f.secret_file);
  if (!secret.ok()) return Fail(secret.status());
  auto token = transport::MintToken(
      *secret, {.job = job->name,
                .role = f.role,
                .id = f.id,
                .expiry_unix = transport::UnixNow() + (f.ttl_s > 0 ? f.ttl_s : job->security.token_ttl_s)});
  if (!token.ok()) return Fail(token.status());
  std::cout << *token << std::endl;
  return 0;
}

}  // namespace

// /metrics, /healthz and /readyz (transport/http_endpoint.h).
void AddHttpFlags(CLI::App* cmd, transport::HttpOptions& o) {
  cmd->add_option("--http-bind", o.bind,
                  "serve /metrics, /healthz and /readyz on host:port (port 0 picks a free one; default: none)")
      ->check([](const std::string& v) {
        Status s = transport::CheckHttpBind(v);
        return s.ok() ? std::string() : s.message();
      });
  cmd->add_option("--http-address-file", o.address_file, "write the bound host:port of --http-bind here");
  cmd->add_option("--metrics-token-file", o.metrics_token_file,
                  "serve /metrics only to requests with `Authorization: Bearer T`, T this file's first line (16 "
                  "characters or more; a secured job's launch writes RUN_DIR/metrics.token); /healthz and /readyz "
                  "stay open");
  cmd->add_option("--http-linger", o.linger_s,
                  "at exit, keep serving until the final metrics were scraped once, at most this long (s)")
      ->check(CLI::Range(0.0, 600.0));
  cmd->add_flag_callback(
      "--hold-after-exit", [&o] { o.hold_until = &g_stop; },
      "after finishing well, keep serving /healthz until SIGTERM instead of exiting (a StatefulSet's pod)");
}

Command AddCoordinator(CLI::App& app) {
  auto f = std::make_shared<CoordinatorFlags>();
  auto* cmd = app.add_subcommand("coordinator", "run the job's coordinator (membership, leases, shard map)");
  f->job.Add(cmd);
  cmd->add_option("--bind", f->options.bind, "ZeroMQ endpoint to bind (port * picks a free one)")
      ->default_val("tcp://127.0.0.1:*");
  cmd->add_option("--endpoint-file", f->options.endpoint_file, "write the bound endpoint here");
  AddStatsFileFlag(cmd, &f->options.stats_file);
  AddHttpFlags(cmd, f->options.http);
  cmd->add_option("--state-file", f->options.state_file,
                  "keep the coordinator's state here; continue from it if it exists (a restart)");
  cmd->add_flag("--no-evaluator", f->no_evaluator, "do not wait for an evaluator before ending the job");
  cmd->add_option("--resume", f->resume, "start workers at the clocks of this resume plan (JSON)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--secret-file", f->secret_file,
                  "secured jobs: the job secret that join tokens are checked against (default: "
                  "security.secret_file, else the GEODESIC_JOB_SECRET environment variable)");
  cmd->add_option("--key-file", f->options.key_file, "secured jobs: write the coordinator's CURVE public key here");
  cmd->add_option("--keypair-file", f->keypair_file,
                  "secured jobs: keep the coordinator's CURVE keypair in this file (created, mode 0600, if "
                  "missing), so that a restarted coordinator has the key its members know (default: the "
                  "GEODESIC_COORDINATOR_KEYPAIR environment variable, else a fresh keypair)");
  return {cmd, [f] { return RunCoordinator(*f); }};
}

Command AddServer(CLI::App& app) {
  auto f = std::make_shared<ServerFlags>();
  server::ServerProcessOptions& o = f->options;
  auto* cmd = app.add_subcommand("server", "run one parameter-server shard");
  f->job.Add(cmd);
  AddIdFlags(cmd, &o.id, &f->id_offset, "server");
  cmd->add_option("--coordinator", o.coordinator, "coordinator endpoint")->required();
  cmd->add_option("--bind", o.bind, "endpoint to bind (default: the region's host, free port)");
  cmd->add_option("--advertise", o.advertise,
                  "endpoint to register with the coordinator, which members dial (default: the bound address; "
                  "a compose deployment names the container, which its link router routes)");
  AddStatsFileFlag(cmd, &o.stats_file);
  AddHttpFlags(cmd, o.http);
  cmd->add_option("--checkpoint-dir", o.checkpoint_dir, "write checkpoints under this directory");
  cmd->add_option("--resume", o.resume_file, "load the shard from this resume plan (JSON) before serving")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--recover", o.recover,
                "restarted after a crash: load this shard's newest checkpoint from --checkpoint-dir");
  cmd->add_flag("--backup", o.backup,
                "be this shard's backup (replication.backups: 1): apply the primary's updates and take over "
                "when it dies");
  f->security.Add(cmd);
  return {cmd, [f] { return RunServer(*f); }};
}

Command AddWorker(CLI::App& app) {
  auto f = std::make_shared<WorkerFlags>();
  auto* cmd = app.add_subcommand("worker", "run one training worker");
  f->job.Add(cmd);
  AddIdFlags(cmd, &f->options.id, &f->id_offset, "worker");
  cmd->add_option("--coordinator", f->options.coordinator, "coordinator endpoint")->required();
  AddStatsFileFlag(cmd, &f->options.stats_file);
  AddHttpFlags(cmd, f->options.http);
  cmd->add_option("--snapshot-dir", f->options.snapshot_dir, "worker 0: save parameter snapshots here");
  cmd->add_option("--gateway-bind", f->options.gateway_bind,
                  "federated.gateway: where real clients connect (default: tcp://<region host>:*)");
  cmd->add_option("--aggregator", f->options.aggregator,
                  "its region's aggregator (regions.NAME.aggregator): push and pull through it");
  f->security.Add(cmd);
  return {cmd, [f] { return RunWorker(*f); }};
}

Command AddClient(CLI::App& app) {
  auto f = std::make_shared<ClientFlags>();
  auto* cmd = app.add_subcommand("client", "run one real federated client (a job with federated.gateway: true)");
  f->job.Add(cmd);
  cmd->add_option("--id", f->options.client, "the client id it trains (0-based, < federated.clients)")->required();
  cmd->add_option("--coordinator", f->options.coordinator, "coordinator endpoint")->required();
  cmd->add_option("--max-tasks", f->options.max_tasks, "leave after this many rounds (default: until the job ends)");
  cmd->add_option("--leave-after", f->options.leave_after_s, "leave after this many seconds (default: never)");
  cmd->add_option("--join-timeout", f->options.join_timeout_s, "give up if no gateway is listed by then (s)");
  cmd->add_option("--misbehave", f->options.misbehave,
                  "tests: send bad updates: shape | nan | norm | samples | huge | lowest; or silent: never answer")
      ->check(CLI::IsMember({"shape", "nan", "norm", "samples", "huge", "lowest", "silent"}))
      ->group("");
  f->security.Add(cmd);
  return {cmd, [f] { return RunClient(*f); }};
}

Command AddEvaluator(CLI::App& app) {
  auto f = std::make_shared<EvaluatorFlags>();
  auto* cmd = app.add_subcommand("eval", "wait for training to end, then evaluate the final model and snapshots");
  f->job.Add(cmd);
  cmd->add_option("--coordinator", f->options.coordinator, "coordinator endpoint")->required();
  cmd->add_option("--snapshot-dir", f->options.snapshot_dir, "where worker 0 saved snapshots");
  cmd->add_option("--result-file", f->options.result_file, "write the result JSON here")->required();
  cmd->add_option("--dump-params", f->options.dump_params, "also write the final parameters as raw float32");
  AddHttpFlags(cmd, f->options.http);
  f->security.Add(cmd);
  return {cmd, [f] { return RunEvaluator(*f); }};
}

Command AddAggregator(CLI::App& app) {
  auto f = std::make_shared<AggregatorFlags>();
  auto region = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("aggregator",
                                 "run a region's aggregator: one combined push and one pull per clock for the region's "
                                 "workers (regions.NAME.aggregator)");
  f->job.Add(cmd);
  cmd->add_option("--region", *region, "the region it serves (a name from the job file)")->required();
  cmd->add_option("--coordinator", f->options.coordinator, "coordinator endpoint")->required();
  cmd->add_option("--bind", f->options.bind, "where the region's workers connect (default: tcp://<region host>:*)");
  cmd->add_option("--endpoint-file", f->options.endpoint_file, "write the bound endpoint here");
  AddStatsFileFlag(cmd, &f->options.stats_file);
  AddHttpFlags(cmd, f->options.http);
  f->security.Add(cmd);
  return {cmd, [f, region] { return RunAggregator(*f, *region); }};
}

Command AddToken(CLI::App& app) {
  auto f = std::make_shared<TokenFlags>();
  auto* cmd = app.add_subcommand("token", "print a join token for a secured job (security.mode: curve)");
  cmd->add_option("--job", f->job_file, "job file (YAML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--role", f->role, "server | worker | evaluator | aggregator | client")
      ->required()
      ->check(CLI::IsMember({"server", "worker", "evaluator", "aggregator", "client"}));
  cmd->add_option("--id", f->id,
                  "bind the token to this id of the role (an aggregator's: its region's index in the job file; client "
                  "tokens: required, or --any-id)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_flag("--any-id", f->any_id,
                "a token for any id of the role (the default for other roles than client; a client token for any "
                "id is minted with a warning)");
  cmd->add_option("--ttl", f->ttl_s, "seconds the token stays valid (default: security.token_ttl_s)")
      ->check(CLI::Range(int64_t{1}, int64_t{366} * 86400));
  cmd->add_option("--secret-file", f->secret_file, "the job secret (default: security.secret_file)");
  return {cmd, [f] { return RunToken(*f); }};
}

}  // namespace geodesic::cli
