// `geodesic bench links`: configured vs measured links of the user-space
// link emulator (wan/link_emulator.h), through the same path a launch uses:
// deploy::EmulatedWan builds the job's links and probes every declared
// direction (wan/probe.h), one at a time, before anything else uses them.
// Default job: examples/three_regions.yaml (us-eu 80 ms RTT 100 Mbit/s,
// us-asia 160 ms 50 Mbit/s, eu-asia 120 ms 50 Mbit/s). *_error is
// (measured - configured) / configured.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "config/job.h"
#include "deploy/emulated_wan.h"

namespace geodesic::bench {

Status RunLinksBench(const BenchOptions& options, const std::atomic<bool>* stop) {
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(options.job_file, {"wan.emulation=proxy"}));
  if (job.wan.links.empty()) return InvalidArgument(options.job_file + ": no wan.links to measure");
  GD_ASSIGN_OR_RETURN(auto wan, deploy::EmulatedWan::Start(job));
  if (stop->load()) return Cancelled("stopped");
  GD_ASSIGN_OR_RETURN(nlohmann::json probes, wan->Probe());
  if (!options.json)
    std::printf("%-6s %-6s %9s %9s %7s %9s %9s %7s\n", "from", "to", "rtt ms", "measured", "error", "Mbit/s",
                "measured", "error");
  for (const auto& p : probes) {
    if (!p.contains("probed_rtt_ms")) return Unavailable("probe " + p.dump() + " failed");
    const double rtt = p["configured_rtt_ms"], mbit = p["configured_mbit"];
    const double m_rtt = p["probed_rtt_ms"], m_mbit = p["probed_mbit"];
    const double rtt_error = rtt > 0 ? (m_rtt - rtt) / rtt : 0, mbit_error = mbit > 0 ? (m_mbit - mbit) / mbit : 0;
    const std::string from = p["from"], to = p["to"];
    if (options.json) {
      std::cout << nlohmann::json{{"from", from},
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
  return Status::Ok();
}

}  // namespace geodesic::bench
