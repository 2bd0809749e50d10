#include "deploy/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "common/build_paths.h"
#include "common/files.h"
#include "deploy/emulated_wan.h"
#include "deploy/process.h"

namespace geodesic::deploy {
namespace {

// The absolute path of `name` on $PATH, plus the sbin folders a non-login
// root shell may lack; empty if none.
std::string FindProgram(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = std::string(path ? path : "") + ":/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin";
  std::istringstream in(dirs);
  std::string dir;
  while (std::getline(in, dir, ':')) {
    if (dir.empty()) continue;
    std::string p = dir + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

int RegionIndex(const JobSpec& job, const std::string& region) {
  for (size_t i = 0; i < job.regions.size(); ++i)
    if (job.regions[i].name == region) return static_cast<int>(i);
  return -1;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// CPU seconds (user + system, every thread) of the process whose pid is in
// `pid_file`.
StatusOr<double> ProcessCpuSeconds(const std::string& pid_file) {
  GD_ASSIGN_OR_RETURN(std::string pid, ReadFile(pid_file));
  const std::string stat_file = "/proc/" + Trim(pid) + "/stat";
  GD_ASSIGN_OR_RETURN(std::string stat, ReadFile(stat_file));
  // Fields after the command's closing parenthesis: state (3), ..., utime (14), stime (15).
  std::istringstream in(stat.substr(stat.rfind(')') + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::strtod(field.c_str(), nullptr);
    if (i == 15) stime = std::strtod(field.c_str(), nullptr);
  }
  if (!in) return DataLoss(stat_file + ": too few fields");
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double TrafficMb(const nlohmann::json& traffic) {
  double bytes = 0;
  for (const auto& t : traffic) bytes += t["bytes"].get<double>();
  return bytes / 1e6;
}

// netns.sh's steps are quick (tens of ms each); a stuck one is a bug.
constexpr auto kScriptTimeout = std::chrono::seconds(120);

}  // namespace

std::string NetnsConfig(const JobSpec& job) {
  std::ostringstream out;
  out << "# written by geodesic launch for job '" << job.name << "' (format: deploy/netns/netns.sh)\n";
  for (const auto& r : job.regions) out << "region " << r.name << "\n";
  for (const auto& l : job.wan.links)
    out << "link " << l.from << " " << l.to << " " << l.delay_ms << " " << l.jitter_ms << " " << l.bandwidth_mbit << " "
        << l.loss << "\n";
  return out.str();
}

std::string NetnsRegionAddress(int index) { return "10.77." + std::to_string(index + 1) + ".2"; }

StatusOr<std::unique_ptr<NetnsWan>> NetnsWan::Up(const JobSpec& job, const std::string& run_dir,
                                                 const NetnsOptions& options) {
  if (job.regions.empty()) return InvalidArgument("wan.emulation: netns needs at least one region");
  if (job.regions.size() > 250) return InvalidArgument("wan.emulation: netns supports at most 250 regions");
  if (::geteuid() != 0)
    return FailedPrecondition(
        "wan.emulation: netns needs root (network namespaces, tc and iptables need CAP_NET_ADMIN); run as root or "
        "use wan.emulation: proxy (user space, no root)");
  std::string ip = FindProgram("ip");
  std::vector<std::string> missing;
  if (ip.empty()) missing.push_back("ip (iproute2)");
  if (FindProgram("tc").empty()) missing.push_back("tc (iproute2)");
  if (FindProgram("iptables").empty()) missing.push_back("iptables");
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    return FailedPrecondition("wan.emulation: netns needs " + list +
                              "; install them with `apt-get install iproute2 iptables` (scripts/setup.sh)");
  }
  NetnsOptions o = options;
  // From the source tree, and the NFQUEUE delayer built beside the binary.
  if (o.script.empty()) o.script = SourcePath("deploy/netns/netns.sh");
  if (o.delayer.empty()) o.delayer = std::string(BuildDir()) + "/deploy/geodesic-nfq-delay";
  if (::access(o.script.c_str(), X_OK) != 0) return NotFound("the netns script " + o.script + " is missing");
  for (const auto& r : job.regions)
    for (char c : r.name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
        return InvalidArgument("wan.emulation: netns: region name '" + r.name +
                               "' must be letters, digits, '-', '_' or '.' (it names a network namespace)");

  const RunDir dir{run_dir};
  GD_RETURN_IF_ERROR(MakeDirs(dir.logs()));  // netns.sh's output (Script)
  GD_RETURN_IF_ERROR(WriteFileAtomic(dir.netns_conf(), NetnsConfig(job), /*durable=*/false));
  std::unique_ptr<NetnsWan> wan(new NetnsWan(job, o, ip, dir));
  GD_RETURN_IF_ERROR(wan->Script({"up", run_dir}));
  wan->up_ = true;
  return wan;
}

Status NetnsWan::Script(const std::vector<std::string>& args) const {
  // As a child process of its own (its own process group: a terminal's
  // Ctrl-C must not stop it half way), logged to run_dir/logs/netns-ACTION.log.
  std::vector<std::string> argv = {FindProgram("env")};
  if (argv[0].empty()) return FailedPrecondition("env not found");
  if (!options_.delayer.empty() && ::access(options_.delayer.c_str(), X_OK) == 0)
    argv.push_back("GD_NFQ_DELAY=" + options_.delayer);
  // This process owns what `up` builds: if it dies without `down`, the next
  // `up` finds the owner gone and takes the leftovers down (netns.sh).
  argv.push_back("GD_NETNS_OWNER=" + std::to_string(::getpid()));
  argv.push_back("GD_NETNS_STATE=" + options_.state_dir);
  argv.push_back(FindProgram("bash"));
  if (argv.back().empty()) return FailedPrecondition("bash not found");
  argv.push_back(options_.script);
  argv.insert(argv.end(), args.begin(), args.end());
  Child script("netns.sh", argv, run_dir_.log("netns-" + args.at(0)));
  GD_RETURN_IF_ERROR(script.Start());
  const auto deadline = std::chrono::steady_clock::now() + kScriptTimeout;
  while (!script.Poll()) {
    if (std::chrono::steady_clock::now() > deadline) {
      script.Signal(SIGKILL);
      while (!script.Poll()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return DeadlineExceeded("netns.sh " + args.at(0) + " did not finish in 120 s; see " + script.log_file());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!script.exit()->ok()) {
    std::string cmd;
    for (const auto& a : args) cmd += " " + a;
    std::string text = Trim(script.LogTail(20));
    // The script's own message ("netns.sh: ...") says what failed.
    if (script.exit()->code == 1 && text.find("netns.sh: ") != std::string::npos) return FailedPrecondition(text);
    return Unavailable("netns.sh" + cmd + " failed (" + script.exit()->Describe() + "): " + text);
  }
  return Status::Ok();
}

std::string NetnsWan::Address(const std::string& region) const {
  int i = RegionIndex(job_, region);
  return i < 0 ? "" : NetnsRegionAddress(i);
}

std::vector<std::string> NetnsWan::CommandPrefix(const std::string& region) const {
  return {ip_, "netns", "exec", "gd-" + region};
}

Status NetnsWan::Cut(const std::string& a, const std::string& b) { return Script({"cut", a, b}); }
Status NetnsWan::Heal(const std::string& a, const std::string& b) { return Script({"heal", a, b}); }

namespace {

// Runs `fn` on a thread of its own inside network namespace gd-<region>
// (setns affects the calling thread only; sockets it makes stay there).
template <typename Fn>
auto InNamespace(const std::string& region, Fn fn) -> decltype(fn()) {
  decltype(fn()) result = Internal("not run");
  std::thread t([&] {
    const std::string path = "/run/netns/gd-" + region;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      result = Unavailable(path + ": " + std::strerror(errno));
      return;
    }
    const bool in = ::setns(fd, CLONE_NEWNET) == 0;
    const int err = errno;
    ::close(fd);
    result = in ? fn() : decltype(fn())(Unavailable("setns " + path + ": " + std::strerror(err)));
  });
  t.join();
  return result;
}

}  // namespace

StatusOr<nlohmann::json> NetnsWan::Probe() {
  nlohmann::json out = nlohmann::json::array();
  std::map<std::string, std::pair<int, std::unique_ptr<wan::ProbeServer>>> servers;  // region -> port, server
  for (const LinkSpec& l : job_.wan.links) {
    if (l.from == l.to) continue;  // inside a region: never crosses the router
    auto& server = servers[l.to];
    if (!server.second) {
      server.second = std::make_unique<wan::ProbeServer>();
      GD_ASSIGN_OR_RETURN(server.first,
                          InNamespace(l.to, [&]() -> StatusOr<int> { return server.second->Start(Address(l.to), 0); }));
    }
    auto m = InNamespace(l.from, [&]() -> StatusOr<wan::LinkMeasurement> {
      return wan::ProbeLink(Address(l.to), server.first, LinkProbeOptions(l));
    });
    out.push_back(LinkProbeRecord(job_, l, m));
  }
  if (auto cpu = ProcessCpuSeconds(options_.state_dir + "/delay.pid"); cpu.ok()) probes_cpu_seconds_ = *cpu;
  if (auto traffic = KernelTraffic(); traffic.ok()) {
    probe_traffic_ = *traffic;
    probes_mb_ = TrafficMb(*traffic);
  }
  probes_at_ = std::chrono::steady_clock::now();
  return out;
}

StatusOr<nlohmann::json> NetnsWan::Cost() const {
  GD_ASSIGN_OR_RETURN(nlohmann::json traffic, Traffic());
  const double mb = TrafficMb(traffic);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - probes_at_).count();
  nlohmann::json cost = {{"kind", "netns"},
                         {"seconds", seconds},
                         {"mb_relayed", mb},
                         {"probes", {{"cpu_seconds", probes_cpu_seconds_}, {"mb_relayed", probes_mb_}}}};
  // No delayer runs when no link has a delay.
  auto cpu_now = ProcessCpuSeconds(options_.state_dir + "/delay.pid");
  if (!cpu_now.ok()) {
    cost["cpu_error"] = cpu_now.status().message();
    return cost;
  }
  const double cpu = *cpu_now - probes_cpu_seconds_;
  cost["cpu_seconds"] = cpu;
  cost["cores"] = seconds > 0 ? nlohmann::json(cpu / seconds) : nlohmann::json();
  cost["cpu_ms_per_mb"] = mb > 0 ? nlohmann::json(1e3 * cpu / mb) : nlohmann::json();
  return cost;
}

StatusOr<nlohmann::json> NetnsWan::Traffic() const {
  GD_ASSIGN_OR_RETURN(nlohmann::json now, KernelTraffic());
  return TrafficSince(std::move(now), probe_traffic_);
}

StatusOr<nlohmann::json> NetnsWan::KernelTraffic() const {
  if (!up_) return FailedPrecondition("the namespaces are down");
  GD_RETURN_IF_ERROR(Script({"counters"}));
  std::ifstream in(run_dir_.log("netns-counters"));
  nlohmann::json out = nlohmann::json::array();
  std::string from, to;
  uint64_t bytes = 0;
  while (in >> from >> to >> bytes) out.push_back({{"from", from}, {"to", to}, {"bytes", bytes}});
  return out;
}

Status NetnsWan::Down() {
  if (!up_) return Status::Ok();
  up_ = false;
  return Script({"down"});
}

NetnsWan::~NetnsWan() { (void)Down(); }

}  // namespace geodesic::deploy
