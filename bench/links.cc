// `geodesic bench links`: configured vs measured links of the user-space
// link emulator (wan/link_emulator.h).
//
// Emulates three regions on loopback, us-eu 80 ms RTT 100 Mbit/s, us-asia
// 160 ms 50 Mbit/s, eu-asia 120 ms 50 Mbit/s (each direction half the RTT,
// no jitter), runs a ProbeServer per region and probes every ordered region
// pair through the emulator with the default ProbeOptions, one pair at a
// time. *_error is (measured - configured) / configured.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "wan/link_emulator.h"
#include "wan/probe.h"

namespace geodesic::bench {
namespace {

struct RegionPair {
  int a, b;
  double rtt_ms, mbit;
};

const std::vector<std::string> kRegions = {"us", "eu", "asia"};
const std::vector<RegionPair> kPairs = {{0, 1, 80, 100}, {0, 2, 160, 50}, {1, 2, 120, 50}};

}  // namespace

Status RunLinksBench(const BenchOptions& options, const std::atomic<bool>* stop) {
  wan::LinkEmulator emulator;
  std::vector<std::unique_ptr<wan::ProbeServer>> servers;
  std::vector<int> ports;
  for (size_t i = 0; i < kRegions.size(); ++i) {
    servers.push_back(std::make_unique<wan::ProbeServer>());
    GD_ASSIGN_OR_RETURN(int port, servers.back()->Start("127.0.0.1", 0));
    ports.push_back(port);
  }
  GD_RETURN_IF_ERROR(emulator.Start());
  if (!options.json)
    std::printf("%-5s %-5s %9s %9s %7s %9s %9s %7s\n", "from", "to", "rtt ms", "measured", "error", "Mbit/s",
                "measured", "error");
  for (const RegionPair& pair : kPairs) {
    const wan::LinkShape shape{pair.rtt_ms / 2, 0, pair.mbit};
    const int link = emulator.AddLink(kRegions[pair.a] + "-" + kRegions[pair.b], shape, shape);
    for (wan::LinkDirection dir : {wan::LinkDirection::kForward, wan::LinkDirection::kBack}) {
      if (stop && stop->load()) return Cancelled("stopped");
      const bool forward = dir == wan::LinkDirection::kForward;
      const std::string& from = kRegions[forward ? pair.a : pair.b];
      const std::string& to = kRegions[forward ? pair.b : pair.a];
      GD_ASSIGN_OR_RETURN(int route,
                          emulator.AddRoute(link, "127.0.0.1", 0, "127.0.0.1", ports[forward ? pair.b : pair.a], dir));
      GD_ASSIGN_OR_RETURN(wan::LinkMeasurement m, wan::ProbeLink("127.0.0.1", route));
      const double rtt_error = (m.rtt_ms - pair.rtt_ms) / pair.rtt_ms;
      const double mbit_error = (m.mbit - pair.mbit) / pair.mbit;
      if (options.json) {
        const nlohmann::json r = {{"from", from},
                                  {"to", to},
                                  {"configured_rtt_ms", pair.rtt_ms},
                                  {"measured_rtt_ms", m.rtt_ms},
                                  {"configured_mbit", pair.mbit},
                                  {"measured_mbit", m.mbit},
                                  {"rtt_error", rtt_error},
                                  {"mbit_error", mbit_error}};
        std::cout << r.dump() << std::endl;
      } else {
        std::printf("%-5s %-5s %9.1f %9.1f %6.1f%% %9.1f %9.1f %6.1f%%\n", from.c_str(), to.c_str(), pair.rtt_ms,
                    m.rtt_ms, 100 * rtt_error, pair.mbit, m.mbit, 100 * mbit_error);
        std::fflush(stdout);
      }
    }
  }
  return Status::Ok();
}

}  // namespace geodesic::bench
