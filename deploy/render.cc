#include "deploy/render.h"

#include <algorithm>

#include <cctype>
#include <filesystem>
#include <set>
#include <sstream>

#include "common/files.h"
#include "common/format.h"
#include "deploy/process_id.h"
#include "deploy/scrape_config.h"
#include "transport/security.h"

namespace geodesic::deploy {
namespace {

// `s` as one word for sh: single-quoted unless it is plainly safe.
std::string Quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@+,") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A host as a file-name part: letters, digits, '-' and '.' kept, the rest '_'.
std::string HostFileName(const std::string& host) {
  std::string f = "host-";
  for (char c : host) f += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '_';
  return f + ".sh";
}

// Where a host's secrets go, relative to the output directory.
std::string SecretsDir(const std::string& host) {
  std::string file = HostFileName(host);
  return "secrets/" + file.substr(0, file.size() - 3);
}

Status CheckRenderable(const JobSpec& job, const RenderOptions& o) {
  if (o.target != "hosts" && o.target != "kubernetes" && o.target != "compose")
    return InvalidArgument("deploy render: unknown target '" + o.target + "' (available: hosts, kubernetes, compose)");
  if (job.federated.enabled())
    return InvalidArgument("deploy render: federated jobs are not rendered yet; run them with `geodesic launch`");
  if (job.data.dataset != DatasetKind::kFashionMnist && job.model.name != ModelKind::kSynthetic && o.target != "hosts")
    return InvalidArgument("deploy render: data.dataset " + ToString(job.data.dataset) + ": the image holds only " +
                           "Fashion-MNIST; render --target hosts (the data must be at " + job.data.path +
                           " on every host) or use `geodesic launch`");
  if (job.model.name == ModelKind::kTorchScript && o.target != "hosts")
    return InvalidArgument("deploy render: model torchscript: the image does not hold " + job.model.path +
                           " yet; render --target hosts (the file must be at that path on every host) or use "
                           "`geodesic launch`");
  const int aggregators =
      static_cast<int>(std::count_if(job.regions.begin(), job.regions.end(), [](auto& r) { return r.aggregator; }));
  const int count = 2 + 2 * job.NumServers() + job.NumWorkers() + aggregators;
  for (int base : {o.base_port, o.http_base_port})
    if (base < 1024 || base + count > 65535)
      return InvalidArgument("deploy render: ports " + std::to_string(base) + ".." + std::to_string(base + count) +
                             " do not fit in 1024..65535");
  if (o.base_port < o.http_base_port + count && o.http_base_port < o.base_port + count)
    return InvalidArgument("deploy render: --base-port and --http-base-port ranges overlap (" + std::to_string(count) +
                           " ports each)");
  return Status::Ok();
}

}  // namespace

std::string DnsLabel(const std::string& s, size_t max) {
  std::string out;
  for (char c : s) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out += std::isalnum(static_cast<unsigned char>(l)) ? l : '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.substr(0, max);
}

std::string Endpoint(const PlacedProcess& p) { return "tcp://" + p.host + ":" + std::to_string(p.port); }

StatusOr<std::vector<PlacedProcess>> PlaceProcesses(const JobSpec& job, const RenderOptions& options) {
  GD_RETURN_IF_ERROR(CheckRenderable(job, options));
  std::vector<PlacedProcess> out;
  auto add = [&](std::string name, std::string role, int id, const RegionSpec& r, bool listens) {
    const int k = static_cast<int>(out.size());
    out.push_back({.name = std::move(name),
                   .role = std::move(role),
                   .id = id,
                   .region = r.name,
                   .host = r.host,
                   .port = listens ? options.base_port + k : 0,
                   .http_port = options.http_base_port + k,
                   .aggregator = {}});
  };
  add(ProcessId::Coordinator().Name(), "coordinator", 0, job.CoordinatorRegion(), true);
  for (int i = 0; i < job.NumServers(); ++i) add(ProcessId::Server(i).Name(), "server", i, job.RegionOfServer(i), true);
  for (int i = 0; i < job.NumServers() && job.replication.backups > 0; ++i)
    add(ProcessId::Backup(i).Name(), "server", i, job.RegionOfBackup(i), true);
  std::vector<std::string> aggregators(job.regions.size());  // by region: its endpoint, if it has one
  for (size_t r = 0; r < job.regions.size(); ++r)
    if (job.regions[r].aggregator) {
      add(ProcessId::Aggregator(static_cast<int>(r)).Name(), "aggregator", static_cast<int>(r), job.regions[r], true);
      aggregators[r] = Endpoint(out.back());
    }
  for (int i = 0; i < job.NumWorkers(); ++i)  // elastic jobs: the ones that start with the job
    if (job.IsInitialWorker(i)) {
      add(ProcessId::Worker(i).Name(), "worker", i, job.RegionOfWorker(i), false);
      out.back().aggregator = aggregators[job.RegionIndex(job.RegionOfWorker(i).name)];
    }
  // Beside worker 0, whose snapshots it reads.
  add(ProcessId::Evaluator().Name(), "eval", 0, job.NumWorkers() > 0 ? job.RegionOfWorker(0) : job.CoordinatorRegion(),
      false);
  return out;
}

namespace {

// The flags that give a secured job's process its secrets (WriteSecrets),
// and its /metrics the job's metrics token.
std::vector<std::string> SecurityArgs(const PlacedProcess& p) {
  const std::string dir = "\"$here/" + SecretsDir(p.host) + "/";
  std::vector<std::string> a = {"--metrics-token-file", dir + "metrics.token\""};
  if (p.role == "coordinator")
    a.insert(a.end(), {"--secret-file", dir + "secret\"", "--keypair-file", dir + "coordinator.keypair\""});
  else
    a.insert(a.end(),
             {"--coordinator-key-file", "\"$here/coordinator.key\"", "--token-file", dir + p.name + ".token\""});
  return a;
}

}  // namespace

std::vector<std::string> ProcessArgs(const PlacedProcess& p, const ProcessPaths& at) {
  const auto& in_run = at.in_run_dir;
  const std::optional<ProcessId> who = ProcessId::Parse(p.name);
  std::vector<std::string> a = {p.role};
  if (who && who->is(ProcessRole::kBackup)) a.push_back("--backup");
  a.insert(a.end(), {"--job", at.job_file});
  if (p.role == "aggregator")
    a.insert(a.end(), {"--region", p.region, "--bind", Endpoint(p)});
  else if (p.role != "coordinator" && p.role != "eval")
    a.insert(a.end(), {"--id", std::to_string(p.id)});
  if (!p.aggregator.empty()) a.insert(a.end(), {"--aggregator", p.aggregator});
  if (p.role == "coordinator")
    a.insert(a.end(), {"--bind", Endpoint(p), "--state-file", in_run("coordinator.state")});
  else
    a.insert(a.end(), {"--coordinator", at.coordinator});
  if (p.role == "server") a.insert(a.end(), {"--bind", Endpoint(p), "--checkpoint-dir", in_run("checkpoints")});
  if (who == ProcessId::Worker(0)) a.insert(a.end(), {"--snapshot-dir", in_run("snapshots")});
  if (p.role == "eval")
    a.insert(a.end(), {"--snapshot-dir", in_run("snapshots"), "--result-file", in_run("result.json"), "--dump-params",
                       in_run("final_params.bin")});
  else
    a.insert(a.end(), {"--stats-file", in_run("stats/" + p.name + ".json")});
  a.insert(a.end(), {"--http-bind", at.http_host + ":" + std::to_string(p.http_port)});
  return a;
}

namespace {

// The command line of one process; $RUN_DIR and $here are the script's.
std::string CommandLine(const PlacedProcess& p, const std::string& coordinator, bool secure) {
  std::vector<std::string> a =
      ProcessArgs(p, {.job_file = "\"$here/job.yaml\"",
                      .coordinator = coordinator,
                      .http_host = p.host,
                      .in_run_dir = [](const std::string& rel) { return "\"$RUN_DIR/" + rel + "\""; }});
  if (secure) {
    const auto sec = SecurityArgs(p);
    a.insert(a.end(), sec.begin(), sec.end());
  }
  std::string line = "start " + p.name;
  for (const std::string& w : a) line += " " + (w.front() == '"' ? w : Quote(w));
  return line;
}

// The part of every script that does not depend on the host.
constexpr const char* kScriptPrologue = R"sh(set -u
here=$(cd "$(dirname "$0")" && pwd)
GEODESIC=${GEODESIC:-geodesic}
# One compute thread per process, as `geodesic launch` runs them; raise it on
# a host with more cores than processes.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
mkdir -p "$RUN_DIR/logs" "$RUN_DIR/stats" "$RUN_DIR/pids"
names=() pids=()
stop() {
  trap - INT TERM
  [ ${#pids[@]} -gt 0 ] && kill -TERM "${pids[@]}" 2>/dev/null
  wait
  exit 130
}
trap stop INT TERM
start() {
  local name=$1
  shift
  "$GEODESIC" "$@" >"$RUN_DIR/logs/$name.log" 2>&1 &
  names+=("$name") pids+=($!)
  echo $! >"$RUN_DIR/pids/$name"
  echo "$(date +%T) started $name (pid $!), log $RUN_DIR/logs/$name.log"
}
)sh";

constexpr const char* kScriptEpilogue = R"sh(failed=0
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then
    echo "$(date +%T) ${names[$i]} finished"
  else
    code=$?
    failed=1
    echo "$(date +%T) ${names[$i]} failed (exit $code); its log ends:" >&2
    tail -n 5 "$RUN_DIR/logs/${names[$i]}.log" >&2
  fi
done
[ -f "$RUN_DIR/result.json" ] && echo "result: $(cat "$RUN_DIR/result.json")"
exit $failed
)sh";

std::string HostScript(const JobSpec& job, const std::string& host, const std::vector<PlacedProcess>& all) {
  std::set<std::string> regions;
  std::string names;
  for (const auto& p : all)
    if (p.host == host) regions.insert(p.region), names += (names.empty() ? "" : ", ") + p.name;
  std::ostringstream s;
  s << "#!/usr/bin/env bash\n# Geodesic job '" << job.name << "': the processes of host " << host << " (region";
  for (const auto& r : regions) s << " " << r;
  s << ") and nothing else:\n#   " << names << "\n"
    << "# Rendered by `geodesic deploy render --target hosts`; run every host's script (any order: each\n"
    << "# process waits for the coordinator). GEODESIC names the binary (default: geodesic on PATH),\n"
    << "# RUN_DIR where logs and results go (default: run-" << host << " beside this script).\n";
  s << LinkMatrixComment(job, "across real hosts");
  s << "RUN_DIR=${RUN_DIR:-$(cd \"$(dirname \"$0\")\" && pwd)/run-" << host << "}\n" << kScriptPrologue;
  const std::string coordinator = Endpoint(all.front());
  for (const auto& p : all)
    if (p.host == host) s << CommandLine(p, coordinator, job.security.mode == SecurityMode::kCurve) << "\n";
  s << kScriptEpilogue;
  return s.str();
}

std::string Readme(const JobSpec& job, const std::map<std::string, std::string>& scripts,
                   const std::vector<PlacedProcess>& all) {
  std::ostringstream s;
  s << "Geodesic job '" << job.name << "', rendered for plain hosts.\n\n"
    << "Copy this directory to every host below (with the geodesic binary and the dataset) and run\n"
    << "that host's script there. job.yaml is the job every process reads.\n\n";
  for (const auto& [file, _] : scripts) s << "  " << file << "\n";
  s << "\nProcesses (ZeroMQ port, HTTP port for /metrics, /healthz, /readyz):\n";
  for (const auto& p : all)
    s << "  " << p.name << " on " << p.host << " (" << p.region
      << "): " << (p.port ? std::to_string(p.port) : std::string("-")) << ", " << p.http_port << "\n";
  s << "\nprometheus.yml scrapes every process.\n";
  if (job.security.mode == SecurityMode::kCurve)
    s << "\nsecurity.mode: curve. secrets/host-<host>/ holds that host's join tokens (the coordinator's host also\n"
      << "the job secret and the coordinator's keypair): copy each host only its own. coordinator.key is the\n"
      << "coordinator's public key, for every host. Tokens expire security.token_ttl_s (" << job.security.token_ttl_s
      << " s) after\nrendering; render again for fresh ones (the secret and keypair are kept).\n"
      << "Every process's /metrics answers only `Authorization: Bearer` with the job's metrics token\n"
      << "(secrets/metrics.token, and in each host's directory); prometheus.yml names secrets/metrics.token:\n"
      << "keep it beside prometheus.yml on the Prometheus host.\n";
  return s.str();
}

}  // namespace

StatusOr<std::map<std::string, std::string>> Render(const JobSpec& job, const RenderOptions& options) {
  GD_ASSIGN_OR_RETURN(std::vector<PlacedProcess> all, PlaceProcesses(job, options));
  if (options.target == "kubernetes") {
    GD_ASSIGN_OR_RETURN(std::string manifests, RenderKubernetes(job, options));
    std::map<std::string, std::string> out = {{"kubernetes.yaml", manifests}};
    if (std::string late = RenderKubernetesLateWorkers(job, options); !late.empty())
      out["kubernetes-late-workers.yaml"] = late;
    return out;
  }
  std::map<std::string, std::string> files, scripts;
  JobSpec rendered = job;
  rendered.wan.emulation = WanEmulation::kNone;  // emulation is the launcher's; between hosts the links are real
  rendered.security.secret_file.clear();         // the coordinator's script names it (WriteSecrets)
  files["job.yaml"] =
      "# Geodesic job '" + job.name + "' (rendered by `geodesic deploy render`)\n" + JobToYaml(rendered);
  if (options.target == "compose") {
    GD_ASSIGN_OR_RETURN(files["compose.yaml"], RenderCompose(job, options));
    return files;
  }
  std::set<std::string> hosts;
  for (const auto& p : all) hosts.insert(p.host);
  for (const auto& h : hosts) {
    if (scripts.contains(HostFileName(h)))
      return InvalidArgument("deploy render: two hosts would share the script " + HostFileName(h) + " (" + h +
                             " and another); name them apart");
    scripts[HostFileName(h)] = HostScript(job, h, all);
  }
  std::vector<ScrapeTarget> targets;
  for (const auto& p : all) targets.push_back({p.name, p.host + ":" + std::to_string(p.http_port)});
  ScrapeConfigOptions scrape;
  if (job.security.mode == SecurityMode::kCurve) scrape.credentials_file = "secrets/metrics.token";  // WriteSecrets
  files["prometheus.yml"] = ScrapeConfigYaml("the Geodesic job '" + job.name + "' rendered for hosts", targets, scrape);
  files["README.txt"] = Readme(job, scripts, all);
  files.merge(scripts);
  return files;
}

Status WriteRendered(const std::string& dir, const std::map<std::string, std::string>& files) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Unavailable("cannot create " + dir + ": " + ec.message());
  for (const auto& [name, text] : files) {
    const std::string path = dir + "/" + name;
    const bool script = name.size() > 3 && name.compare(name.size() - 3, 3, ".sh") == 0;
    GD_RETURN_IF_ERROR(WriteFileAtomic(path, text, /*durable=*/false, script ? 0755 : 0644));
  }
  return Status::Ok();
}

namespace {

// The job secret in `path`: kept if there, else the job's own
// (security.secret_file) or a fresh one.
StatusOr<std::string> HostSecret(const JobSpec& job, const std::string& path) {
  if (!std::filesystem::exists(path)) {
    if (job.security.secret_file.empty()) {
      GD_RETURN_IF_ERROR(transport::CreateSecretFile(path));
    } else {
      GD_ASSIGN_OR_RETURN(std::string secret, transport::LoadSecret(job.security.secret_file));
      GD_RETURN_IF_ERROR(WriteFileAtomic(path, secret + "\n", /*durable=*/true, 0600));
    }
  }
  return transport::LoadSecret(path);
}

Status MakePrivateDir(const std::string& d) {
  GD_RETURN_IF_ERROR(MakeDirs(d));
  std::filesystem::permissions(d, std::filesystem::perms::owner_all);
  return Status::Ok();
}

struct CoordinatorSecrets {
  std::string secret;
  transport::CurveKeyPair keys;
};

// The job secret and the coordinator's keypair in the private directory
// `dir`, both kept if already there.
StatusOr<CoordinatorSecrets> KeptCoordinatorSecrets(const JobSpec& job, const std::string& dir) {
  GD_RETURN_IF_ERROR(MakePrivateDir(dir));
  GD_ASSIGN_OR_RETURN(std::string secret, HostSecret(job, dir + "/secret"));
  GD_ASSIGN_OR_RETURN(transport::CurveKeyPair keys, transport::LoadOrCreateKeyPair(dir + "/coordinator.keypair"));
  return CoordinatorSecrets{.secret = std::move(secret), .keys = std::move(keys)};
}

// Target kubernetes: the secret and keypair kept in secrets/, the Secrets in kubernetes-secrets.yaml.
Status WriteKubernetesSecrets(const JobSpec& job, const RenderOptions& options, const std::string& dir) {
  GD_ASSIGN_OR_RETURN(CoordinatorSecrets c, KeptCoordinatorSecrets(job, dir + "/secrets"));
  GD_ASSIGN_OR_RETURN(std::string text, RenderKubernetesSecrets(job, options, c.secret, c.keys, transport::UnixNow()));
  return WriteFileAtomic(dir + "/kubernetes-secrets.yaml", text, /*durable=*/false, 0600);
}

}  // namespace

StatusOr<std::string> JoinToken(const JobSpec& job, const std::string& secret, const std::string& role, int id,
                                int64_t now_unix) {
  return transport::MintToken(secret, {.job = job.name,
                                       .role = role == "eval" ? "evaluator" : role,
                                       .id = id,
                                       .expiry_unix = now_unix + job.security.token_ttl_s});
}

Status WriteSecrets(const JobSpec& job, const RenderOptions& options, const std::string& dir) {
  if (job.security.mode != SecurityMode::kCurve) return Status::Ok();
  GD_RETURN_IF_ERROR(transport::RequireCurve());
  if (options.target == "kubernetes") return WriteKubernetesSecrets(job, options, dir);
  GD_ASSIGN_OR_RETURN(std::vector<PlacedProcess> all, PlaceProcesses(job, options));
  GD_RETURN_IF_ERROR(MakePrivateDir(dir + "/secrets"));
  GD_ASSIGN_OR_RETURN(CoordinatorSecrets c, KeptCoordinatorSecrets(job, dir + "/" + SecretsDir(all.front().host)));
  GD_RETURN_IF_ERROR(WriteFileAtomic(dir + "/coordinator.key", c.keys.public_key + "\n", /*durable=*/false, 0644));
  const std::string metrics_token = MetricsToken(c.secret, job.name) + "\n";  // Prometheus' copy, then each host's
  GD_RETURN_IF_ERROR(WriteFileAtomic(dir + "/secrets/metrics.token", metrics_token, /*durable=*/false, 0600));
  for (const PlacedProcess& p : all) {
    const std::string host_dir = dir + "/" + SecretsDir(p.host);
    GD_RETURN_IF_ERROR(MakePrivateDir(host_dir));
    GD_RETURN_IF_ERROR(WriteFileAtomic(host_dir + "/metrics.token", metrics_token, /*durable=*/false, 0600));
    if (p.role == "coordinator") continue;
    GD_ASSIGN_OR_RETURN(std::string token, JoinToken(job, c.secret, p.role, p.id, transport::UnixNow()));
    GD_RETURN_IF_ERROR(WriteFileAtomic(host_dir + "/" + p.name + ".token", token + "\n", /*durable=*/false, 0600));
  }
  return Status::Ok();
}

std::string LinkMatrixComment(const JobSpec& job, const std::string& where) {
  if (job.wan.links.empty()) return "# Links: none declared (the planner treats every pair of regions alike).\n";
  std::string s = "# Links declared between regions (the planner's input; " + where + " the links are real):\n";
  for (const LinkSpec& l : job.wan.links)
    s += "#   " + l.from + " -> " + l.to + ": " + Fmt("%g", 2 * l.delay_ms) + " ms RTT, " +
         (l.bandwidth_mbit > 0 ? Fmt("%g", l.bandwidth_mbit) + " Mbit/s" : std::string("unlimited")) + ", loss " +
         Fmt("%g", l.loss) + "\n";
  return s;
}

}  // namespace geodesic::deploy
