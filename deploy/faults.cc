#include "deploy/faults.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "common/clock.h"
#include "common/files.h"
#include "common/format.h"
#include "deploy/process_id.h"

namespace geodesic::deploy {
namespace {

// "KILL", "SIGTERM", ... into the signal and its SIG name.
StatusOr<std::pair<int, std::string>> ParseSignal(const std::string& spec, const std::string& name) {
  static const std::map<std::string, int> kSignals = {
      {"KILL", SIGKILL}, {"TERM", SIGTERM}, {"STOP", SIGSTOP}, {"CONT", SIGCONT}, {"INT", SIGINT}};
  auto it = kSignals.find(name.rfind("SIG", 0) == 0 ? name.substr(3) : name);
  if (it == kSignals.end())
    return InvalidArgument("--kill '" + spec + "': signal must be KILL, TERM, INT, STOP or CONT");
  return std::pair{it->second, "SIG" + it->first};
}

int CountOfRole(const std::string& role, const JobSpec& job) {
  return role == "worker"        ? job.NumWorkers()
         : role == "server"      ? job.NumServers()
         : role == "backup"      ? job.NumServers() * job.replication.backups
         : role == "coordinator" ? 1
         : role == "aggregator"  ? static_cast<int>(job.regions.size())
                                 : 0;
}

StatusOr<Kill> ParseKill(const std::string& s, const JobSpec& job) {
  auto colon = s.find(':'), at = s.find('@');
  if (colon == std::string::npos || at == std::string::npos || at < colon)
    return InvalidArgument("--kill '" + s + "': expected ROLE:ID@SECONDS[:SIGNAL], e.g. worker:2@5");
  std::string role = s.substr(0, colon);
  auto sig_colon = s.find(':', at);
  std::string when = s.substr(at + 1, sig_colon == std::string::npos ? std::string::npos : sig_colon - at - 1);
  Kill k;
  if (sig_colon != std::string::npos) {
    GD_ASSIGN_OR_RETURN(auto sig, ParseSignal(s, s.substr(sig_colon + 1)));
    k.signal = sig.first;
    k.signal_name = sig.second;
  }
  int id;
  try {
    id = std::stoi(s.substr(colon + 1, at - colon - 1));
    k.after_s = std::stod(when);
  } catch (const std::exception&) {
    return InvalidArgument("--kill '" + s + "': ID and SECONDS must be numbers");
  }
  int count = CountOfRole(role, job);
  if (count == 0)
    return InvalidArgument("--kill '" + s +
                           "': role must be worker, server, coordinator, (replicated jobs) backup or aggregator");
  if (id < 0 || id >= count || (role == "aggregator" && !job.regions[id].aggregator))
    return InvalidArgument("--kill '" + s + "': no " + role + " " + std::to_string(id) +
                           (role == "aggregator" ? " (the index of a region with aggregator: true)" : ""));
  const ProcessId who = role == "coordinator"  ? ProcessId::Coordinator()
                        : role == "server"     ? ProcessId::Server(id)
                        : role == "backup"     ? ProcessId::Backup(id)
                        : role == "aggregator" ? ProcessId::Aggregator(id)
                                               : ProcessId::Worker(id);
  k.target = who.Name();
  return k;
}

StatusOr<Cut> ParseCut(const std::string& s, const JobSpec& job) {
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
  if (job.wan.emulation != WanEmulation::kProxy && job.wan.emulation != WanEmulation::kNetns)
    return InvalidArgument("--cut needs emulated links (wan.emulation: proxy or netns, and wan.links)");
  if (!job.Link(c.a, c.b) && !job.Link(c.b, c.a))
    return InvalidArgument("--cut '" + s + "': no link is declared between " + c.a + " and " + c.b);
  return c;
}

}  // namespace

template <typename T>
StatusOr<std::vector<T>> ParseEach(const std::vector<std::string>& specs, const JobSpec& job,
                                   StatusOr<T> (*parse)(const std::string&, const JobSpec&)) {
  std::vector<T> out;
  for (const auto& s : specs) {
    GD_ASSIGN_OR_RETURN(T one, parse(s, job));
    out.push_back(one);
  }
  return out;
}

StatusOr<std::vector<Kill>> ParseKills(const std::vector<std::string>& specs, const JobSpec& job) {
  return ParseEach(specs, job, &ParseKill);
}

StatusOr<std::vector<Join>> ParseJoins(const std::vector<std::string>& specs, const JobSpec& job) {
  std::vector<Join> out;
  for (const std::string& s : specs) {
    Join j;
    char tail = 0;
    if (std::sscanf(s.c_str(), "worker:%d@%lf%c", &j.id, &j.after_s, &tail) != 2 || j.after_s < 0)
      return InvalidArgument("--join '" + s + "': expected worker:ID@SECONDS, e.g. worker:4@10");
    if (!job.membership.elastic)
      return InvalidArgument("--join '" + s + "': the job is not elastic (membership.elastic)");
    if (j.id < 0 || j.id >= job.NumWorkers() || job.IsInitialWorker(j.id))
      return InvalidArgument("--join '" + s + "': worker " + std::to_string(j.id) +
                             " is not one of the ids kept for workers that join later (regions' max_workers)");
    out.push_back(j);
  }
  return out;
}

StatusOr<std::vector<Cut>> ParseCuts(const std::vector<std::string>& specs, const JobSpec& job) {
  return ParseEach(specs, job, &ParseCut);
}

void TrainingClock::Start(double training_seconds) {
  start_ = std::chrono::steady_clock::now() - std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                  std::chrono::duration<double>(training_seconds));
}

double TrainingClock::Seconds() const {
  return start_ ? std::chrono::duration<double>(std::chrono::steady_clock::now() - *start_).count() : 0.0;
}

void FaultInjector::Tick(const TrainingClock& clock, const Supervisor& children, ProgressLine& progress) {
  if (clock.started()) InjectKills(clock.Seconds(), children, progress);
  if (!wan_ && !netns_) return;
  if (clock.started()) {
    double t = clock.Seconds();
    for (auto& c : cuts_) {
      if (!c.cut && t >= c.after_s) c.cut = true, ApplyLink("cut", c.a, c.b, "--cut", clock, progress);
      if (c.cut && !c.healed && t >= c.after_s + c.for_s)
        c.healed = true, ApplyLink("heal", c.a, c.b, "--cut", clock, progress);
    }
  }
  ApplyRequests(clock, progress);
}

void FaultInjector::InjectKills(double t, const Supervisor& children, ProgressLine& progress) {
  for (auto& k : kills_) {
    if (k.done || t < k.after_s) continue;
    k.done = true;
    Child* c = children.Find(k.target);
    if (!c || !c->running()) continue;
    c->Signal(k.signal);
    // A failover is timed from the first fault (a STOP, not its CONT).
    killed_at_.emplace(k.target, std::chrono::steady_clock::now());
    killed_unix_.emplace(k.target, UnixSeconds());
    progress.Say("geodesic: fault injection: " + k.signal_name + " to " + k.target + " after " + Fmt("%.1f", t) +
                 " s of training");
    faults_.push_back({{"target", k.target}, {"signal", k.signal_name}, {"at_training_seconds", t}});
  }
}

void FaultInjector::ApplyLink(const std::string& action, const std::string& a, const std::string& b, const char* why,
                              const TrainingClock& clock, ProgressLine& progress) {
  Status st = netns_ ? (action == "cut" ? netns_->Cut(a, b) : netns_->Heal(a, b))
                     : (action == "cut" ? wan_->Cut(a, b) : wan_->Heal(a, b));
  double t = clock.Seconds();
  if (!st.ok()) {
    progress.Say("geodesic: " + action + " " + a + " " + b + ": " + st.message());
    return;
  }
  progress.Say("geodesic: link " + a + " <-> " + b + (action == "cut" ? " cut" : " healed") + " (" + why + ") after " +
               Fmt("%.1f", t) + " s of training");
  link_events_.push_back({{"action", action}, {"regions", {a, b}}, {"at_training_seconds", t}, {"by", why}});
}

// `geodesic wan cut|heal` requests, oldest first (ControlLink names them so).
void FaultInjector::ApplyRequests(const TrainingClock& clock, ProgressLine& progress) {
  std::error_code ec;
  std::vector<std::filesystem::path> requests;
  // A request still being written is left for its writer: taking it made
  // `geodesic wan` fail its rename.
  for (const auto& e : std::filesystem::directory_iterator(wan_control_dir_, ec))
    if (!IsAtomicWriteTemporary(e.path().string())) requests.push_back(e.path());
  std::sort(requests.begin(), requests.end());
  for (const auto& r : requests) {
    auto text = ReadFile(r.string());
    std::filesystem::remove(r, ec);
    std::istringstream in(text.ok() ? *text : "");
    std::string action, a, b;
    if (in >> action >> a >> b) ApplyLink(action, a, b, "geodesic wan", clock, progress);
  }
}

std::optional<std::chrono::steady_clock::time_point> FaultInjector::KilledAt(const std::string& target) const {
  auto it = killed_at_.find(target);
  if (it == killed_at_.end()) return std::nullopt;
  return it->second;
}

std::optional<double> FaultInjector::KilledUnix(const std::string& target) const {
  auto it = killed_unix_.find(target);
  if (it == killed_unix_.end()) return std::nullopt;
  return it->second;
}

}  // namespace geodesic::deploy
