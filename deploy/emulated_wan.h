// EmulatedWan: the links of a job with `wan.emulation: proxy`, on one
// machine. It fixes (and holds, see PortHold) the ports of the coordinator
// and every server shard,
// runs one emulated link (wan::LinkEmulator) per pair of regions with a
// declared link, and gives each process `--route` flags that send its
// connections to peers in other regions through those links. It also probes
// every declared link at start-up, cuts and heals links at run time, and
// counts the bytes each link carried.
//
// Owned and used by the launcher's thread; the emulator runs its own I/O
// thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/job.h"
#include "wan/link_emulator.h"
#include "wan/probe.h"

namespace geodesic::deploy {

// A start-up probe of link `l` (both kinds of emulation): its options
// (about half a second of bulk transfer, 256 KiB to 64 MiB) and its record
// in the summary's `links`: {from, to, configured_*, probed_* or probe_error}.
wan::ProbeOptions LinkProbeOptions(const LinkSpec& l);
nlohmann::json LinkProbeRecord(const JobSpec& job, const LinkSpec& l, const StatusOr<wan::LinkMeasurement>& m);

// The shape of one declared link direction (none: unshaped).
wan::LinkShape ShapeOf(const LinkSpec* l);

// The summary's `emulator` record: what emulating the links cost in the
// `seconds` from `at` (after the start-up probes) to `now`: {kind: "proxy",
// seconds, cpu_seconds (the emulator's I/O thread), cores (cpu_seconds /
// seconds), mb_relayed, cpu_ms_per_mb, connections, reads, writes,
// timer_wakeups, nice (the I/O thread's), probes: {cpu_seconds, mb_relayed}}
// (probes: up to `at`).
nlohmann::json EmulatorCostRecord(const wan::EmulatorLoad& at, const wan::EmulatorLoad& now, double seconds);

// Bytes each direction of each link of `emulator` delivered so far:
// [{from, to, bytes, cut}], for `links` (unordered region pair, in job
// order -> the emulator's link id).
nlohmann::json LinkTraffic(const std::map<std::pair<std::string, std::string>, int>& links,
                           const wan::LinkEmulator& emulator);
// `now` less `base` per (from, to) (both as LinkTraffic): what each link
// direction carried since `base` was read, e.g. the job's own bytes since
// the start-up probes.
nlohmann::json TrafficSince(nlohmann::json now, const nlohmann::json& base);

// A TCP port on `host` held for a process that binds it later: bound
// exclusively (the kernel picks a port nobody holds), then marked
// SO_REUSEADDR and never listened on. While held, no other bind without
// SO_REUSEADDR (another launcher's reservation) and no outgoing connect()'s
// ephemeral port can take it, yet the process's ZeroMQ listener (which sets
// SO_REUSEADDR) binds it, and binds it again after a restart.
// docs/launcher.md, "Ports". Movable; closes the socket when destroyed.
class PortHold {
 public:
  static StatusOr<PortHold> Take(const std::string& host);
  PortHold(PortHold&& o) noexcept : fd_(o.fd_), port_(o.port_) { o.fd_ = -1; }
  PortHold& operator=(PortHold&&) = delete;
  PortHold(const PortHold&) = delete;
  ~PortHold();
  int port() const { return port_; }

 private:
  PortHold(int fd, int port) : fd_(fd), port_(port) {}
  int fd_ = -1;
  int port_ = 0;
};

class EmulatedWan {
 public:
  // Reserves ports, builds links and routes, and starts the emulator.
  static StatusOr<std::unique_ptr<EmulatedWan>> Start(const JobSpec& job);

  const std::string& coordinator_bind() const { return coordinator_endpoint_; }
  const std::string& server_bind(int id) const { return server_endpoints_.at(id); }
  // Replicated jobs: where shard `id`'s backup binds. Its primary replicates
  // to it, and workers reach it after a failover, over the links between
  // their regions and the backup's, like any other cross-region traffic.
  const std::string& backup_bind(int id) const { return backup_endpoints_.at(id); }
  // "--route FROM=TO" arguments for a process in `region`.
  std::vector<std::string> RouteArgs(const std::string& region) const;

  // Measures RTT and throughput of every declared link through the emulator
  // (while nothing else uses it): a JSON array of {from, to, configured_*,
  // probed_*}.
  StatusOr<nlohmann::json> Probe();

  // A route from region `from` over their link to `port` on region `to`'s
  // host (a probe server, a benchmark's sink): the port to connect to on
  // from's host. NotFound when no link joins them.
  StatusOr<int> AddRouteTo(const std::string& from, const std::string& to, int port);
  // What the emulator has done and cost since it started.
  wan::EmulatorLoad Load() const { return emulator_->Load(); }

  // Partitions (or reconnects) two regions, both directions.
  Status Cut(const std::string& a, const std::string& b);
  Status Heal(const std::string& a, const std::string& b);

  // Bytes each direction of each link delivered since the start-up probes
  // (the job's own): {from, to, bytes}.
  nlohmann::json Traffic() const;

  // What the emulator has cost since the probes (EmulatorCostRecord).
  nlohmann::json Cost() const;

  ~EmulatedWan();

 private:
  explicit EmulatedWan(const JobSpec& job);
  Status Build();
  StatusOr<int> LinkBetween(const std::string& a, const std::string& b) const;
  // A held port on `host`, as an endpoint "tcp://HOST:PORT".
  StatusOr<std::string> HoldEndpoint(const std::string& host);

  JobSpec job_;
  std::vector<PortHold> held_;  // the fixed ports, held for the job's life
  std::unique_ptr<wan::LinkEmulator> emulator_;
  wan::EmulatorLoad after_probes_;                          // the emulator's load when Probe() ended...
  nlohmann::json probe_traffic_ = nlohmann::json::array();  // ... the bytes per link then ...
  std::chrono::steady_clock::time_point after_probes_at_ = std::chrono::steady_clock::now();  // ... and when
  std::string coordinator_endpoint_;
  std::vector<std::string> server_endpoints_, backup_endpoints_;
  // Unordered region pair (in job order) -> emulator link id.
  std::map<std::pair<std::string, std::string>, int> links_;
  // Region of the client -> (target endpoint -> emulator endpoint).
  std::map<std::string, std::map<std::string, std::string>> routes_;
};

}  // namespace geodesic::deploy
