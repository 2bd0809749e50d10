#include "deploy/emulated_wan.h"

#include <arpa/inet.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>

#include "common/log.h"
#include "wan/probe.h"

namespace geodesic::deploy {

using json = nlohmann::json;

StatusOr<PortHold> PortHold::Take(const std::string& host) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable("socket(): " + std::string(strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    ::close(fd);
    return InvalidArgument("'" + host + "' is not an IPv4 address (emulated links need one per region)");
  }
  socklen_t len = sizeof(addr);
  // Bound without SO_REUSEADDR, so that the port is one no socket holds;
  // the option set afterwards lets the owner's listener share it.
  const int on = 1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0) {
    std::string err = strerror(errno);
    ::close(fd);
    return Unavailable("cannot reserve a port on " + host + ": " + err);
  }
  return PortHold(fd, static_cast<int>(ntohs(addr.sin_port)));
}

PortHold::~PortHold() {
  if (fd_ >= 0) ::close(fd_);
}

wan::LinkShape ShapeOf(const LinkSpec* l) {
  wan::LinkShape s;
  if (l) {
    s.delay_ms = l->delay_ms;
    s.jitter_ms = l->jitter_ms;
    s.bandwidth_mbit = l->bandwidth_mbit;
  }
  return s;
}

json LinkTraffic(const std::map<std::pair<std::string, std::string>, int>& links, const wan::LinkEmulator& emulator) {
  json out = json::array();
  for (const auto& [pair, link] : links) {
    wan::LinkCounters c = emulator.Counters(link);
    out.push_back({{"from", pair.first}, {"to", pair.second}, {"bytes", c.bytes_forward}, {"cut", c.cut}});
    if (pair.first != pair.second)
      out.push_back({{"from", pair.second}, {"to", pair.first}, {"bytes", c.bytes_back}, {"cut", c.cut}});
  }
  return out;
}

json TrafficSince(json now, const json& base) {
  for (auto& t : now)
    for (const auto& b : base)
      if (b["from"] == t["from"] && b["to"] == t["to"])
        t["bytes"] = t["bytes"].get<uint64_t>() - std::min(t["bytes"].get<uint64_t>(), b["bytes"].get<uint64_t>());
  return now;
}

json EmulatorCostRecord(const wan::EmulatorLoad& at, const wan::EmulatorLoad& now, double seconds) {
  const double cpu = now.cpu_seconds - at.cpu_seconds;
  const double mb = static_cast<double>(now.bytes_relayed - at.bytes_relayed) / 1e6;
  return {{"kind", "proxy"},
          {"seconds", seconds},
          {"cpu_seconds", cpu},
          {"cores", seconds > 0 ? json(cpu / seconds) : json()},
          {"mb_relayed", mb},
          {"cpu_ms_per_mb", mb > 0 ? json(1e3 * cpu / mb) : json()},
          {"connections", now.connections - at.connections},
          {"reads", now.reads - at.reads},
          {"writes", now.writes - at.writes},
          {"timer_wakeups", now.timer_wakeups - at.timer_wakeups},
          {"nice", now.nice},
          {"probes", {{"cpu_seconds", at.cpu_seconds}, {"mb_relayed", static_cast<double>(at.bytes_relayed) / 1e6}}}};
}

namespace {

std::pair<std::string, int> SplitEndpoint(const std::string& endpoint) {
  auto colon = endpoint.rfind(':');
  return {endpoint.substr(6, colon - 6), std::stoi(endpoint.substr(colon + 1))};
}

}  // namespace

EmulatedWan::EmulatedWan(const JobSpec& job) : job_(job), emulator_(std::make_unique<wan::LinkEmulator>()) {}

EmulatedWan::~EmulatedWan() { emulator_->Stop(); }

StatusOr<std::unique_ptr<EmulatedWan>> EmulatedWan::Start(const JobSpec& job) {
  std::unique_ptr<EmulatedWan> wan(new EmulatedWan(job));
  GD_RETURN_IF_ERROR(wan->Build());
  GD_RETURN_IF_ERROR(wan->emulator_->Start());
  return wan;
}

StatusOr<int> EmulatedWan::LinkBetween(const std::string& a, const std::string& b) const {
  auto it = links_.find({a, b});
  if (it == links_.end()) it = links_.find({b, a});
  if (it == links_.end()) return NotFound("no emulated link between " + a + " and " + b);
  return it->second;
}

StatusOr<std::string> EmulatedWan::HoldEndpoint(const std::string& host) {
  GD_ASSIGN_OR_RETURN(PortHold hold, PortHold::Take(host));
  held_.push_back(std::move(hold));
  return "tcp://" + host + ":" + std::to_string(held_.back().port());
}

Status EmulatedWan::Build() {
  // One emulator link per unordered pair with a declared direction; its
  // forward direction is the pair's first region (in job order) to the second.
  for (size_t i = 0; i < job_.regions.size(); ++i)
    for (size_t j = i; j < job_.regions.size(); ++j) {
      const std::string &a = job_.regions[i].name, &b = job_.regions[j].name;
      const LinkSpec *ab = job_.Link(a, b), *ba = job_.Link(b, a);
      if (!ab && !ba) continue;
      links_[{a, b}] = emulator_->AddLink(a + "<->" + b, ShapeOf(ab), ShapeOf(a == b ? ab : ba));
    }

  const RegionSpec& cr = job_.CoordinatorRegion();
  GD_ASSIGN_OR_RETURN(coordinator_endpoint_, HoldEndpoint(cr.host));
  std::vector<std::pair<std::string, std::string>> targets = {{cr.name, coordinator_endpoint_}};
  for (int s = 0; s < job_.NumServers(); ++s) {
    const RegionSpec& r = job_.RegionOfServer(s);
    GD_ASSIGN_OR_RETURN(std::string endpoint, HoldEndpoint(r.host));
    server_endpoints_.push_back(endpoint);
    targets.push_back({r.name, server_endpoints_.back()});
  }
  for (int s = 0; s < job_.NumServers() && job_.replication.backups > 0; ++s) {
    const RegionSpec& r = job_.RegionOfBackup(s);
    GD_ASSIGN_OR_RETURN(std::string endpoint, HoldEndpoint(r.host));
    backup_endpoints_.push_back(endpoint);
    targets.push_back({r.name, backup_endpoints_.back()});
  }
  // A route per (client region, target) whose regions have a link; clients
  // in one region share it, so they share the link's bandwidth, as on a WAN.
  for (const RegionSpec& client : job_.regions)
    for (const auto& [target_region, endpoint] : targets) {
      if (!job_.Link(client.name, target_region)) continue;
      GD_ASSIGN_OR_RETURN(int link, LinkBetween(client.name, target_region));
      auto dir = links_.count({client.name, target_region}) ? wan::LinkDirection::kForward : wan::LinkDirection::kBack;
      auto [host, port] = SplitEndpoint(endpoint);
      GD_ASSIGN_OR_RETURN(int listen, emulator_->AddRoute(link, client.host, 0, host, port, dir));
      routes_[client.name][endpoint] = "tcp://" + client.host + ":" + std::to_string(listen);
    }
  return Status::Ok();
}

std::vector<std::string> EmulatedWan::RouteArgs(const std::string& region) const {
  std::vector<std::string> args;
  auto it = routes_.find(region);
  if (it == routes_.end()) return args;
  for (const auto& [from, to] : it->second) {
    args.push_back("--route");
    args.push_back(from + "=" + to);
  }
  return args;
}

StatusOr<json> EmulatedWan::Probe() {
  json out = json::array();
  std::map<std::string, std::pair<int, std::unique_ptr<wan::ProbeServer>>> servers;  // region -> port, server
  for (const LinkSpec& l : job_.wan.links) {
    const RegionSpec* from = job_.FindRegion(l.from);  // ParseJob checked both
    const RegionSpec* to = job_.FindRegion(l.to);
    auto& server = servers[l.to];
    if (!server.second) {
      server.second = std::make_unique<wan::ProbeServer>();
      GD_ASSIGN_OR_RETURN(server.first, server.second->Start(to->host, 0));
    }
    GD_ASSIGN_OR_RETURN(int port, AddRouteTo(l.from, l.to, server.first));
    out.push_back(LinkProbeRecord(job_, l, wan::ProbeLink(from->host, port, LinkProbeOptions(l))));
  }
  after_probes_ = emulator_->Load();
  probe_traffic_ = LinkTraffic(links_, *emulator_);
  after_probes_at_ = std::chrono::steady_clock::now();
  return out;
}

StatusOr<int> EmulatedWan::AddRouteTo(const std::string& from, const std::string& to, int port) {
  const RegionSpec* f = job_.FindRegion(from);
  const RegionSpec* t = job_.FindRegion(to);
  if (!f || !t) return NotFound("no region " + (f ? to : from));
  GD_ASSIGN_OR_RETURN(int link, LinkBetween(from, to));
  auto dir = links_.count({from, to}) ? wan::LinkDirection::kForward : wan::LinkDirection::kBack;
  return emulator_->AddRoute(link, f->host, 0, t->host, port, dir);
}

wan::ProbeOptions LinkProbeOptions(const LinkSpec& l) {
  wan::ProbeOptions opts;
  // Half a second's bytes, within [256 KiB, 64 MiB]: a link declared faster
  // than this machine moves bytes (100000 Mbit/s) is probed at what it can.
  constexpr double kMaxBytes = 64 << 20;
  if (l.bandwidth_mbit > 0)
    opts.bulk_bytes = static_cast<int64_t>(std::clamp(l.bandwidth_mbit * 1e6 / 8 * 0.5, 256.0 * 1024, kMaxBytes));
  return opts;
}

json LinkProbeRecord(const JobSpec& job, const LinkSpec& l, const StatusOr<wan::LinkMeasurement>& m) {
  json rec = {{"from", l.from},
              {"to", l.to},
              {"configured_rtt_ms", l.delay_ms + (job.Link(l.to, l.from) ? job.Link(l.to, l.from)->delay_ms : 0)},
              {"configured_mbit", l.bandwidth_mbit}};
  if (m.ok()) {
    rec["probed_rtt_ms"] = m->rtt_ms;
    rec["probed_mbit"] = m->mbit;
  } else {
    rec["probe_error"] = m.status().message();
    GD_LOG(WARNING) << "probe " << l.from << " -> " << l.to << ": " << m.status();
  }
  return rec;
}

Status EmulatedWan::Cut(const std::string& a, const std::string& b) {
  GD_ASSIGN_OR_RETURN(int link, LinkBetween(a, b));
  emulator_->Cut(link);
  return Status::Ok();
}

Status EmulatedWan::Heal(const std::string& a, const std::string& b) {
  GD_ASSIGN_OR_RETURN(int link, LinkBetween(a, b));
  emulator_->Heal(link);
  return Status::Ok();
}

json EmulatedWan::Traffic() const { return TrafficSince(LinkTraffic(links_, *emulator_), probe_traffic_); }

json EmulatedWan::Cost() const {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - after_probes_at_).count();
  return EmulatorCostRecord(after_probes_, emulator_->Load(), seconds);
}

}  // namespace geodesic::deploy
