// `geodesic bench links`: configured vs measured links of the user-space
// link emulator (wan/link_emulator.h), through the same path a launch uses:
// deploy::EmulatedWan builds the job's links and probes every declared
// direction (wan/probe.h), one at a time, before anything else uses them.
// Default job: examples/three_regions.yaml (us-eu 80 ms RTT 100 Mbit/s,
// us-asia 160 ms 50 Mbit/s, eu-asia 120 ms 50 Mbit/s). *_error is
// (measured - configured) / configured.
//
// Then what the emulator itself costs, as CPU time of its I/O thread
// (LinkEmulator::Load) over the same links, three loads one after another:
//   bulk      every declared direction at once carries about 2 s of its
//             bandwidth (at least 1 MB; 64 MB unshaped) as one transfer:
//             CPU per MB relayed
//   messages  every direction at once, 200 pings of 9 bytes 5 ms apart,
//             each echoed: CPU per message (each way counts)
//   idle      20 connections per direction, open and silent for --seconds:
//             CPU per connection and second
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/bench.h"
#include "config/job.h"
#include "deploy/emulated_wan.h"
#include "wan/probe.h"

namespace geodesic::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kPings = 200;
constexpr double kPingIntervalMs = 5;
constexpr int kIdlePerDirection = 20;

// A route per declared link direction to a sink (a probe server) in its
// destination region.
struct SinkRoutes {
  std::map<std::string, std::pair<int, std::unique_ptr<wan::ProbeServer>>> servers;  // by region: port, server
  std::vector<std::pair<const LinkSpec*, int>> routes;  // direction, port on its source's host
};

StatusOr<SinkRoutes> RouteToSinks(const JobSpec& job, deploy::EmulatedWan& wan) {
  SinkRoutes s;
  for (const LinkSpec& l : job.wan.links) {
    auto& [sink_port, server] = s.servers[l.to];
    if (!server) {
      server = std::make_unique<wan::ProbeServer>();
      GD_ASSIGN_OR_RETURN(sink_port, server->Start(job.FindRegion(l.to)->host, 0));
    }
    GD_ASSIGN_OR_RETURN(int port, wan.AddRouteTo(l.from, l.to, sink_port));
    s.routes.push_back({&l, port});
  }
  return s;
}

// Runs fn on every route at once, a thread each; the first error.
Status OnEveryRoute(const JobSpec& job, const SinkRoutes& s,
                    const std::function<Status(size_t i, const std::string& host, int port, const LinkSpec&)>& fn) {
  std::vector<Status> results(s.routes.size(), Status::Ok());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < s.routes.size(); ++i)
    threads.emplace_back([&, i] {
      const auto& [l, port] = s.routes[i];
      results[i] = fn(i, job.FindRegion(l->from)->host, port, *l);
    });
  for (std::thread& t : threads) t.join();
  for (Status& r : results) GD_RETURN_IF_ERROR(r);
  return Status::Ok();
}

// The emulator's work between two loads, as a record.
json Between(const wan::EmulatorLoad& a, const wan::EmulatorLoad& b, double seconds) {
  return {{"seconds", seconds},
          {"cpu_seconds", b.cpu_seconds - a.cpu_seconds},
          {"mb_relayed", static_cast<double>(b.bytes_relayed - a.bytes_relayed) / 1e6},
          {"reads", b.reads - a.reads},
          {"writes", b.writes - a.writes},
          {"timer_wakeups", b.timer_wakeups - a.timer_wakeups}};
}

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int64_t BulkBytes(const LinkSpec& l) {
  if (l.bandwidth_mbit <= 0) return int64_t{64} << 20;
  return std::clamp<int64_t>(static_cast<int64_t>(l.bandwidth_mbit * 1e6 / 8 * 2), 1 << 20, wan::kMaxProbeBulkBytes);
}

StatusOr<json> MeasureBulk(const JobSpec& job, const SinkRoutes& s, deploy::EmulatedWan& wan) {
  const wan::EmulatorLoad before = wan.Load();
  const auto start = Clock::now();
  GD_RETURN_IF_ERROR(OnEveryRoute(job, s, [](size_t, const std::string& host, int port, const LinkSpec& l) {
    wan::ProbeOptions o{.pings = 1, .ping_interval_ms = 0, .bulk_bytes = BulkBytes(l), .timeout_ms = 60000};
    return wan::ProbeLink(host, port, o).status();
  }));
  json r = Between(before, wan.Load(), SecondsSince(start));
  r["cpu_ms_per_mb"] = 1e3 * r["cpu_seconds"].get<double>() / std::max(1e-9, r["mb_relayed"].get<double>());
  return r;
}

// Also what the emulator added to the pings' round trips beyond the
// configured RTT: the median over directions of each direction's median
// excess, and the largest excess of any ping.
StatusOr<json> MeasureMessages(const JobSpec& job, const SinkRoutes& s, deploy::EmulatedWan& wan) {
  std::vector<wan::LinkMeasurement> m(s.routes.size());
  const wan::EmulatorLoad before = wan.Load();
  const auto start = Clock::now();
  GD_RETURN_IF_ERROR(OnEveryRoute(job, s, [&](size_t i, const std::string& host, int port, const LinkSpec&) {
    wan::ProbeOptions o{.pings = kPings, .ping_interval_ms = kPingIntervalMs, .bulk_bytes = 0, .timeout_ms = 60000};
    GD_ASSIGN_OR_RETURN(m[i], wan::ProbeLink(host, port, o));
    return Status::Ok();
  }));
  json r = Between(before, wan.Load(), SecondsSince(start));
  const double messages = 2.0 * kPings * static_cast<double>(s.routes.size());  // each ping and its echo
  r["messages"] = messages;
  r["cpu_us_per_message"] = 1e6 * r["cpu_seconds"].get<double>() / messages;
  std::vector<double> excess;
  double max_excess = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    const LinkSpec& l = *s.routes[i].first;
    const LinkSpec* back = job.Link(l.to, l.from);
    const double rtt = l.delay_ms + (back ? back->delay_ms : 0);
    excess.push_back(m[i].rtt_ms - rtt);
    max_excess = std::max(max_excess, m[i].max_rtt_ms - rtt);
  }
  std::sort(excess.begin(), excess.end());
  r["rtt_excess_ms_median"] = excess[excess.size() / 2];
  r["rtt_excess_ms_max"] = max_excess;
  return r;
}

// A connected TCP socket to host:port (IPv4), or -1.
int ConnectTo(const std::string& host, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) return -1;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    fd = -1;
  }
  return fd;
}

StatusOr<json> MeasureIdle(const JobSpec& job, const SinkRoutes& s, deploy::EmulatedWan& wan, double seconds,
                           const std::atomic<bool>* stop) {
  std::vector<int> fds;
  auto close_all = [&] {
    for (int fd : fds) ::close(fd);
  };
  const uint64_t open_before = wan.Load().open_connections;
  for (const auto& [l, port] : s.routes)
    for (int i = 0; i < kIdlePerDirection; ++i) {
      const int fd = ConnectTo(job.FindRegion(l->from)->host, port);
      if (fd < 0) {
        close_all();
        return Unavailable("idle connections: cannot connect to route port " + std::to_string(port));
      }
      fds.push_back(fd);
    }
  // Measured once the emulator has accepted them all (at most 10 s) and
  // connected them to the sinks: accepted connections count at once, their
  // connects to the targets finish a moment later, and that work is not idle.
  for (int i = 0; i < 1000 && wan.Load().open_connections < open_before + fds.size(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const wan::EmulatorLoad before = wan.Load();
  const auto start = Clock::now();
  while (SecondsSince(start) < seconds && !stop->load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  json r = Between(before, wan.Load(), SecondsSince(start));
  close_all();
  r["connections"] = fds.size();
  r["cpu_us_per_connection_second"] =
      1e6 * r["cpu_seconds"].get<double>() / (static_cast<double>(fds.size()) * r["seconds"].get<double>());
  return r;
}

// Threads that spin until destroyed, standing in for a job's busy processes.
class BusyThreads {
 public:
  explicit BusyThreads(int n) {
    for (int i = 0; i < n; ++i)
      threads_.emplace_back([this] {
        uint64_t x = 0;
        while (!done_.load(std::memory_order_relaxed)) x = x * 6364136223846793005ULL + 1;
        sink_.fetch_add(x, std::memory_order_relaxed);
      });
  }
  ~BusyThreads() {
    done_ = true;
    for (std::thread& t : threads_) t.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::atomic<uint64_t> sink_{0};
  std::vector<std::thread> threads_;
};

void PrintProbes(const json& probes, bool as_json) {
  if (!as_json)
    std::printf("%-6s %-6s %9s %9s %7s %9s %9s %7s\n", "from", "to", "rtt ms", "measured", "error", "Mbit/s",
                "measured", "error");
  for (const auto& p : probes) {
    const double rtt = p["configured_rtt_ms"], mbit = p["configured_mbit"];
    const double m_rtt = p["probed_rtt_ms"], m_mbit = p["probed_mbit"];
    const double rtt_error = rtt > 0 ? (m_rtt - rtt) / rtt : 0, mbit_error = mbit > 0 ? (m_mbit - mbit) / mbit : 0;
    const std::string from = p["from"], to = p["to"];
    if (as_json) {
      std::cout << json{{"from", from},
                        {"to", to},
                        {"configured_rtt_ms", rtt},
                        {"measured_rtt_ms", m_rtt},
                        {"configured_mbit", mbit},
                        {"measured_mbit", m_mbit},
                        {"rtt_error", rtt_error},
                        {"mbit_error", mbit_error}}
                       .dump()
                << std::endl;
    } else {
      std::printf("%-6s %-6s %9.1f %9.1f %6.1f%% %9.1f %9.1f %6.1f%%\n", from.c_str(), to.c_str(), rtt, m_rtt,
                  100 * rtt_error, mbit, m_mbit, 100 * mbit_error);
    }
  }
}

void PrintCost(const json& c, size_t directions) {
  const json &b = c["bulk"], &m = c["messages"], &i = c["idle"];
  std::printf("\nemulator CPU (its I/O thread, nice %d; %d busy threads beside it):\n", c["nice"].get<int>(),
              c["busy_threads"].get<int>());
  std::printf("  bulk      %zu directions at once, %.1f MB in %.2f s: %.3f s CPU, %.2f ms per MB\n", directions,
              b["mb_relayed"].get<double>(), b["seconds"].get<double>(), b["cpu_seconds"].get<double>(),
              b["cpu_ms_per_mb"].get<double>());
  std::printf("  messages  %zu connections x %d pings of 9 B, echoed: %.3f s CPU, %.1f us per message\n", directions,
              kPings, m["cpu_seconds"].get<double>(), m["cpu_us_per_message"].get<double>());
  std::printf("            round trips beyond the configured: median %.2f ms, at most %.1f ms\n",
              m["rtt_excess_ms_median"].get<double>(), m["rtt_excess_ms_max"].get<double>());
  std::printf("  idle      %d connections for %.1f s: %.4f s CPU, %.2f us per connection-second\n",
              i["connections"].get<int>(), i["seconds"].get<double>(), i["cpu_seconds"].get<double>(),
              i["cpu_us_per_connection_second"].get<double>());
}

}  // namespace

Status RunLinksBench(const BenchOptions& options, const std::atomic<bool>* stop) {
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(options.job_file, {"wan.emulation=proxy"}));
  if (job.wan.links.empty()) return InvalidArgument(options.job_file + ": no wan.links to measure");
  GD_ASSIGN_OR_RETURN(auto wan, deploy::EmulatedWan::Start(job));
  if (stop->load()) return Cancelled("stopped");
  GD_ASSIGN_OR_RETURN(json probes, wan->Probe());
  for (const auto& p : probes)
    if (!p.contains("probed_rtt_ms")) return Unavailable("probe " + p.dump() + " failed");
  PrintProbes(probes, options.json);
  if (stop->load()) return Cancelled("stopped");
  GD_ASSIGN_OR_RETURN(SinkRoutes sinks, RouteToSinks(job, *wan));
  BusyThreads busy(options.busy_threads);
  json cost = {{"busy_threads", options.busy_threads}, {"nice", wan->Load().nice}};
  GD_ASSIGN_OR_RETURN(cost["bulk"], MeasureBulk(job, sinks, *wan));
  GD_ASSIGN_OR_RETURN(cost["messages"], MeasureMessages(job, sinks, *wan));
  GD_ASSIGN_OR_RETURN(cost["idle"], MeasureIdle(job, sinks, *wan, options.seconds, stop));
  if (options.json)
    std::cout << json{{"emulator", cost}}.dump() << std::endl;
  else
    PrintCost(cost, sinks.routes.size());
  return Status::Ok();
}

}  // namespace geodesic::bench
