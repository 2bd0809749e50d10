// NetnsWan: kernel-level WAN emulation for `wan.emulation: netns` (root).
// Each region gets a network namespace gd-<region> with address 10.77.i.2
// (i = 1.. in job order), joined through a router namespace that shapes,
// delays and drops every declared link direction; deploy/netns/netns.sh
// builds it (its header documents the topology) and runs geodesic-nfq-delay.
// The host reaches every region through an unshaped veth, so the launcher
// itself stays in the root namespace.
//
// Owns the topology: Up() builds it, Down() or the destructor removes it.
// Only one topology exists per machine (fixed names); Up() refuses while
// another is up. Not synchronized; used by one thread.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "config/job.h"
#include "deploy/run_dir.h"

namespace geodesic::deploy {

struct NetnsOptions {
  // deploy/netns/netns.sh; default: the one in this build's source tree.
  std::string script;
  // The NFQUEUE delayer; default: the one this build made (if it did).
  std::string delayer;
  // netns.sh's state (GD_NETNS_STATE): the conf, the owner and the delayer's
  // pid and log.
  std::string state_dir = "/run/geodesic-netns";
};

// The links file netns.sh reads, for a job's regions and wan.links.
std::string NetnsConfig(const JobSpec& job);

// 10.77.<index+1>.2, the address of the index-th region (job order).
std::string NetnsRegionAddress(int index);

class NetnsWan {
 public:
  // Checks for root, `ip`, `tc` and `iptables` (FailedPrecondition with what
  // is missing), writes `run_dir`/netns.conf and runs `netns.sh up`. The job
  // must have at least one region.
  static StatusOr<std::unique_ptr<NetnsWan>> Up(const JobSpec& job, const std::string& run_dir,
                                                const NetnsOptions& options = {});

  // The region's address (bind to it; others reach it there).
  std::string Address(const std::string& region) const;
  // argv prefix that runs a command inside the region's namespace:
  // {"/usr/sbin/ip", "netns", "exec", "gd-<region>"} (an absolute path, for execv).
  std::vector<std::string> CommandPrefix(const std::string& region) const;

  // Partitions (or reconnects) two regions, both directions. Packets already
  // inside the delayer still arrive; TCP then retransmits with backoff, so
  // after a heal a connection may need a few seconds to resume.
  Status Cut(const std::string& a, const std::string& b);
  Status Heal(const std::string& a, const std::string& b);

  // Measures RTT and throughput of every declared link through the router
  // (while nothing else uses it): a probe server listens in each region's
  // namespace and the probe runs from the other's, as EmulatedWan::Probe.
  // Also notes the delayer's CPU and the bytes forwarded so far, for Cost().
  StatusOr<nlohmann::json> Probe();

  // Bytes the router forwarded per declared link direction since the
  // start-up probes (after loss), as EmulatedWan::Traffic: [{from, to,
  // bytes}, ...].
  StatusOr<nlohmann::json> Traffic() const;

  // The summary's `emulator` record since the probes: {kind: "netns",
  // seconds, cpu_seconds (the NFQUEUE delayer's process; the kernel's
  // forwarding, HTB and iptables work is not counted), cores, mb_relayed
  // (router counters, IP bytes), cpu_ms_per_mb, probes: {cpu_seconds,
  // mb_relayed}}.
  StatusOr<nlohmann::json> Cost() const;

  // Removes the topology (idempotent); the destructor calls it.
  Status Down();
  ~NetnsWan();

 private:
  NetnsWan(JobSpec job, NetnsOptions options, std::string ip, RunDir run_dir)
      : job_(std::move(job)), options_(std::move(options)), ip_(std::move(ip)), run_dir_(std::move(run_dir)) {}
  Status Script(const std::vector<std::string>& args) const;
  // The router's counters since Up.
  StatusOr<nlohmann::json> KernelTraffic() const;

  JobSpec job_;
  NetnsOptions options_;
  std::string ip_;  // absolute path of `ip`
  RunDir run_dir_;  // netns.sh's logs go to its logs/
  bool up_ = false;
  double probes_cpu_seconds_ = 0, probes_mb_ = 0;  // the delayer's CPU and bytes forwarded when Probe() ended...
  nlohmann::json probe_traffic_ = nlohmann::json::array();  // ... the bytes per link then ...
  std::chrono::steady_clock::time_point probes_at_ = std::chrono::steady_clock::now();  // ... and when
};

}  // namespace geodesic::deploy
