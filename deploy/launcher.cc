#include "deploy/launcher.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <zmq.hpp>

#include "cluster/status_probe.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/format.h"
#include "compression/codec.h"
#include "config/job.h"
#include "deploy/dashboard.h"
#include "deploy/emulated_wan.h"
#include "deploy/faults.h"
#include "deploy/netns.h"
#include "deploy/progress.h"
#include "deploy/recovery.h"
#include "deploy/run_dir.h"
#include "deploy/scrape_config.h"
#include "deploy/summary.h"
#include "deploy/supervisor.h"
#include "deploy/verdict.h"
#include "server/checkpoint.h"
#include "transport/security.h"

namespace geodesic::deploy {
namespace {

using json = nlohmann::json;

std::vector<std::string> Append(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Codec names are checked before anything starts.
Status CheckCodecs(const JobSpec& job, const std::string& job_file) {
  std::vector<std::pair<std::string, std::string>> names = {{"compression.push", job.compression.push},
                                                            {"compression.pull", job.compression.pull}};
  if (job.federated.enabled()) names.push_back({"federated.uplink_codec", job.federated.uplink_codec});
  if (!job.federated.slow_uplink_codec.empty())
    names.push_back({"federated.slow_uplink_codec", job.federated.slow_uplink_codec});
  for (size_t i = 0; i < job.compression.links.size(); ++i) {
    const auto& l = job.compression.links[i];
    std::string where = "compression.links[" + std::to_string(i) + "]";
    if (!l.push.empty()) names.push_back({where + ".push", l.push});
    if (!l.pull.empty()) names.push_back({where + ".pull", l.pull});
  }
  for (const auto& [where, name] : names) {
    auto spec = compression::ParseCodecSpec(name);
    if (!spec.ok()) return InvalidArgument(job_file + ": " + where + ": " + spec.status().message());
  }
  return Status::Ok();
}

// Fashion-MNIST's files (the CLI reads other datasets in full before this).
Status CheckDataset(const JobSpec& job) {
  if (job.model.name == ModelKind::kSynthetic || job.data.dataset != DatasetKind::kFashionMnist) return Status::Ok();
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                        "t10k-labels-idx1-ubyte.gz"}) {
    std::string p = job.data.path + "/" + f;
    if (!std::filesystem::exists(p))
      return NotFound("Fashion-MNIST file " + p +
                      " is missing; install it with `apt-get install dataset-fashion-mnist` (or set data.path)");
  }
  return Status::Ok();
}

}  // namespace

Status CheckLaunchable(const JobSpec& job, const std::string& job_file) {
  GD_RETURN_IF_ERROR(CheckCodecs(job, job_file));
  return CheckDataset(job);
}

namespace {

// Security (security.mode curve; docs/security.md): the job secret (made
// here, mode 0600, unless the job names one), and a token per member in a
// 0600 file that its command line names (a token in argv would show in ps).
struct MemberSecurity {
  bool secure = false;
  std::string key_path, keypair_path, secret_path, secret;
  std::string metrics_token, metrics_token_path;  // secured jobs: RUN_DIR/metrics.token
  std::string job_name;
  RunDir dir;
  int64_t token_ttl_s = 0;

  static StatusOr<MemberSecurity> Prepare(const JobSpec& job, const RunDir& dir) {
    MemberSecurity s;
    s.secure = job.security.mode == SecurityMode::kCurve;
    s.key_path = dir.coordinator_key();
    // Secured jobs: the coordinator's keypair, kept for its restarts (not
    // across launches: members of a new launch learn the new key).
    s.keypair_path = dir.coordinator_keypair();
    s.job_name = job.name;
    s.dir = dir;
    s.token_ttl_s = job.security.token_ttl_s;
    std::filesystem::remove(s.key_path);
    std::filesystem::remove(s.keypair_path);
    std::filesystem::remove(MetricsTokenPath(dir.path));  // an earlier secured launch's
    if (!s.secure) return s;
    GD_RETURN_IF_ERROR(transport::RequireCurve());
    s.secret_path = job.security.secret_file.empty() ? dir.File("secret") : job.security.secret_file;
    if (job.security.secret_file.empty() && !std::filesystem::exists(s.secret_path))
      GD_RETURN_IF_ERROR(transport::CreateSecretFile(s.secret_path));
    GD_ASSIGN_OR_RETURN(s.secret, transport::LoadSecret(s.secret_path));
    // Every process's /metrics (and the dashboard's) requires this token.
    s.metrics_token = MetricsToken(s.secret, job.name);
    s.metrics_token_path = MetricsTokenPath(dir.path);
    GD_RETURN_IF_ERROR(WriteFileAtomic(s.metrics_token_path, s.metrics_token + "\n", /*durable=*/false, 0600));
    GD_RETURN_IF_ERROR(MakeDirs(dir.tokens()));
    std::filesystem::permissions(dir.tokens(), std::filesystem::perms::owner_all);
    return s;
  }

  // The flags that give member `name` its token and the coordinator's key.
  StatusOr<std::vector<std::string>> Args(const std::string& name, const std::string& role, int id) const {
    if (!secure) return std::vector<std::string>{};
    GD_ASSIGN_OR_RETURN(
        std::string token,
        transport::MintToken(
            secret, {.job = job_name, .role = role, .id = id, .expiry_unix = transport::UnixNow() + token_ttl_s}));
    const std::string file = dir.token(name);
    GD_RETURN_IF_ERROR(WriteFileAtomic(file, token + "\n", /*durable=*/false, 0600));
    return std::vector<std::string>{"--coordinator-key-file", key_path, "--token-file", file};
  }
};

void Announce(const JobSpec& job, const RunDir& dir, const std::optional<server::ResumePlan>& resume,
              ProgressLine& progress) {
  progress.Say("geodesic: job '" + job.name + "': " + std::to_string(job.regions.size()) + " region(s), " +
               std::to_string(job.NumServers()) + " server(s), " + std::to_string(job.NumWorkers()) +
               " worker(s), model " + ToString(job.model.name) + ", staleness bound " +
               (job.training.staleness_bound >= kUnboundedStaleness ? std::string("inf")
                                                                    : std::to_string(job.training.staleness_bound)) +
               "; logs in " + dir.logs());
  for (const std::string& note : JobNotes(job)) progress.Say("geodesic: note: " + note);
  if (!resume) return;
  std::string clocks;
  for (size_t i = 0; i < resume->clocks.size(); ++i)
    clocks += (i ? ", " : "") + std::string("server ") + std::to_string(i) + " at " + std::to_string(resume->clocks[i]);
  progress.Say(
      "geodesic: resuming from checkpoints (" + clocks + "); workers start at clock " + std::to_string(resume->clock) +
      (resume->refused.empty()
           ? std::string()
           : "; passed over " + std::to_string(resume->refused.size()) + " bad file(s): " + resume->refused.front()));
}

// Measures every emulated link before anything starts, and says what it found.
StatusOr<json> ProbeLinks(const JobSpec& job, EmulatedWan* wan, NetnsWan* netns, ProgressLine& progress) {
  if (!(wan || netns) || !job.wan.probe || job.wan.links.empty()) return json::array();
  progress.Say("geodesic: probing " + std::to_string(job.wan.links.size()) + " emulated links" +
               (netns ? " (kernel)" : ""));
  GD_ASSIGN_OR_RETURN(json link_probes, wan ? wan->Probe() : netns->Probe());
  for (const auto& p : link_probes)
    progress.Say("geodesic:   " + p["from"].get<std::string>() + " -> " + p["to"].get<std::string>() + ": configured " +
                 Fmt("%.0f", p["configured_rtt_ms"].get<double>()) + " ms RTT " +
                 (p["configured_mbit"].get<double>() > 0 ? Fmt("%.0f", p["configured_mbit"].get<double>()) + " Mbit/s"
                                                         : std::string("unlimited")) +
                 ", measured " +
                 (p.contains("probed_rtt_ms") ? Fmt("%.1f", p["probed_rtt_ms"].get<double>()) + " ms " +
                                                    Fmt("%.1f", p["probed_mbit"].get<double>()) + " Mbit/s"
                                              : "nothing (" + p.value("probe_error", std::string()) + ")"));
  return link_probes;
}

// What one launch sets up before its children start. Declared so that the
// children end before the emulated links and namespaces go.
struct Session {
  Session(const LaunchOptions& o, JobSpec j) : options(o), job(std::move(j)) {}

  const LaunchOptions& options;
  JobSpec job;
  RunDir dir;
  std::optional<server::ResumePlan> resume;
  // Kernel-emulated links (wan.emulation: netns): a network namespace per
  // region, up before any child starts; each region's processes run inside
  // theirs and bind its address. Taken down when Launch returns.
  std::unique_ptr<NetnsWan> netns;
  std::unique_ptr<EmulatedWan> wan;  // proxy emulation: fixed ports, routes
  MemberSecurity security;
  json link_probes = json::array();
  std::unique_ptr<Supervisor> children;
  std::string endpoint;                  // the coordinator's
  std::vector<std::string> aggregators;  // by region index: its aggregator's endpoint, or empty
  std::unique_ptr<Dashboard> dashboard;  // none if off

  std::vector<std::string> Routes(const std::string& region) const {
    return wan ? wan->RouteArgs(region) : std::vector<std::string>{};
  }
  // /metrics on the region's host, a free port, reported in http/NAME.
  std::vector<std::string> Http(const std::string& name, const RegionSpec& region) const {
    if (!options.metrics) return {};
    std::vector<std::string> args = {"--http-bind",  region.host + ":0", "--http-address-file",
                                     dir.http(name), "--http-linger",    Fmt("%g", options.metrics_linger_s)};
    if (security.secure) args.insert(args.end(), {"--metrics-token-file", security.metrics_token_path});
    return args;
  }
};

// Brings up the emulated links and writes the job file the children read.
Status PrepareLinks(Session& s, ProgressLine& progress) {
  if (s.job.wan.emulation == WanEmulation::kNetns) {
    GD_ASSIGN_OR_RETURN(s.netns, NetnsWan::Up(s.job, s.dir.path));
    for (auto& r : s.job.regions) r.host = s.netns->Address(r.name);
  }
  GD_RETURN_IF_ERROR(WriteFileAtomic(s.dir.job_yaml(), JobToYaml(s.job)));
  GD_ASSIGN_OR_RETURN(s.security, MemberSecurity::Prepare(s.job, s.dir));
  // Workers share cores: one BLAS thread each (measured).
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  ::setenv("OMP_NUM_THREADS", "1", 1);
  Announce(s.job, s.dir, s.resume, progress);
  if (s.job.wan.emulation == WanEmulation::kProxy && !s.job.wan.links.empty()) {
    GD_ASSIGN_OR_RETURN(s.wan, EmulatedWan::Start(s.job));
  }
  GD_ASSIGN_OR_RETURN(s.link_probes, ProbeLinks(s.job, s.wan.get(), s.netns.get(), progress));
  const std::string exe = s.options.binary.empty() ? SelfBinary() : s.options.binary;
  NetnsWan* netns = s.netns.get();
  s.children = std::make_unique<Supervisor>(s.dir.logs(), [exe, netns](const std::string& region) {
    std::vector<std::string> prefix;
    if (netns) prefix = netns->CommandPrefix(region);  // ip netns exec gd-<region>
    prefix.push_back(exe);
    return prefix;
  });
  return Status::Ok();
}

// Serves the dashboard (deploy/dashboard.h) unless it is off; a secured job
// serves it only with a token.
Status StartDashboard(Session& s, ProgressLine& progress) {
  if (s.options.dashboard.empty()) return Status::Ok();
  DashboardOptions o{.bind = s.options.dashboard, .token = "", .metrics_token = s.security.metrics_token};
  if (!s.options.dashboard_token_file.empty()) {
    GD_ASSIGN_OR_RETURN(std::string token, ReadFile(s.options.dashboard_token_file));
    o.token = token.substr(0, token.find_first_of("\r\n"));
    if (o.token.size() < 16)
      return InvalidArgument(s.options.dashboard_token_file + ": a dashboard token needs at least 16 characters");
  }
  if (s.security.secure && o.token.empty()) {
    progress.Say("geodesic: no dashboard (a secured job serves it only with --dashboard-token-file)");
    return Status::Ok();
  }
  GD_ASSIGN_OR_RETURN(s.dashboard, Dashboard::Start(s.job, s.dir, std::move(o)));
  s.dashboard->UpdateLinks(s.link_probes, s.wan ? s.wan->Traffic() : json::array());
  progress.set_sink([d = s.dashboard.get()](const std::string& line) { d->Event(line); });
  // Never the token: stdout ends up in logs.
  progress.Say("geodesic: dashboard at " + s.dashboard->url() +
               (s.dashboard->requires_token() ? " (add ?token= and the token of --dashboard-token-file)" : ""));
  return Status::Ok();
}

// Starts the coordinator and waits for its endpoint file.
Status StartCoordinator(Session& s, const std::atomic<bool>* stop) {
  std::vector<std::string> args = {"coordinator",
                                   "--job",
                                   s.dir.job_yaml(),
                                   "--bind",
                                   s.wan ? s.wan->coordinator_bind() : "tcp://" + s.job.CoordinatorRegion().host + ":*",
                                   "--endpoint-file",
                                   s.dir.endpoint_file(),
                                   "--stats-file",
                                   s.dir.stats(ProcessId::Coordinator().Name()),
                                   "--state-file",
                                   s.dir.coordinator_state()};
  if (s.security.secure)
    args = Append(args, {"--secret-file", s.security.secret_path, "--key-file", s.security.key_path, "--keypair-file",
                         s.security.keypair_path});
  if (s.resume) args = Append(args, {"--resume", s.dir.resume_json()});
  args = Append(args, s.Http(ProcessId::Coordinator().Name(), s.job.CoordinatorRegion()));
  GD_RETURN_IF_ERROR(s.children->Start(ProcessId::Coordinator(), args, s.job.CoordinatorRegion().name));
  Child* coordinator = s.children->children()[0].get();
  for (int i = 0; i < 1500 && s.endpoint.empty(); ++i) {
    auto text = ReadFile(s.dir.endpoint_file());
    if (text.ok()) s.endpoint = *text;
    if (coordinator->Poll() || stop->load()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!s.endpoint.empty()) return Status::Ok();
  std::string tail = coordinator->LogTail(20);
  s.children->StopAll(SIGTERM, 2);
  return Unavailable("the coordinator did not start; its log:\n" + tail);
}

// Shard primaries and, in replicated jobs, each shard's backup in the next
// region (job.h). With emulated WAN links a backup binds an endpoint the
// emulator routes to, so that replication crosses the link between the
// primary's region and its own (and is cut with it).
Status StartServers(Session& s) {
  for (int i = 0; i < s.job.NumServers(); ++i) {
    const std::string name = ProcessId::Server(i).Name();
    const std::string& region = s.job.RegionOfServer(i).name;
    std::vector<std::string> args = {"server",        "--job",    s.dir.job_yaml(), "--id",           std::to_string(i),
                                     "--coordinator", s.endpoint, "--stats-file",   s.dir.stats(name)};
    args = Append(Append(args, {"--checkpoint-dir", s.dir.checkpoints()}), s.Http(name, s.job.RegionOfServer(i)));
    if (s.resume) args = Append(args, {"--resume", s.dir.resume_json()});
    if (s.wan) args = Append(Append(args, {"--bind", s.wan->server_bind(i)}), s.Routes(region));
    GD_ASSIGN_OR_RETURN(auto sec, s.security.Args(name, "server", i));
    GD_RETURN_IF_ERROR(s.children->Start(ProcessId::Server(i), Append(args, sec), region));
  }
  for (int i = 0; i < s.job.NumServers() && s.job.replication.backups > 0; ++i) {
    const std::string name = ProcessId::Backup(i).Name();
    const RegionSpec& region = s.job.RegionOfBackup(i);
    std::vector<std::string> args = {
        "server",          "--backup", "--job",
        s.dir.job_yaml(),  "--id",     std::to_string(i),
        "--coordinator",   s.endpoint, "--stats-file",
        s.dir.stats(name), "--bind",   s.wan ? s.wan->backup_bind(i) : "tcp://" + region.host + ":*"};
    args = Append(Append(args, {"--checkpoint-dir", s.dir.checkpoints()}), s.Http(name, region));
    if (s.wan) args = Append(args, s.Routes(region.name));
    GD_ASSIGN_OR_RETURN(auto sec, s.security.Args(name, "server", i));  // a backup joins with its shard's token
    GD_RETURN_IF_ERROR(s.children->Start(ProcessId::Backup(i), Append(args, sec), region.name));
  }
  return Status::Ok();
}

// Waits for a child's endpoint file; Unavailable with its log if it exits
// or stop is set first.
StatusOr<std::string> AwaitEndpoint(Session& s, Child* child, const std::string& file, const std::atomic<bool>* stop) {
  for (int i = 0; i < 3000; ++i) {
    auto text = ReadFile(file);
    if (text.ok() && !text->empty()) return *text;
    if (child->Poll() || stop->load()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Unavailable(child->name() + " did not start; its log:\n" + child->LogTail(20));
}

// Each region's aggregator (regions.NAME.aggregator), before its workers,
// which are told where it listens.
Status StartAggregators(Session& s, const std::atomic<bool>* stop) {
  s.aggregators.assign(s.job.regions.size(), "");
  for (size_t r = 0; r < s.job.regions.size(); ++r) {
    const RegionSpec& region = s.job.regions[r];
    if (!region.aggregator) continue;
    const ProcessId who = ProcessId::Aggregator(static_cast<int>(r));
    const std::string name = who.Name(), file = s.dir.File(name + ".endpoint");
    std::vector<std::string> args = {"aggregator", "--job",         s.dir.job_yaml(), "--region",
                                     region.name,  "--coordinator", s.endpoint,       "--endpoint-file",
                                     file,         "--stats-file",  s.dir.stats(name)};
    args = Append(Append(args, s.Http(name, region)), s.Routes(region.name));
    GD_ASSIGN_OR_RETURN(auto sec, s.security.Args(name, "aggregator", static_cast<int>(r)));
    GD_RETURN_IF_ERROR(s.children->Start(who, Append(args, sec), region.name));
    GD_ASSIGN_OR_RETURN(s.aggregators[r], AwaitEndpoint(s, s.children->children().back().get(), file, stop));
  }
  return Status::Ok();
}

Status StartWorker(Session& s, int i) {
  const std::string name = ProcessId::Worker(i).Name();
  const std::string& region = s.job.RegionOfWorker(i).name;
  std::vector<std::string> args = {"worker",        "--job",    s.dir.job_yaml(), "--id",           std::to_string(i),
                                   "--coordinator", s.endpoint, "--stats-file",   s.dir.stats(name)};
  if (i == 0) args = Append(args, {"--snapshot-dir", s.dir.snapshots()});
  const int r = s.job.RegionIndex(region);
  if (r >= 0 && static_cast<size_t>(r) < s.aggregators.size() && !s.aggregators[r].empty())
    args = Append(args, {"--aggregator", s.aggregators[r]});
  args = Append(args, s.Http(name, s.job.RegionOfWorker(i)));
  GD_ASSIGN_OR_RETURN(auto sec, s.security.Args(name, "worker", i));
  return s.children->Start(ProcessId::Worker(i), Append(Append(args, sec), s.Routes(region)), region);
}

Status StartWorkersAndEvaluator(Session& s) {
  // Elastic jobs: the others join later (--join).
  for (int i = 0; i < s.job.NumWorkers(); ++i)
    if (s.job.IsInitialWorker(i)) GD_RETURN_IF_ERROR(StartWorker(s, i));
  GD_ASSIGN_OR_RETURN(auto eval_sec, s.security.Args("evaluator", "evaluator", 0));
  const std::string& region = s.job.CoordinatorRegion().name;
  std::vector<std::string> args = {"eval",
                                   "--job",
                                   s.dir.job_yaml(),
                                   "--coordinator",
                                   s.endpoint,
                                   "--snapshot-dir",
                                   s.dir.snapshots(),
                                   "--result-file",
                                   s.dir.result_json(),
                                   "--dump-params",
                                   s.dir.final_params()};
  args = Append(args, s.Http(ProcessId::Evaluator().Name(), s.job.CoordinatorRegion()));
  return s.children->Start(ProcessId::Evaluator(), Append(Append(args, s.Routes(region)), eval_sec), region);
}

// The supervision loop and its exit policy (launcher.h): watches the
// children and the coordinator's status until the job ends, restarting or
// failing over what may be, and injecting the requested faults.
class JobRun {
 public:
  JobRun(Session& s, ProgressLine& progress, std::vector<Kill> kills, std::vector<Cut> cuts, std::vector<Join> joins,
         const std::atomic<bool>* stop)
      : s_(s),
        progress_(progress),
        faults_(std::move(kills), std::move(cuts), s.dir.wan_control(), s.wan.get(), s.netns.get()),
        joins_(std::move(joins)),
        stop_(stop) {}

  Status Start();
  // Runs until every child ended, the job failed or it was interrupted.
  void Run();
  RunRecord Record(double total_wall_seconds) const {
    TrainingSpan span = span_;
    if (span.start_unix && !span.end_unix) span.end_unix = UnixSeconds();
    return RunRecord{.job = s_.job,
                     .dir = s_.dir,
                     .outcome = outcome_,
                     .failure = failure_,
                     .losses = losses_,
                     .unwritten = unwritten_,
                     .span = span,
                     .total_wall_seconds = total_wall_seconds,
                     .children = *s_.children,
                     .faults = faults_,
                     .recoveries = recoveries_.records(),
                     .link_probes = s_.link_probes,
                     .wan = s_.wan.get(),
                     .netns = s_.netns.get()};
  }

 private:
  bool Step();  // false once the loop should end
  void OnExit(Child* c);
  void OnWorkerExit(Child* c);
  void OnEvaluatorExit(Child* c);
  void OnCoordinatorExit(Child* c);
  void OnFailover(Child* c);
  void OnServerExit(Child* c);
  void OnStatus(const wire::StatusReply& st);
  void UpdateDashboard(const wire::StatusReply& st, double rate);
  void NoteCoordinatorRestart(const wire::StatusReply& st);
  void StartJoins();  // elastic jobs: the --join workers that are due
  // After the loop: a job that lost processes for good, or trained nothing
  // to the end, or could not write its results, did not finish.
  void Judge();
  bool AnyWorkerRunning() const;
  Status Restart(Child* dead, const std::vector<std::string>& args, const std::string& how);
  // Ends the job as failed; `log_of`: whose log tail to show.
  void Fail(const std::string& why, const Child* log_of = nullptr);
  bool EvaluatorDone() const { return evaluator_done_at_.has_value(); }

  Session& s_;
  ProgressLine& progress_;
  FaultInjector faults_;
  std::vector<Join> joins_;
  const std::atomic<bool>* stop_;
  Recoveries recoveries_;
  TrainingClock clock_;
  SampleRate rate_;
  zmq::context_t ctx_{1};
  std::unique_ptr<cluster::StatusProbe> probe_;
  std::optional<wire::StatusReply> last_status_;
  std::chrono::steady_clock::time_point last_traffic_{};  // the dashboard's link bytes
  Outcome outcome_ = Outcome::kFinished;
  std::string failure_;
  std::vector<Loss> losses_;
  std::vector<std::string> unwritten_;  // results the evaluator could not write
  int workers_finished_ = 0;            // exited 0
  TrainingSpan span_;
  bool span_end_frozen_ = false;  // the evaluator ended while workers still ran
  // A restarted coordinator that has not yet answered a status request
  // (which says whether it found its saved state).
  std::optional<std::chrono::steady_clock::time_point> coordinator_restarted_at_;
  std::optional<std::chrono::steady_clock::time_point> evaluator_done_at_;
  bool said_trained_ = false;  // "training ended" was said
  std::optional<std::pair<std::string, std::chrono::steady_clock::time_point>> premature_exit_;
};

Status JobRun::Start() {
  GD_RETURN_IF_ERROR(s_.dir.WritePids(s_.children->Pids()));
  GD_ASSIGN_OR_RETURN(auto security, cluster::ProbeSecurity(s_.job, s_.security.secret, s_.security.key_path));
  probe_ = std::make_unique<cluster::StatusProbe>(ctx_, s_.job, s_.endpoint, security.first, security.second);
  return Status::Ok();
}

void JobRun::Run() {
  while (Step()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  progress_.Clear();
  Judge();
}

bool JobRun::AnyWorkerRunning() const {
  for (const auto& c : s_.children->children())
    if (s_.children->Who(c.get()).is(ProcessRole::kWorker) && c->running()) return true;
  return false;
}

void JobRun::Judge() {
  auto result = ReadFile(s_.dir.result_json());
  if (result.ok()) {
    json r = json::parse(*result, nullptr, /*allow_exceptions=*/false);
    if (r.is_object() && r.contains("unwritten") && r["unwritten"].is_object())
      for (const auto& [file, why] : r["unwritten"].items())
        unwritten_.push_back(file + ": " + (why.is_string() ? why.get<std::string>() : why.dump()));
  }
  if (outcome_ != Outcome::kFinished) return;
  std::string why;
  if (!losses_.empty()) {
    why = "lost for good: ";
    for (size_t i = 0; i < losses_.size(); ++i) why += (i ? "; " : "") + losses_[i].Describe();
  } else if (workers_finished_ == 0 && s_.job.NumWorkers() > 0) {
    why = "no worker trained to the end";
  } else if (!unwritten_.empty()) {
    why = "could not write " + unwritten_.front();
  } else {
    return;
  }
  outcome_ = Outcome::kFailed;
  failure_ = why;
}

void JobRun::Fail(const std::string& why, const Child* log_of) {
  outcome_ = Outcome::kFailed;
  failure_ = why;
  if (log_of && log_of->exit())
    losses_.push_back({log_of->name(), log_of->exit()->Describe(), LastErrorLine(log_of->log_file())});
  progress_.Say("geodesic: " + failure_ + (log_of ? "; its log ends:\n" + log_of->LogTail(12) : ""));
}

bool JobRun::Step() {
  if (stop_->load()) {
    outcome_ = Outcome::kInterrupted;
    progress_.Say("geodesic: interrupted; stopping " + std::to_string(s_.children->children().size()) + " processes");
    s_.children->StopAll(SIGTERM, 5);
    return false;
  }
  // Reap first, then judge: the evaluator's clean exit tells a server's
  // clean exit (the job finished) from a premature one.
  std::vector<Child*> ended = s_.children->Reap();
  std::stable_partition(ended.begin(), ended.end(),
                        [this](Child* c) { return s_.children->Who(c).is(ProcessRole::kEvaluator); });
  for (Child* c : ended) OnExit(c);
  const auto now = std::chrono::steady_clock::now();
  if (premature_exit_ && !EvaluatorDone() && outcome_ != Outcome::kFailed &&
      now - premature_exit_->second > std::chrono::seconds(5))
    Fail(premature_exit_->first + " exited before the job finished");
  if (outcome_ == Outcome::kFailed) {
    s_.children->StopAll(SIGTERM, 5);
    return false;
  }
  if (s_.children->AllEnded()) return false;
  if (EvaluatorDone() && now - *evaluator_done_at_ > std::chrono::milliseconds(2 * s_.job.membership.lease_ms + 5000)) {
    // Servers and the coordinator should have seen the job finish by now.
    s_.children->StopAll(SIGTERM, 5);
    return false;
  }
  if (auto st = probe_->Poll()) OnStatus(*st);
  faults_.Tick(clock_, *s_.children, progress_);
  StartJoins();
  return true;
}

void JobRun::StartJoins() {
  if (!clock_.started() || EvaluatorDone()) return;
  const double t = clock_.Seconds();
  for (Join& j : joins_) {
    if (j.done || t < j.after_s) continue;
    j.done = true;
    Status st = StartWorker(s_, j.id);
    progress_.Say("geodesic: worker-" + std::to_string(j.id) +
                  (st.ok() ? " started (--join) after " + Fmt("%.1f", t) + " s of training; it joins at the live clock"
                           : " could not be started: " + st.message()));
  }
}

void JobRun::OnStatus(const wire::StatusReply& st) {
  last_status_ = st;
  int64_t samples = 0;
  for (const auto& w : st.workers()) samples += w.progress().samples();
  const double rate = rate_.Add(samples, st.training_seconds());
  recoveries_.Observe(st, s_.job, progress_);
  NoteCoordinatorRestart(st);
  if (!st.training_started()) return;
  if (!clock_.started()) {
    // Faults are timed from here, on the wall clock.
    clock_.Start(st.training_seconds());
    span_.start_unix = UnixSeconds() - st.training_seconds();
    progress_.Say("geodesic: all processes joined; training");
  }
  if (!EvaluatorDone()) progress_.Show(RenderProgress(st, rate, s_.job.federated.enabled()));
  // Ended: no worker live and one at least done (all dead at once, as a
  // restart of every worker makes them, is not the end).
  const auto& ws = st.workers();
  const bool ended = std::none_of(ws.begin(), ws.end(), [](const auto& w) { return w.live(); }) &&
                     std::any_of(ws.begin(), ws.end(), [](const auto& w) { return w.done(); });
  if (!said_trained_ && ended && !EvaluatorDone()) {
    // The final evaluation and the curve take a while on a busy
    // machine; the line above stands still meanwhile.
    said_trained_ = true;
    progress_.Say("geodesic: training ended after " + Fmt("%.1f", st.training_seconds()) +
                  " s; the evaluator scores the final model and the curve");
  }
  if (s_.dashboard) UpdateDashboard(st, rate);
}

void JobRun::UpdateDashboard(const wire::StatusReply& st, double rate) {
  s_.dashboard->UpdateStatus(st, rate);
  const auto now = std::chrono::steady_clock::now();
  if (now - last_traffic_ < std::chrono::seconds(2)) return;
  last_traffic_ = now;
  if (s_.wan) {
    s_.dashboard->UpdateLinks(s_.link_probes, s_.wan->Traffic());
  } else if (s_.netns && s_.dashboard->Watched(10)) {
    // Reading the kernel's counters runs netns.sh (bash, ip, iptables):
    // about 3% of a 2-core machine every 2 s, so only while someone watches.
    if (auto t = s_.netns->Traffic(); t.ok()) s_.dashboard->UpdateLinks(s_.link_probes, *t);
  }
}

// Starts the dead child `dead` again with `args` in its slot, records the
// recovery and says so (`how` follows "NAME <exit> after T s of
// training"). `dead` is gone once this returns OK.
Status JobRun::Restart(Child* dead, const std::vector<std::string>& args, const std::string& how) {
  const std::string n = dead->name();
  const bool coordinator = s_.children->Who(dead).is(ProcessRole::kCoordinator);
  const std::string exit = dead->exit()->Describe();
  const double t = clock_.Seconds();
  const int k = recoveries_.CountRestart(n);
  GD_ASSIGN_OR_RETURN(Child * fresh, s_.children->Replace(dead, args, n + ".restart-" + std::to_string(k)));
  progress_.Say("geodesic: " + (coordinator ? std::string("the coordinator") : n) + " " + exit + " after " +
                Fmt("%.1f", t) + " s of training" + how);
  recoveries_.Restarted(n, exit, t, k, fresh->log_file());
  return Status::Ok();
}

void JobRun::OnExit(Child* c) {
  const ExitInfo& e = *c->exit();
  const ProcessId who = s_.children->Who(c);
  if (who.is(ProcessRole::kWorker)) return OnWorkerExit(c);
  if (who.is(ProcessRole::kEvaluator)) return OnEvaluatorExit(c);
  if (EvaluatorDone()) return;
  const std::string& n = c->name();
  const bool server = who.is(ProcessRole::kServer), backups = s_.job.replication.backups > 0;
  if (!e.ok() && who.is(ProcessRole::kCoordinator) && recoveries_.MayRestart(n)) return OnCoordinatorExit(c);
  if (!e.ok() && who.is(ProcessRole::kAggregator) && clock_.started()) {
    // The coordinator lists it as down once its lease ends; its workers
    // then send their unanswered pushes and pulls to the shards themselves.
    progress_.Say("geodesic: " + n + " " + e.Describe() + "; its region's workers push to the shards directly");
    return;
  }
  if (!e.ok() && who.is(ProcessRole::kBackup) && clock_.started()) {
    // The primary goes on alone (degraded) until the job ends.
    progress_.Say("geodesic: " + n + " " + e.Describe() + "; its primary continues without a backup");
    return;
  }
  if (!e.ok() && server && backups && clock_.started()) return OnFailover(c);
  if (!e.ok() && server && recoveries_.MayRestart(n) && !backups) return OnServerExit(c);
  if (e.ok()) {
    // A clean exit means it saw the job finish; the evaluator, which
    // finished it, may simply not have been reaped yet.
    if (!premature_exit_) premature_exit_ = {n, std::chrono::steady_clock::now()};
    return;
  }
  Fail(n + " " + e.Describe() + " before the job finished", c);
}

void JobRun::OnEvaluatorExit(Child* c) {
  if (!c->exit()->ok()) return Fail("the evaluator " + c->exit()->Describe(), c);
  evaluator_done_at_ = std::chrono::steady_clock::now();
  // Workers the coordinator gave up on (a stopped one) trained until then.
  if (AnyWorkerRunning()) {
    span_.end_unix = UnixSeconds();
    span_end_frozen_ = true;
  }
}

void JobRun::OnWorkerExit(Child* c) {
  const ExitInfo& e = *c->exit();
  const std::string n = c->name();
  if (!span_end_frozen_ && !EvaluatorDone()) span_.end_unix = UnixSeconds();
  if (e.ok()) ++workers_finished_;
  if (!e.signal && e.code == kExitJobFatal)  // e.g. a diverged model: no worker can go on
    return Fail(n + " " + e.Describe() + ": " + LastErrorLine(c->log_file()), c);
  if (!e.ok() && s_.options.restart_workers && e.signal && recoveries_.MayRestart(n) && !EvaluatorDone()) {
    const std::string what = n + " " + e.Describe();
    Status st = Restart(c, s_.children->StartedAs(s_.children->Who(c)).first,
                        "; restarted, it rejoins at the live workers' clock");
    if (!st.ok())
      progress_.Say("geodesic: " + what + " and could not be restarted (" + st.message() +
                    "); the job continues without it");
  } else if (!e.ok()) {
    progress_.Say("geodesic: " + n + " " + e.Describe() + "; the job continues without it" +
                  (e.signal ? "" : "; its log ends:\n" + c->LogTail(8)));
    // A fault the user injected is a loss the user asked for; anything
    // else (an error, a signal nobody sent on purpose) fails the job.
    if (!faults_.KilledAt(n)) losses_.push_back({n, e.Describe(), LastErrorLine(c->log_file())});
  }
}

// The coordinator restarts in place from its saved state; members reconnect
// to the same endpoint and carry on. Training does not need it in the
// meantime, only membership changes do. In secured jobs it keeps its
// keypair (--keypair-file) and the saved state has the members' keys
// (docs/security.md).
void JobRun::OnCoordinatorExit(Child* c) {
  std::vector<std::string> args = s_.children->StartedAs(s_.children->Who(c)).first;
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--bind") args[i + 1] = s_.endpoint;
  const std::string what = c->name() + " " + c->exit()->Describe();
  const auto restarted_at = std::chrono::steady_clock::now();  // before the new one's uptime starts
  Status st = Restart(c, args, "; restarted on " + s_.endpoint);
  if (!st.ok()) return Fail(what + " and could not be restarted: " + st.message());
  coordinator_restarted_at_ = restarted_at;
}

// What the restarted coordinator did, from its first status reply
// (StatusReply.restored, set when CoordinatorStore::Load took its saved
// state): continued from its saved state, or, without one, listened for a
// fresh rendezvous. The launcher does not assume either. A reply whose
// uptime is older than the restart came from the coordinator that died.
void JobRun::NoteCoordinatorRestart(const wire::StatusReply& st) {
  if (!coordinator_restarted_at_) return;
  const double since =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - *coordinator_restarted_at_).count();
  if (st.uptime_seconds() > since) return;
  coordinator_restarted_at_.reset();
  const bool saved = st.restored();
  recoveries_.Note("coordinator", "state", saved ? "saved" : "fresh_rendezvous");
  progress_.Say(saved ? "geodesic: the restarted coordinator continued from its saved state"
                      : "geodesic: the restarted coordinator found no saved state; members register again in a "
                        "fresh rendezvous");
}

// A replicated primary: its backup takes over once the primary's lease
// expires; nothing restarts. Timed from the kill (if injected) to the
// promoted backup's first applied update.
void JobRun::OnFailover(Child* c) {
  const std::string& n = c->name();
  double t = clock_.Seconds();
  auto since = faults_.KilledAt(n).value_or(std::chrono::steady_clock::now());
  progress_.Say("geodesic: " + n + " " + c->exit()->Describe() + " after " + Fmt("%.1f", t) +
                " s of training; its backup takes over");
  recoveries_.FailedOver(n, c->exit()->Describe(), t, since);
}

// A shard that dies is restarted in place from its newest checkpoint, on
// the endpoint it held, so that workers reconnect by themselves.
void JobRun::OnServerExit(Child* c) {
  const std::string n = c->name();
  const int id = s_.children->Who(c).id;
  std::string endpoint = s_.wan ? s_.wan->server_bind(id) : "";
  if (last_status_)
    for (const auto& sv : last_status_->servers())
      if (sv.id() == id) endpoint = sv.endpoint();
  const std::string what = n + " " + c->exit()->Describe();
  if (endpoint.empty()) return Fail(what + " before its endpoint was known");
  std::vector<std::string> args = s_.children->StartedAs(s_.children->Who(c)).first;
  if (!s_.wan) args.insert(args.end(), {"--bind", endpoint});
  args.push_back("--recover");
  Status st = Restart(c, args, "; restarted from its newest checkpoint on " + endpoint);
  if (!st.ok()) Fail(what + " and could not be restarted: " + st.message());
}

}  // namespace

StatusOr<int> Launch(const LaunchOptions& options, const std::atomic<bool>* stop) {
  const bool resuming = !options.resume_dir.empty();
  const std::string job_file =
      options.job_file.empty() && resuming ? RunDir{options.resume_dir}.job_yaml() : options.job_file;
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(job_file, options.overrides));
  if (job.HasAutoAggregators()) {
    if (!options.resolve_auto_aggregators)
      return InvalidArgument("regions.*.aggregator: auto needs the planner, which this launcher was not given");
    GD_RETURN_IF_ERROR(options.resolve_auto_aggregators(&job));
  }
  GD_ASSIGN_OR_RETURN(std::vector<Kill> kills, ParseKills(options.kills, job));
  GD_ASSIGN_OR_RETURN(std::vector<Cut> cuts, ParseCuts(options.cuts, job));
  GD_ASSIGN_OR_RETURN(std::vector<Join> joins, ParseJoins(options.joins, job));
  GD_RETURN_IF_ERROR(CheckLaunchable(job, job_file));
  Session s(options, std::move(job));
  GD_ASSIGN_OR_RETURN(s.dir, PrepareRunDir(s.job, options.resume_dir, options.run_dir, &s.resume));
  ProgressLine progress(options.quiet);
  GD_RETURN_IF_ERROR(PrepareLinks(s, progress));
  GD_RETURN_IF_ERROR(StartDashboard(s, progress));
  const auto launch_start = std::chrono::steady_clock::now();
  GD_RETURN_IF_ERROR(StartCoordinator(s, stop));
  GD_RETURN_IF_ERROR(StartServers(s));
  GD_RETURN_IF_ERROR(StartAggregators(s, stop));
  GD_RETURN_IF_ERROR(StartWorkersAndEvaluator(s));
  JobRun run(s, progress, std::move(kills), std::move(cuts), std::move(joins), stop);
  GD_RETURN_IF_ERROR(run.Start());
  run.Run();
  const RunRecord record =
      run.Record(std::chrono::duration<double>(std::chrono::steady_clock::now() - launch_start).count());
  const json summary = BuildSummary(record);
  if (s.dashboard) {
    s.dashboard->Finish(summary.value("status", "ended"), summary,
                        summary.contains("links") ? summary["links"] : json::array());
  }
  StatusOr<int> rc = FinishRun(summary, record, options.summary_file, progress);
  if (s.dashboard) s.dashboard->Linger(options.metrics_linger_s);
  return rc;
}

}  // namespace geodesic::deploy
