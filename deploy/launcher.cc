#include "deploy/launcher.h"

#include <google/protobuf/util/json_util.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <zmq.hpp>

#include "common/files.h"
#include "common/histogram.h"
#include "common/log.h"
#include "common/push_ledger.h"
#include "compression/codec.h"
#include "config/job.h"
#include "deploy/emulated_wan.h"
#include "deploy/netns.h"
#include "deploy/process.h"
#include "server/checkpoint.h"
#include "transport/message.h"
#include "transport/security.h"

namespace geodesic::deploy {
namespace {

using json = nlohmann::json;

struct Kill {
  std::string target;  // e.g. "worker-2"
  double after_s = 0;
  int signal = SIGKILL;
  std::string signal_name = "SIGKILL";
  bool done = false;
};

StatusOr<std::vector<Kill>> ParseKills(const std::vector<std::string>& specs, const JobSpec& job) {
  std::vector<Kill> out;
  for (const auto& s : specs) {
    auto colon = s.find(':'), at = s.find('@');
    if (colon == std::string::npos || at == std::string::npos || at < colon)
      return InvalidArgument("--kill '" + s + "': expected ROLE:ID@SECONDS[:SIGNAL], e.g. worker:2@5");
    std::string role = s.substr(0, colon);
    auto sig_colon = s.find(':', at);
    std::string when = s.substr(at + 1, sig_colon == std::string::npos ? std::string::npos : sig_colon - at - 1);
    Kill k;
    if (sig_colon != std::string::npos) {
      std::string name = s.substr(sig_colon + 1);
      static const std::map<std::string, int> kSignals = {
          {"KILL", SIGKILL}, {"TERM", SIGTERM}, {"STOP", SIGSTOP}, {"CONT", SIGCONT}, {"INT", SIGINT}};
      auto it = kSignals.find(name.rfind("SIG", 0) == 0 ? name.substr(3) : name);
      if (it == kSignals.end())
        return InvalidArgument("--kill '" + s + "': signal must be KILL, TERM, INT, STOP or CONT");
      k.signal = it->second;
      k.signal_name = "SIG" + it->first;
    }
    int id;
    double after;
    try {
      id = std::stoi(s.substr(colon + 1, at - colon - 1));
      after = std::stod(when);
    } catch (const std::exception&) {
      return InvalidArgument("--kill '" + s + "': ID and SECONDS must be numbers");
    }
    int count = role == "worker"        ? job.NumWorkers()
                : role == "server"      ? job.NumServers()
                : role == "backup"      ? job.NumServers() * job.replication.backups
                : role == "coordinator" ? 1
                                        : 0;
    if (count == 0)
      return InvalidArgument("--kill '" + s +
                             "': role must be worker, server, coordinator or (replicated jobs) backup");
    if (id < 0 || id >= count) return InvalidArgument("--kill '" + s + "': no " + role + " " + std::to_string(id));
    k.target = role == "coordinator" ? "coordinator" : role + "-" + std::to_string(id);
    k.after_s = after;
    out.push_back(k);
  }
  return out;
}

// A status client's CURVE settings and `client` token in a secured job
// (nothing in a plaintext one).
StatusOr<std::pair<transport::CurveSocket, std::string>> ProbeSecurity(const JobSpec& job, const std::string& secret,
                                                                       const std::string& key_file, int64_t ttl_s = 0) {
  if (job.security.mode != SecurityMode::kCurve) return std::pair<transport::CurveSocket, std::string>{};
  transport::CurveSocket curve;
  GD_ASSIGN_OR_RETURN(curve.keys, transport::GenerateCurveKeyPair());
  GD_ASSIGN_OR_RETURN(curve.server_key, ReadFile(key_file));
  GD_ASSIGN_OR_RETURN(std::string token,
                      transport::MintToken(secret, {.job = job.name,
                                                    .role = "client",
                                                    .id = -1,
                                                    .expiry_unix = transport::UnixNow() +
                                                                   (ttl_s > 0 ? ttl_s : job.security.token_ttl_s)}));
  return std::pair{curve, token};
}

std::string Timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// A DEALER that asks the coordinator for StatusReply. Secured jobs: it
// connects as a CURVE client and sends a `client` join token.
class StatusProbe {
 public:
  StatusProbe(zmq::context_t& ctx, const JobSpec& job, const std::string& endpoint,
              const transport::CurveSocket& curve = {}, std::string token = "")
      : socket_(ctx, zmq::socket_type::dealer,
                transport::SocketOptions{.job = job.name,
                                         .role = wire::CLIENT,
                                         .id = 0,
                                         .max_message_bytes = job.wire.max_message_bytes,
                                         .curve = curve},
                &counters_),
        token_(std::move(token)) {
    Status s = socket_.Connect(endpoint);
    if (!s.ok()) GD_LOG(WARNING) << "status probe: " << s;
  }
  // Sends a request if none is outstanding and returns the newest reply, if any.
  std::optional<wire::StatusReply> Poll() {
    std::optional<wire::StatusReply> latest;
    while (auto in = socket_.Receive()) {
      if (in->status.ok() && in->message.header.has_status_reply()) {
        latest = in->message.header.status_reply();
        outstanding_ = false;
      }
    }
    auto now = std::chrono::steady_clock::now();
    // One request every half second at most; a lost one is re-asked after 1 s.
    if ((!outstanding_ && now - sent_ > std::chrono::milliseconds(500)) || now - sent_ > std::chrono::seconds(1)) {
      wire::Header h;
      h.mutable_status_request()->set_token(token_);
      if (socket_.Send(h, {}).ok()) {
        outstanding_ = true;
        sent_ = now;
      }
    }
    return latest;
  }
  bool Wait(int ms) { return socket_.WaitReadable(ms); }

 private:
  transport::TrafficCounters counters_;
  transport::Socket socket_;
  std::string token_;
  bool outstanding_ = false;
  std::chrono::steady_clock::time_point sent_{};
};

// The live progress line: one line, rewritten in place on a terminal.
class ProgressLine {
 public:
  explicit ProgressLine(bool quiet) : quiet_(quiet), tty_(::isatty(STDOUT_FILENO)) {}

  void Show(const std::string& line) {
    if (quiet_) return;
    if (tty_) {
      std::cout << "\r\033[K" << line << std::flush;
      shown_ = true;
    } else if (std::chrono::steady_clock::now() - last_ > std::chrono::seconds(5)) {
      std::cout << line << std::endl;
      last_ = std::chrono::steady_clock::now();
    }
  }
  void Say(const std::string& line) {
    Clear();
    std::cout << line << std::endl;
  }
  void Clear() {
    if (shown_) std::cout << "\r\033[K" << std::flush;
    shown_ = false;
  }

 private:
  bool quiet_, tty_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string RenderProgress(const wire::StatusReply& st, double samples_per_s) {
  int64_t steps = 0, target = 0, live = 0;
  double loss = 0, acc = 0;
  int reporting = 0;
  for (const auto& w : st.workers()) {
    steps += w.progress().steps();
    target += w.progress().target_steps();
    live += w.live();
    if (w.progress().loss() >= 0 && w.progress().steps() > 0) {
      loss += w.progress().loss();
      acc += w.progress().train_accuracy();
      ++reporting;
    }
  }
  double stale_mean = 0;
  int64_t stale_max = 0;
  for (const auto& s : st.servers()) {
    stale_mean = std::max(stale_mean, s.progress().staleness_mean());
    stale_max = std::max(stale_max, s.progress().staleness_max());
  }
  std::string line = "[" + Fmt("%6.1f", st.training_seconds()) + "s] step " + std::to_string(steps);
  if (target > 0) line += "/" + std::to_string(target) + " (" + Fmt("%.0f", 100.0 * steps / target) + "%)";
  if (reporting) {
    line += "  loss " + Fmt("%.3f", loss / reporting) + "  train acc " + Fmt("%.3f", acc / reporting);
  }
  line += "  " + Fmt("%.0f", samples_per_s) + " samples/s";
  line += "  staleness mean " + Fmt("%.1f", stale_mean) + " max " + std::to_string(stale_max);
  line += "  workers " + std::to_string(live) + "/" + std::to_string(st.workers_size()) + " live";
  // The slowest cross-region path, as the workers measured it passively.
  const wire::LinkEstimate* slowest = nullptr;
  std::string slowest_to;
  for (const auto& w : st.workers())
    for (const auto& l : w.progress().links())
      if (l.server_region() != w.region() && l.samples() > 0 && (!slowest || l.mbit() < slowest->mbit())) {
        slowest = &l;
        slowest_to = w.region();
      }
  if (slowest)
    line += "  slowest link " + slowest->server_region() + "->" + slowest_to + " " + Fmt("%.1f", slowest->mbit()) +
            " Mbit/s " + Fmt(slowest->min_rtt_ms() < 10 ? "%.1f" : "%.0f", slowest->min_rtt_ms()) + " ms";
  return line;
}

json ReadJson(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return nullptr;
  try {
    return json::parse(*text);
  } catch (const std::exception&) {
    return nullptr;
  }
}

// Acknowledged vs. taken, per worker (docs/reliability.md): every worker
// process's push ledger in `stats_dir` (killed ones included: the counts
// outlive them), against `taken`, the chunks of each worker's pushes that the
// shards' serving processes took. For a worker none of whose processes was
// killed, taken == acknowledged exactly; a killed one's pushes in flight at
// its death may have been taken without its knowing (acknowledged <= taken <=
// acknowledged + in flight).
json PushAccounting(const std::string& stats_dir, const std::map<int, uint64_t>& taken) {
  struct Totals {
    int processes = 0;
    PushCounts c;
  };
  std::map<int, Totals> by_worker;
  json unreadable = json::array();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(stats_dir, ec)) {
    const std::string f = e.path().filename().string();
    int id = -1;
    if (e.path().extension() != ".ledger" || std::sscanf(f.c_str(), "worker-%d.", &id) != 1 || id < 0) continue;
    auto c = PushLedger::Read(e.path().string());
    if (!c.ok()) {
      unreadable.push_back(c.status().message());
      continue;
    }
    Totals& t = by_worker[id];
    ++t.processes;
    t.c.pushed += c->pushed;
    t.c.acknowledged += c->acknowledged;
    t.c.dropped += c->dropped;
    t.c.refused += c->refused;
  }
  json workers = json::object();
  uint64_t acknowledged = 0, in_flight = 0;
  for (const auto& [id, t] : by_worker) {
    auto it = taken.find(id);
    const uint64_t tk = it == taken.end() ? 0 : it->second;
    workers[std::to_string(id)] = {{"processes", t.processes},
                                   {"pushed", t.c.pushed},
                                   {"acknowledged", t.c.acknowledged},
                                   {"dropped", t.c.dropped},
                                   {"refused", t.c.refused},
                                   {"in_flight_at_exit", t.c.InFlight()},
                                   {"taken", tk}};
    acknowledged += t.c.acknowledged;
    in_flight += t.c.InFlight();
  }
  json out = {{"workers", workers}, {"acknowledged", acknowledged}, {"in_flight_at_exit", in_flight}};
  if (!unreadable.empty()) out["unreadable_ledgers"] = unreadable;
  return out;
}

struct Cut {
  std::string a, b;
  double after_s = 0, for_s = 0;
  bool cut = false, healed = false;
};

StatusOr<std::vector<Cut>> ParseCuts(const std::vector<std::string>& specs, const JobSpec& job) {
  std::vector<Cut> out;
  for (const auto& s : specs) {
    auto colon = s.find(':'), at = s.find('@'), plus = s.find('+');
    Cut c;
    bool ok =
        colon != std::string::npos && at != std::string::npos && plus != std::string::npos && colon < at && at < plus;
    if (ok) {
      c.a = s.substr(0, colon);
      c.b = s.substr(colon + 1, at - colon - 1);
      try {
        c.after_s = std::stod(s.substr(at + 1, plus - at - 1));
        c.for_s = std::stod(s.substr(plus + 1));
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (!ok || !(c.after_s >= 0) || !(c.for_s > 0))
      return InvalidArgument("--cut '" + s + "': expected REGION:REGION@SECONDS+DURATION, e.g. us:asia@10+5");
    if (job.wan.emulation == WanEmulation::kNone)
      return InvalidArgument("--cut needs emulated links (wan.emulation: proxy or netns, and wan.links)");
    if (!job.Link(c.a, c.b) && !job.Link(c.b, c.a))
      return InvalidArgument("--cut '" + s + "': no link is declared between " + c.a + " and " + c.b);
    out.push_back(c);
  }
  return out;
}

}  // namespace

Status ControlLink(const std::string& run_dir, const std::string& action, const std::string& a, const std::string& b) {
  if (action != "cut" && action != "heal") return InvalidArgument("action must be cut or heal, not '" + action + "'");
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(run_dir + "/job.yaml"));
  if (job.wan.emulation == WanEmulation::kNone)
    return FailedPrecondition("the job in " + run_dir + " has no emulated links");
  if (!job.Link(a, b) && !job.Link(b, a)) return InvalidArgument("no link is declared between " + a + " and " + b);
  GD_RETURN_IF_ERROR(MakeDirs(run_dir + "/wan-control"));
  // One file per request, named so that the launcher applies them in order.
  auto now = std::chrono::system_clock::now().time_since_epoch().count();
  return WriteFileAtomic(run_dir + "/wan-control/" + std::to_string(now) + "-" + std::to_string(::getpid()),
                         action + " " + a + " " + b + "\n", /*durable=*/false);
}

namespace {

// The pids a running launcher recorded in `run_dir`, by process name.
StatusOr<json> ReadPids(const std::string& run_dir) {
  GD_ASSIGN_OR_RETURN(std::string text, ReadFile(run_dir + "/pids.json"));
  try {
    return json::parse(text);
  } catch (const std::exception& e) {
    return InvalidArgument(run_dir + "/pids.json: " + e.what());
  }
}

}  // namespace

StatusOr<int> RequestCheckpoint(const std::string& run_dir) {
  GD_ASSIGN_OR_RETURN(json pids, ReadPids(run_dir));
  int asked = 0;
  for (auto& [name, pid] : pids.items())
    if (name.rfind("server-", 0) == 0 && pid.is_number_integer() && ::kill(pid.get<pid_t>(), SIGUSR1) == 0) ++asked;
  if (asked == 0) return NotFound("no running server of the job in " + run_dir);
  return asked;
}

Status RequestReplan(const std::string& run_dir) {
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(run_dir + "/job.yaml"));
  if (!job.wan.replan) return FailedPrecondition("the job in " + run_dir + " does not re-plan (wan.replan: false)");
  GD_ASSIGN_OR_RETURN(json pids, ReadPids(run_dir));
  if (!pids.contains("coordinator") || !pids["coordinator"].is_number_integer() ||
      ::kill(pids["coordinator"].get<pid_t>(), SIGUSR2) != 0)
    return NotFound("no running coordinator of the job in " + run_dir);
  return Status::Ok();
}

StatusOr<int> Launch(const LaunchOptions& options, const std::atomic<bool>* stop) {
  const bool resuming = !options.resume_dir.empty();
  const std::string job_file =
      options.job_file.empty() && resuming ? options.resume_dir + "/job.yaml" : options.job_file;
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(job_file, options.overrides));
  GD_ASSIGN_OR_RETURN(std::vector<Kill> kills, ParseKills(options.kills, job));
  GD_ASSIGN_OR_RETURN(std::vector<Cut> cuts, ParseCuts(options.cuts, job));
  // Codec names are checked before anything starts.
  {
    std::vector<std::pair<std::string, std::string>> names = {{"compression.push", job.compression.push},
                                                              {"compression.pull", job.compression.pull}};
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
  }
  if (job.model.name != ModelKind::kSynthetic) {
    for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                          "t10k-labels-idx1-ubyte.gz"}) {
      std::string p = job.data.path + "/" + f;
      if (!std::filesystem::exists(p))
        return NotFound("Fashion-MNIST file " + p +
                        " is missing; install it with `apt-get install dataset-fashion-mnist` (or set data.path)");
    }
  }
  std::string run_dir = resuming                  ? options.resume_dir
                        : options.run_dir.empty() ? "runs/" + job.name + "-" + Timestamp()
                                                  : options.run_dir;
  const std::string checkpoint_dir = run_dir + "/checkpoints";
  std::optional<server::ResumePlan> resume;
  if (resuming) {
    GD_ASSIGN_OR_RETURN(resume, server::PlanResume(checkpoint_dir, job.name, job.NumServers(), job.NumWorkers(),
                                                   job.training.staleness_bound));
  } else if (std::filesystem::exists(checkpoint_dir) && !std::filesystem::is_empty(checkpoint_dir)) {
    // Never overwrite another run's checkpoints.
    return FailedPrecondition(run_dir +
                              " holds the checkpoints of an earlier run; continue it with `geodesic launch "
                              "--resume " +
                              run_dir + "` or choose another --run-dir");
  }
  for (const char* sub : {"", "/logs", "/stats", "/snapshots"}) GD_RETURN_IF_ERROR(MakeDirs(run_dir + sub));
  if (resume) GD_RETURN_IF_ERROR(WriteFileAtomic(run_dir + "/resume.json", resume->ToJson()));
  std::filesystem::remove_all(run_dir + "/wan-control");
  for (const auto& e : std::filesystem::directory_iterator(run_dir + "/snapshots")) std::filesystem::remove(e.path());
  std::filesystem::remove(run_dir + "/coordinator.endpoint");
  std::filesystem::remove(run_dir + "/coordinator.state");  // a new run starts a new rendezvous
  std::filesystem::remove(run_dir + "/result.json");
  // Push ledgers count per process; an earlier launch's are not this one's.
  for (const auto& e : std::filesystem::directory_iterator(run_dir + "/stats"))
    if (e.path().extension() == ".ledger") std::filesystem::remove(e.path());
  std::filesystem::remove(run_dir + "/final_params.bin");
  // Kernel-emulated links (wan.emulation: netns): a network namespace per
  // region, up before any child starts; each region's processes run inside
  // theirs and bind its address. Taken down when Launch returns (after every
  // child ended, or on a failure or Ctrl-C).
  std::unique_ptr<NetnsWan> netns;
  if (job.wan.emulation == WanEmulation::kNetns) {
    GD_ASSIGN_OR_RETURN(netns, NetnsWan::Up(job, run_dir));
    for (auto& r : job.regions) r.host = netns->Address(r.name);
  }
  const std::string job_path = run_dir + "/job.yaml";
  GD_RETURN_IF_ERROR(WriteFileAtomic(job_path, JobToYaml(job)));
  const std::string exe = options.binary.empty() ? SelfBinary() : options.binary;

  // Security (security.mode curve; docs/security.md): the job secret (made
  // here, mode 0600, unless the job names one), and a token per member in a
  // 0600 file that its command line names (a token in argv would show in ps).
  const bool secure = job.security.mode == SecurityMode::kCurve;
  const std::string key_path = run_dir + "/coordinator.key";
  std::filesystem::remove(key_path);
  // Secured jobs: the coordinator's keypair, kept for its restarts (not
  // across launches: members of a new launch learn the new key).
  const std::string keypair_path = run_dir + "/coordinator.keypair";
  std::filesystem::remove(keypair_path);
  std::string secret_path, secret;
  if (secure) {
    GD_RETURN_IF_ERROR(transport::RequireCurve());
    secret_path = job.security.secret_file.empty() ? run_dir + "/secret" : job.security.secret_file;
    if (job.security.secret_file.empty() && !std::filesystem::exists(secret_path))
      GD_RETURN_IF_ERROR(transport::CreateSecretFile(secret_path));
    GD_ASSIGN_OR_RETURN(secret, transport::LoadSecret(secret_path));
    GD_RETURN_IF_ERROR(MakeDirs(run_dir + "/tokens"));
    std::filesystem::permissions(run_dir + "/tokens", std::filesystem::perms::owner_all);
  }
  // The flags that give member `name` its token and the coordinator's key.
  auto security_args = [&](const std::string& name, const std::string& role,
                           int id) -> StatusOr<std::vector<std::string>> {
    if (!secure) return std::vector<std::string>{};
    GD_ASSIGN_OR_RETURN(
        std::string token,
        transport::MintToken(
            secret,
            {.job = job.name, .role = role, .id = id, .expiry_unix = transport::UnixNow() + job.security.token_ttl_s}));
    std::string file = run_dir + "/tokens/" + name + ".token";
    GD_RETURN_IF_ERROR(WriteFileAtomic(file, token + "\n", /*durable=*/false, 0600));
    return std::vector<std::string>{"--coordinator-key-file", key_path, "--token-file", file};
  };
  // Workers share cores: one BLAS thread each (DESIGN.md, measured).
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  ::setenv("OMP_NUM_THREADS", "1", 1);

  ProgressLine progress(options.quiet);
  progress.Say("geodesic: job '" + job.name + "': " + std::to_string(job.regions.size()) + " region(s), " +
               std::to_string(job.NumServers()) + " server(s), " + std::to_string(job.NumWorkers()) +
               " worker(s), model " + ToString(job.model.name) + ", staleness bound " +
               (job.training.staleness_bound >= (int64_t{1} << 40) ? std::string("inf")
                                                                   : std::to_string(job.training.staleness_bound)) +
               "; logs in " + run_dir + "/logs");
  if (resume) {
    std::string clocks;
    for (size_t i = 0; i < resume->clocks.size(); ++i)
      clocks +=
          (i ? ", " : "") + std::string("server ") + std::to_string(i) + " at " + std::to_string(resume->clocks[i]);
    progress.Say("geodesic: resuming from checkpoints (" + clocks + "); workers start at clock " +
                 std::to_string(resume->clock) +
                 (resume->refused.empty() ? std::string()
                                          : "; passed over " + std::to_string(resume->refused.size()) +
                                                " bad file(s): " + resume->refused.front()));
  }

  // Emulated WAN links: fixed ports, routes through the links, probes.
  std::unique_ptr<EmulatedWan> wan;
  json link_probes = json::array();
  if (job.wan.emulation == WanEmulation::kProxy && !job.wan.links.empty()) {
    GD_ASSIGN_OR_RETURN(wan, EmulatedWan::Start(job));
  }
  if ((wan || netns) && job.wan.probe && !job.wan.links.empty()) {
    progress.Say("geodesic: probing " + std::to_string(job.wan.links.size()) + " emulated links" +
                 (netns ? " (kernel)" : ""));
    GD_ASSIGN_OR_RETURN(link_probes, wan ? wan->Probe() : netns->Probe());
    for (const auto& p : link_probes)
      progress.Say("geodesic:   " + p["from"].get<std::string>() + " -> " + p["to"].get<std::string>() +
                   ": configured " + Fmt("%.0f", p["configured_rtt_ms"].get<double>()) + " ms RTT " +
                   (p["configured_mbit"].get<double>() > 0 ? Fmt("%.0f", p["configured_mbit"].get<double>()) + " Mbit/s"
                                                           : std::string("unlimited")) +
                   ", measured " +
                   (p.contains("probed_rtt_ms") ? Fmt("%.1f", p["probed_rtt_ms"].get<double>()) + " ms " +
                                                      Fmt("%.1f", p["probed_mbit"].get<double>()) + " Mbit/s"
                                                : "nothing (" + p.value("probe_error", std::string()) + ")"));
  }
  auto routes_for = [&](const std::string& region) {
    return wan ? wan->RouteArgs(region) : std::vector<std::string>{};
  };
  auto append = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };

  std::vector<std::unique_ptr<Child>> children;
  // How each child was started (its arguments and region), for restarts.
  std::map<std::string, std::pair<std::vector<std::string>, std::string>> started_as;
  auto make_child = [&](const std::string& name, std::vector<std::string> args, const std::string& region,
                        const std::string& log) -> StatusOr<std::unique_ptr<Child>> {
    args.insert(args.begin(), exe);
    if (netns) {
      auto prefix = netns->CommandPrefix(region);  // ip netns exec gd-<region>
      args.insert(args.begin(), prefix.begin(), prefix.end());
    }
    auto c = std::make_unique<Child>(name, std::move(args), run_dir + "/logs/" + log + ".log");
    GD_RETURN_IF_ERROR(c->Start().Annotate("starting " + name));
    return c;
  };
  auto start_child = [&](const std::string& name, std::vector<std::string> args, const std::string& region) -> Status {
    started_as[name] = {args, region};
    GD_ASSIGN_OR_RETURN(auto c, make_child(name, std::move(args), region, name));
    children.push_back(std::move(c));
    return Status::Ok();
  };
  auto stop_all = [&](int sig, double grace_s) {
    for (auto& c : children) {
      c->Signal(sig);
      c->Signal(SIGCONT);  // a paused (fault-injected) process must run to act on it
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
    while (std::chrono::steady_clock::now() < deadline) {
      bool any = false;
      for (auto& c : children) any |= !c->Poll();
      if (!any) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (auto& c : children)
      if (!c->Poll()) c->Signal(SIGKILL);
    for (auto& c : children)
      while (!c->Poll()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  };

  const auto launch_start = std::chrono::steady_clock::now();
  const std::string endpoint_file = run_dir + "/coordinator.endpoint";
  std::vector<std::string> coordinator_args = {
      "coordinator",
      "--job",
      job_path,
      "--bind",
      wan ? wan->coordinator_bind() : "tcp://" + job.CoordinatorRegion().host + ":*",
      "--endpoint-file",
      endpoint_file,
      "--stats-file",
      run_dir + "/stats/coordinator.json",
      "--state-file",
      run_dir + "/coordinator.state"};
  if (secure)
    coordinator_args = append(coordinator_args,
                              {"--secret-file", secret_path, "--key-file", key_path, "--keypair-file", keypair_path});
  if (resume) coordinator_args = append(coordinator_args, {"--resume", run_dir + "/resume.json"});
  GD_RETURN_IF_ERROR(start_child("coordinator", coordinator_args, job.CoordinatorRegion().name));
  std::string endpoint;
  for (int i = 0; i < 1500 && endpoint.empty(); ++i) {
    auto text = ReadFile(endpoint_file);
    if (text.ok()) endpoint = *text;
    if (children[0]->Poll() || stop->load()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (endpoint.empty()) {
    std::string tail = children[0]->LogTail(20);
    stop_all(SIGTERM, 2);
    return Unavailable("the coordinator did not start; its log:\n" + tail);
  }
  for (int i = 0; i < job.NumServers(); ++i) {
    std::string name = "server-" + std::to_string(i);
    std::vector<std::string> args = {"server", "--job",           job_path,
                                     "--id",   std::to_string(i), "--coordinator",
                                     endpoint, "--stats-file",    run_dir + "/stats/" + name + ".json"};
    args = append(args, {"--checkpoint-dir", checkpoint_dir});
    if (resume) args = append(args, {"--resume", run_dir + "/resume.json"});
    if (wan) args = append(append(args, {"--bind", wan->server_bind(i)}), routes_for(job.RegionOfServer(i).name));
    GD_ASSIGN_OR_RETURN(auto sec, security_args(name, "server", i));
    GD_RETURN_IF_ERROR(start_child(name, append(args, sec), job.RegionOfServer(i).name));
  }
  // Replicated jobs: each shard's backup, in the next region (job.h). With
  // emulated WAN links it binds an endpoint the emulator routes to, so that
  // replication crosses the link between the primary's region and its own
  // (and is cut with it).
  for (int i = 0; i < job.NumServers() && job.replication.backups > 0; ++i) {
    std::string name = "backup-" + std::to_string(i);
    const RegionSpec& region = job.RegionOfBackup(i);
    std::vector<std::string> args = {"server",        "--backup",
                                     "--job",         job_path,
                                     "--id",          std::to_string(i),
                                     "--coordinator", endpoint,
                                     "--stats-file",  run_dir + "/stats/" + name + ".json",
                                     "--bind",        wan ? wan->backup_bind(i) : "tcp://" + region.host + ":*"};
    args = append(args, {"--checkpoint-dir", checkpoint_dir});
    if (wan) args = append(args, routes_for(region.name));
    GD_ASSIGN_OR_RETURN(auto sec, security_args(name, "server", i));  // a backup joins with its shard's token
    GD_RETURN_IF_ERROR(start_child(name, append(args, sec), region.name));
  }
  for (int i = 0; i < job.NumWorkers(); ++i) {
    std::string name = "worker-" + std::to_string(i);
    std::vector<std::string> args = {"worker", "--job",           job_path,
                                     "--id",   std::to_string(i), "--coordinator",
                                     endpoint, "--stats-file",    run_dir + "/stats/" + name + ".json"};
    if (i == 0) {
      args.push_back("--snapshot-dir");
      args.push_back(run_dir + "/snapshots");
    }
    GD_ASSIGN_OR_RETURN(auto sec, security_args(name, "worker", i));
    args = append(args, sec);
    GD_RETURN_IF_ERROR(
        start_child(name, append(args, routes_for(job.RegionOfWorker(i).name)), job.RegionOfWorker(i).name));
  }
  GD_ASSIGN_OR_RETURN(auto eval_sec, security_args("evaluator", "evaluator", 0));
  GD_RETURN_IF_ERROR(start_child(
      "evaluator",
      append(append({"eval", "--job", job_path, "--coordinator", endpoint, "--snapshot-dir", run_dir + "/snapshots",
                     "--result-file", run_dir + "/result.json", "--dump-params", run_dir + "/final_params.bin"},
                    routes_for(job.CoordinatorRegion().name)),
             eval_sec),
      job.CoordinatorRegion().name));

  {
    json pids = json::object();
    for (auto& c : children) pids[c->name()] = c->pid();
    GD_RETURN_IF_ERROR(WriteFileAtomic(run_dir + "/pids.json", pids.dump(2), /*durable=*/false));
  }
  zmq::context_t ctx(1);
  GD_ASSIGN_OR_RETURN(auto probe_security, ProbeSecurity(job, secret, key_path));
  StatusProbe probe(ctx, job, endpoint, probe_security.first, probe_security.second);
  std::optional<wire::StatusReply> last_status;
  std::string outcome = "finished";
  std::string failure;
  json faults = json::array();
  // Shards restarted in place, and how long until each applied updates again.
  constexpr int kMaxRestarts = 3;
  std::map<std::string, int> restarts;
  json recoveries = json::array();
  struct Recovering {
    size_t index = 0;  // into recoveries
    std::chrono::steady_clock::time_point restarted{};
    int64_t baseline = -1;  // updates_applied when first seen live again
  };
  std::map<std::string, Recovering> recovering;
  std::map<std::string, std::chrono::steady_clock::time_point> killed_at;  // by --kill
  std::map<std::string, double> killed_unix;                               // the same, wall clock
  json link_events = json::array();
  double rate = 0;
  int64_t prev_samples = -1;
  double prev_t = 0;
  std::optional<std::chrono::steady_clock::time_point> evaluator_done_at;
  bool announced_training = false;
  std::optional<std::chrono::steady_clock::time_point> training_started_at;
  auto training_seconds_now = [&]() {
    return training_started_at
               ? std::chrono::duration<double>(std::chrono::steady_clock::now() - *training_started_at).count()
               : 0.0;
  };
  // Starts the dead child `dead` again with `args` in its slot, records the
  // recovery and says so (`how` follows "NAME <exit> after T s of
  // training"). `dead` and its exit info are gone once this returns OK.
  auto restart = [&](Child* dead, const std::vector<std::string>& args, const std::string& region,
                     const std::string& how) -> Status {
    const std::string n = dead->name();
    const std::string exit = dead->exit()->Describe();
    const double t = training_seconds_now();
    const int k = ++restarts[n];
    GD_ASSIGN_OR_RETURN(auto fresh, make_child(n, args, region, n + ".restart-" + std::to_string(k)));
    progress.Say("geodesic: " + (n == "coordinator" ? std::string("the coordinator") : n) + " " + exit + " after " +
                 Fmt("%.1f", t) + " s of training" + how);
    recoveries.push_back(
        {{"target", n}, {"exit", exit}, {"died_at_training_seconds", t}, {"restart", k}, {"log", fresh->log_file()}});
    recovering[n] = {recoveries.size() - 1, std::chrono::steady_clock::now(), -1};
    for (auto& slot : children)
      if (slot.get() == dead) slot = std::move(fresh);
    return Status::Ok();
  };
  std::optional<std::pair<std::string, std::chrono::steady_clock::time_point>> premature_exit;

  while (true) {
    if (stop->load()) {
      outcome = "interrupted";
      progress.Say("geodesic: interrupted; stopping " + std::to_string(children.size()) + " processes");
      stop_all(SIGTERM, 5);
      break;
    }
    // Reap first, then judge: the evaluator's clean exit tells a server's
    // clean exit (the job finished) from a premature one.
    std::vector<Child*> ended;
    for (auto& c : children) {
      bool was_running = c->running();
      if (c->Poll() && was_running) ended.push_back(c.get());
    }
    std::stable_partition(ended.begin(), ended.end(), [](Child* c) { return c->name() == "evaluator"; });
    for (Child* c : ended) {
      const ExitInfo& e = *c->exit();
      const std::string& n = c->name();
      if (n.rfind("worker-", 0) == 0) {
        if (!e.ok() && options.restart_workers && e.signal && restarts[n] < kMaxRestarts && !evaluator_done_at) {
          auto [args, region] = started_as[n];
          const std::string what = n + " " + e.Describe();
          Status st = restart(c, args, region, "; restarted, it rejoins at the live workers' clock");
          if (!st.ok())
            progress.Say("geodesic: " + what + " and could not be restarted (" + st.message() +
                         "); the job continues without it");
        } else if (!e.ok()) {
          progress.Say("geodesic: " + n + " " + e.Describe() + "; the job continues without it" +
                       (e.signal ? "" : "; its log ends:\n" + c->LogTail(8)));
        }
      } else if (n == "evaluator") {
        if (!e.ok()) {
          outcome = "failed";
          failure = "the evaluator " + e.Describe();
          progress.Say("geodesic: " + failure + "; its log ends:\n" + c->LogTail(12));
        } else {
          evaluator_done_at = std::chrono::steady_clock::now();
        }
      } else if (!evaluator_done_at && !e.ok() && n == "coordinator" && restarts[n] < kMaxRestarts) {
        // The coordinator restarts in place from its saved state; members
        // reconnect to the same endpoint and carry on. Training does not
        // need it in the meantime, only membership changes do. In secured
        // jobs it keeps its keypair (--keypair-file) and the saved state
        // has the members' keys (docs/security.md).
        auto [args, region] = started_as[n];
        for (size_t i = 0; i + 1 < args.size(); ++i)
          if (args[i] == "--bind") args[i + 1] = endpoint;
        const std::string what = n + " " + e.Describe();
        Status st = restart(c, args, region, "; restarted from its saved state on " + endpoint);
        if (!st.ok()) {
          outcome = "failed";
          failure = what + " and could not be restarted: " + st.message();
          progress.Say("geodesic: " + failure);
        }
      } else if (!evaluator_done_at && !e.ok() && n.rfind("backup-", 0) == 0 && training_started_at) {
        // The primary goes on alone (degraded) until the job ends.
        progress.Say("geodesic: " + n + " " + e.Describe() + "; its primary continues without a backup");
      } else if (!evaluator_done_at && !e.ok() && n.rfind("server-", 0) == 0 && job.replication.backups > 0 &&
                 training_started_at) {
        // Its backup takes over once the primary's lease expires; nothing
        // restarts. Timed from the kill (if injected) to the promoted
        // backup's first applied update.
        double t = training_seconds_now();
        auto since = std::chrono::steady_clock::now();
        if (auto k = killed_at.find(n); k != killed_at.end()) since = k->second;
        progress.Say("geodesic: " + n + " " + e.Describe() + " after " + Fmt("%.1f", t) +
                     " s of training; its backup takes over");
        recoveries.push_back(
            {{"target", n}, {"exit", e.Describe()}, {"died_at_training_seconds", t}, {"failover", true}});
        recovering[n] = {recoveries.size() - 1, since, -1};
      } else if (!evaluator_done_at && !e.ok() && n.rfind("server-", 0) == 0 && restarts[n] < kMaxRestarts &&
                 job.replication.backups == 0) {
        // A shard that dies is restarted in place from its newest checkpoint,
        // on the endpoint it held, so that workers reconnect by themselves.
        const int id = std::stoi(n.substr(7));
        std::string endpoint = wan ? wan->server_bind(id) : "";
        if (last_status)
          for (const auto& sv : last_status->servers())
            if (sv.id() == id) endpoint = sv.endpoint();
        auto [args, region] = started_as[n];
        if (endpoint.empty()) {
          outcome = "failed";
          failure = n + " " + e.Describe() + " before its endpoint was known";
          progress.Say("geodesic: " + failure);
          continue;
        }
        if (!wan) args.insert(args.end(), {"--bind", endpoint});
        args.push_back("--recover");
        const std::string what = n + " " + e.Describe();
        Status st = restart(c, args, region, "; restarted from its newest checkpoint on " + endpoint);
        if (!st.ok()) {
          outcome = "failed";
          failure = what + " and could not be restarted: " + st.message();
          progress.Say("geodesic: " + failure);
        }
      } else if (!evaluator_done_at) {
        if (e.ok()) {
          // A clean exit means it saw the job finish; the evaluator, which
          // finished it, may simply not have been reaped yet.
          if (!premature_exit) premature_exit = {n, std::chrono::steady_clock::now()};
          continue;
        }
        outcome = "failed";
        failure = n + " " + e.Describe() + " before the job finished";
        progress.Say("geodesic: " + failure + "; its log ends:\n" + c->LogTail(12));
      }
    }
    if (premature_exit && !evaluator_done_at && outcome != "failed" &&
        std::chrono::steady_clock::now() - premature_exit->second > std::chrono::seconds(5)) {
      outcome = "failed";
      failure = premature_exit->first + " exited before the job finished";
      progress.Say("geodesic: " + failure);
    }
    if (outcome == "failed") {
      stop_all(SIGTERM, 5);
      break;
    }
    bool all_ended = true;
    for (auto& c : children) all_ended &= !c->running();
    if (all_ended) break;
    if (evaluator_done_at && std::chrono::steady_clock::now() - *evaluator_done_at >
                                 std::chrono::milliseconds(2 * job.membership.lease_ms + 5000)) {
      // Servers and the coordinator should have seen the job finish by now.
      stop_all(SIGTERM, 5);
      break;
    }

    if (auto st = probe.Poll()) {
      last_status = *st;
      int64_t samples = 0;
      for (const auto& w : st->workers()) samples += w.progress().samples();
      double t = st->training_seconds();
      if (prev_samples >= 0 && t > prev_t + 0.5) {
        double inst = (samples - prev_samples) / (t - prev_t);
        rate = rate == 0 ? inst : 0.7 * rate + 0.3 * inst;
        prev_samples = samples;
        prev_t = t;
      } else if (prev_samples < 0) {
        prev_samples = samples;
        prev_t = t;
      }
      // A restarted process is back once a counter of its own moves: the
      // first sightings may still be the dead process's last report, and
      // the new one starts lower (a shard from its checkpoint's count, a
      // worker from zero steps), so wait for a rise above the lowest seen.
      for (auto it = recovering.begin(); it != recovering.end();) {
        const std::string& n = it->first;
        const double since =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second.restarted).count();
        std::optional<int64_t> counter;
        const char* key = "seconds_to_first_update";
        const char* what = " applies updates again, ";
        if (n == "coordinator") {
          // Its uptime says whether the restarted process answered.
          key = "seconds_to_first_status";
          what = " answers again, ";
          it->second.baseline = 0;
          if (st->uptime_seconds() <= since + 0.5) counter = 1;
        } else if (n.rfind("worker-", 0) == 0) {
          key = "seconds_to_first_step";
          what = " trains again, ";
          for (const auto& w : st->workers())
            if (w.id() == std::stoi(n.substr(7)) && w.live()) counter = w.progress().steps();
        } else if (job.replication.backups > 0) {
          // A failover: the promoted backup says when it took over.
          what = "'s backup applies updates, ";
          it->second.baseline = 0;
          for (const auto& sv : st->servers())
            if (sv.id() == std::stoi(n.substr(7)) && sv.live() && sv.progress().promoted())
              counter = static_cast<int64_t>(sv.progress().updates_applied() - sv.progress().updates_at_promotion());
        } else {
          for (const auto& sv : st->servers())
            if (sv.id() == std::stoi(n.substr(7)) && sv.live())
              counter = static_cast<int64_t>(sv.progress().updates_applied());
        }
        bool back = false;
        if (counter && (it->second.baseline < 0 || *counter < it->second.baseline)) {
          it->second.baseline = *counter;
        } else if (counter && *counter > it->second.baseline) {
          recoveries[it->second.index][key] = since;
          progress.Say("geodesic: " + n + what + Fmt("%.1f", since) + " s after its restart");
          back = true;
        }
        it = back ? recovering.erase(it) : std::next(it);
      }
      if (st->training_started()) {
        if (!announced_training) {
          announced_training = true;
          // Faults are timed from here, on the wall clock (the coordinator's
          // training time stops when the workers do).
          training_started_at =
              std::chrono::steady_clock::now() -
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(t));
          progress.Say("geodesic: all processes joined; training");
        }
        if (!evaluator_done_at) progress.Show(RenderProgress(*st, rate));
      }
    }
    if (training_started_at) {
      double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - *training_started_at).count();
      for (auto& k : kills) {
        if (k.done || t < k.after_s) continue;
        k.done = true;
        for (auto& c : children)
          if (c->name() == k.target && c->running()) {
            c->Signal(k.signal);
            // A failover is timed from the first fault (a STOP, not its CONT).
            killed_at.emplace(k.target, std::chrono::steady_clock::now());
            killed_unix.emplace(
                k.target, std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
            progress.Say("geodesic: fault injection: " + k.signal_name + " to " + k.target + " after " +
                         Fmt("%.1f", t) + " s of training");
            faults.push_back({{"target", k.target}, {"signal", k.signal_name}, {"at_training_seconds", t}});
          }
      }
    }
    if (wan || netns) {
      auto apply = [&](const std::string& action, const std::string& a, const std::string& b, const char* why) {
        Status st = netns ? (action == "cut" ? netns->Cut(a, b) : netns->Heal(a, b))
                          : (action == "cut" ? wan->Cut(a, b) : wan->Heal(a, b));
        double t = training_seconds_now();
        if (!st.ok()) {
          progress.Say("geodesic: " + action + " " + a + " " + b + ": " + st.message());
          return;
        }
        progress.Say("geodesic: link " + a + " <-> " + b + (action == "cut" ? " cut" : " healed") + " (" + why +
                     ") after " + Fmt("%.1f", t) + " s of training");
        link_events.push_back({{"action", action}, {"regions", {a, b}}, {"at_training_seconds", t}, {"by", why}});
      };
      if (training_started_at) {
        double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - *training_started_at).count();
        for (auto& c : cuts) {
          if (!c.cut && t >= c.after_s) c.cut = true, apply("cut", c.a, c.b, "--cut");
          if (c.cut && !c.healed && t >= c.after_s + c.for_s) c.healed = true, apply("heal", c.a, c.b, "--cut");
        }
      }
      std::error_code ec;
      std::vector<std::filesystem::path> requests;
      for (const auto& e : std::filesystem::directory_iterator(run_dir + "/wan-control", ec))
        requests.push_back(e.path());
      std::sort(requests.begin(), requests.end());
      for (const auto& r : requests) {
        auto text = ReadFile(r.string());
        std::filesystem::remove(r, ec);
        std::istringstream in(text.ok() ? *text : "");
        std::string action, a, b;
        if (in >> action >> a >> b) apply(action, a, b, "geodesic wan");
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  progress.Clear();

  // ---- summary ----
  double total_wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - launch_start).count();
  json summary;
  summary["job"] = job.name;
  summary["run_dir"] = run_dir;
  summary["status"] = outcome;
  if (!failure.empty()) summary["failure"] = failure;
  json result = ReadJson(run_dir + "/result.json");
  json coord = ReadJson(run_dir + "/stats/coordinator.json");
  double wall = coord.is_object() && coord.contains("training_seconds") ? coord["training_seconds"].get<double>() : 0;
  summary["test_accuracy"] = result.is_object() && result.contains("test_accuracy") ? result["test_accuracy"] : json();
  summary["wall_seconds"] = wall;
  summary["total_wall_seconds"] = total_wall;
  if (job.wan.replan)
    summary["replans"] = coord.is_object() && coord.contains("replans") ? coord["replans"] : json::array();
  summary["accuracy_curve"] =
      result.is_object() && result.contains("accuracy_curve") ? result["accuracy_curve"] : json::array();
  summary["target_accuracy"] = job.eval.target_accuracy;
  summary["seconds_to_target"] =
      result.is_object() && result.contains("seconds_to_target") ? result["seconds_to_target"] : json();
  json sent = json::object(), received = json::object(), breakdown = json::object(), procs = json::array();
  int64_t samples = 0, worker_steps = 0, push_bytes = 0, pull_bytes = 0;
  IntHistogram staleness;
  json refused = json::object();
  // Passive link estimates from the workers' own pull replies, per (server
  // region -> worker region): the mean over the region's workers of each
  // one's reply throughput (one flow's share of the path) and the least RTT.
  std::map<std::pair<std::string, std::string>, std::tuple<double, double, int, uint64_t>> passive;
  // Replicated jobs: each shard's last serving process is its promoted
  // backup, if any, else its primary; only those count for the shard.
  std::set<int> promoted;
  for (int i = 0; i < job.NumServers() && job.replication.backups > 0; ++i) {
    json b = ReadJson(run_dir + "/stats/backup-" + std::to_string(i) + ".json");  // null if it died before writing
    if (b.is_object() && b.value("promoted", false)) promoted.insert(i);
  }
  auto serving = [&](const std::string& name, const json& stats) {
    const int id = stats.value("id", -1);
    return name.rfind("backup-", 0) == 0 ? promoted.count(id) > 0 : promoted.count(id) == 0;
  };
  uint64_t updates_taken = 0, duplicates = 0;
  std::map<int, uint64_t> taken_by_worker;
  for (auto& c : children) {
    json stats = ReadJson(run_dir + "/stats/" + c->name() + ".json");
    json p = {{"name", c->name()}, {"pid", c->pid()}, {"log", c->log_file()}};
    if (c->exit()) {
      p["exit"] = c->exit()->Describe();
      p["cpu_seconds"] = c->exit()->cpu_seconds;
      p["exit_code"] = c->exit()->signal ? json() : json(c->exit()->code);
      p["signal"] = c->exit()->signal ? json(std::string(sigabbrev_np(c->exit()->signal))) : json();
    }
    procs.push_back(p);
    if (!stats.is_object()) continue;
    sent[c->name()] = stats.value("bytes_sent", 0);
    received[c->name()] = stats.value("bytes_received", 0);
    if (stats.value("role", "") == "worker") {
      const std::string& wr = job.RegionOfWorker(stats.value("id", 0)).name;
      const json links_from = stats.value("links_from_servers", json::object());
      for (auto& [sr, e] : links_from.items()) {
        auto& [rtt, mbit, n, link_samples] = passive[{sr, wr}];
        double r = e.value("min_rtt_ms", 0.0);
        rtt = n == 0 ? r : std::min(rtt, r);
        mbit += e.value("mbit", 0.0);
        link_samples += e.value("samples", uint64_t{0});
        ++n;
      }
      samples += stats.value("samples", int64_t{0});
      worker_steps += stats.value("steps", int64_t{0});
      push_bytes += stats.value("bytes_sent", int64_t{0});
      pull_bytes += stats.value("bytes_received", int64_t{0});
      double cs = stats.value("compute_seconds", 0.0), ns = stats.value("comm_seconds", 0.0),
             ws = stats.value("wait_seconds", 0.0);
      double tot = cs + ns + ws;
      breakdown[c->name()] = {{"compute", tot > 0 ? cs / tot : 0},
                              {"communication", tot > 0 ? ns / tot : 0},
                              {"staleness_wait", tot > 0 ? ws / tot : 0},
                              {"seconds", {{"compute", cs}, {"communication", ns}, {"staleness_wait", ws}}},
                              {"steps", stats.value("steps", int64_t{0})}};
    }
    if (stats.value("role", "") == "server" && serving(c->name(), stats)) {
      updates_taken += stats.value("updates_taken", uint64_t{0});
      const json by_worker = stats.value("taken_by_worker", json::object());
      for (auto& [w, n] : by_worker.items()) taken_by_worker[std::stoi(w)] += n.get<uint64_t>();
      duplicates += stats.value("duplicates", uint64_t{0});
      if (stats.contains("staleness_histogram"))
        for (auto& [k, v] : stats["staleness_histogram"].items()) staleness.Add(std::stoll(k), v.get<uint64_t>());
      if (stats.contains("refused_by_reason") && !stats["refused_by_reason"].empty())
        refused[c->name()] = stats["refused_by_reason"];
    }
  }
  int64_t total_sent = 0, total_received = 0;
  for (auto& [k, v] : sent.items()) total_sent += v.get<int64_t>();
  for (auto& [k, v] : received.items()) total_received += v.get<int64_t>();
  sent["total"] = total_sent;
  received["total"] = total_received;
  summary["samples"] = samples;
  summary["samples_per_second"] = wall > 0 ? samples / wall : 0.0;
  // What one worker step costs on the wire, both directions (headers included).
  if (worker_steps > 0)
    summary["bytes_per_step"] = {{"push", static_cast<double>(push_bytes) / worker_steps},
                                 {"pull", static_cast<double>(pull_bytes) / worker_steps},
                                 {"total", static_cast<double>(push_bytes + pull_bytes) / worker_steps}};
  summary["compression"] = {{"push", job.compression.push},
                            {"pull", job.compression.pull},
                            {"error_feedback", job.compression.error_feedback},
                            {"momentum_correction", job.compression.momentum_correction}};
  summary["bytes_sent"] = sent;
  summary["bytes_received"] = received;
  json hist = json::object();
  for (const auto& [k, v] : staleness.NonZero()) hist[std::to_string(k)] = v;
  summary["staleness_histogram"] = hist;
  summary["staleness_mean"] = staleness.Mean();
  summary["staleness_max"] = staleness.max();
  summary["step_time_breakdown"] = breakdown;
  summary["messages_refused"] = refused;
  summary["faults_injected"] = faults;
  // A failover's time, exactly: from the kill to the promoted backup's own
  // record of its first update (the status probe above sees it later).
  for (auto& rec : recoveries) {
    if (!rec.value("failover", false)) continue;
    const std::string target = rec["target"];
    auto k = killed_unix.find(target);
    json b = ReadJson(run_dir + "/stats/backup-" + target.substr(7) + ".json");
    if (k == killed_unix.end() || !b.is_object() || !b.contains("first_update_unix")) continue;
    if (rec.contains("seconds_to_first_update")) rec["seconds_to_first_update_seen"] = rec["seconds_to_first_update"];
    rec["seconds_to_first_update"] = b["first_update_unix"].get<double>() - k->second;
  }
  summary["recoveries"] = recoveries;
  // Every pushed chunk a worker process saw acknowledged (applied or
  // duplicate), from the push ledgers, which survive a killed process (the
  // stats files do not: a restarted worker rewrites its predecessor's), and
  // every chunk the shards' last serving processes took: equal when no
  // acknowledged update was lost, none was applied twice, and no worker
  // died with a push in flight (push_accounting has the difference).
  json accounting = PushAccounting(run_dir + "/stats", taken_by_worker);
  summary["push_accounting"] = accounting;
  summary["pushes_acknowledged"] = accounting["acknowledged"];
  summary["updates_taken"] = updates_taken;
  summary["duplicates_answered"] = duplicates;
  summary["replication"] = {{"backups", job.replication.backups},
                            {"promoted", json(std::vector<int>(promoted.begin(), promoted.end()))}};
  summary["processes"] = procs;
  summary["staleness_bound"] = job.training.staleness_bound;
  json passive_links = json::array();
  for (const auto& [pair, v] : passive) {
    const auto& [rtt, mbit, n, samples] = v;
    passive_links.push_back({{"from", pair.first},
                             {"to", pair.second},
                             {"min_rtt_ms", rtt},
                             {"mbit_per_worker", samples > 0 ? json(mbit / n) : json()},
                             {"workers", n},
                             {"samples", samples}});
  }
  summary["passive_links"] = passive_links;
  if (coord.is_object() && coord.contains("plan")) summary["plan"] = coord["plan"];
  if (wan || netns) {
    json links = json::array();
    json traffic = json::array();
    if (wan) {
      traffic = wan->Traffic();
    } else if (auto t = netns->Traffic(); t.ok()) {
      traffic = *t;
    } else {
      GD_LOG(WARNING) << "bytes per link: " << t.status();
    }
    for (const LinkSpec& l : job.wan.links) {
      json rec = {{"from", l.from},
                  {"to", l.to},
                  {"delay_ms", l.delay_ms},
                  {"jitter_ms", l.jitter_ms},
                  {"bandwidth_mbit", l.bandwidth_mbit}};
      for (const auto& p : link_probes)
        if (p["from"] == l.from && p["to"] == l.to) {
          rec["probed_rtt_ms"] = p.value("probed_rtt_ms", json());
          rec["probed_mbit"] = p.value("probed_mbit", json());
        }
      for (const auto& t : traffic)
        if (t["from"] == l.from && t["to"] == l.to) {
          rec["bytes"] = t["bytes"];
          rec["mean_mbit_while_training"] = wall > 0 ? t["bytes"].get<double>() * 8 / 1e6 / wall : 0.0;
        }
      links.push_back(rec);
    }
    summary["links"] = links;
    summary["link_events"] = link_events;
  }

  std::string text = summary.dump(2);
  GD_RETURN_IF_ERROR(WriteFileAtomic(run_dir + "/summary.json", text));
  if (!options.summary_file.empty()) {
    auto parent = std::filesystem::path(options.summary_file).parent_path();
    if (!parent.empty()) GD_RETURN_IF_ERROR(MakeDirs(parent.string()));
    GD_RETURN_IF_ERROR(WriteFileAtomic(options.summary_file, text));
  }

  std::string where = options.summary_file.empty() ? run_dir + "/summary.json" : options.summary_file;
  if (summary["test_accuracy"].is_number()) {
    double acc = summary["test_accuracy"].get<double>();
    std::string line = "geodesic: " + outcome + ": test accuracy " + Fmt("%.4f", acc) + " after " + Fmt("%.1f", wall) +
                       " s of training (" + Fmt("%.0f", wall > 0 ? samples / wall : 0) + " samples/s, " +
                       std::to_string(samples) + " samples)";
    if (summary["seconds_to_target"].is_number())
      line += "; reached " + Fmt("%.2f", job.eval.target_accuracy) + " at " +
              Fmt("%.1f", summary["seconds_to_target"].get<double>()) + " s";
    progress.Say(line);
  } else {
    progress.Say("geodesic: " + outcome + (failure.empty() ? "" : ": " + failure) + "; no final accuracy");
  }
  progress.Say("geodesic: summary written to " + where);
  if (outcome == "interrupted") return 130;
  // A model without a network (synthetic, for benchmarks) has no accuracy.
  bool evaluated = summary["test_accuracy"].is_number() || job.model.name == ModelKind::kSynthetic;
  return outcome == "finished" && evaluated ? 0 : 1;
}

StatusOr<std::string> QueryStatus(const std::string& run_dir, int timeout_ms) {
  GD_ASSIGN_OR_RETURN(std::string endpoint, ReadFile(run_dir + "/coordinator.endpoint"));
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(run_dir + "/job.yaml"));
  std::string secret;
  if (job.security.mode == SecurityMode::kCurve) {
    // Whoever may read the job's secret may ask; a client token lives a minute.
    GD_ASSIGN_OR_RETURN(secret, transport::LoadSecret(job.security.secret_file.empty() ? run_dir + "/secret"
                                                                                       : job.security.secret_file));
  }
  GD_ASSIGN_OR_RETURN(auto security, ProbeSecurity(job, secret, run_dir + "/coordinator.key", 60));
  zmq::context_t ctx(1);
  StatusProbe probe(ctx, job, endpoint, security.first, security.second);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto st = probe.Poll()) {
      std::string out;
      google::protobuf::util::JsonPrintOptions o;
      o.add_whitespace = true;
      o.always_print_primitive_fields = true;
      (void)google::protobuf::util::MessageToJsonString(*st, &out, o);
      return out;
    }
    probe.Wait(50);
  }
  return Unavailable("no answer from the coordinator at " + endpoint + " within " + std::to_string(timeout_ms) + " ms");
}

}  // namespace geodesic::deploy
