#include "worker/link_monitor.h"

#include <algorithm>
#include <map>

namespace geodesic::worker {

void LinkMonitor::NoteReply(size_t si, double path_s, uint64_t bytes) {
  Shard& sh = shards_[si];
  if (path_s > 0 && (sh.min_rtt_s < 0 || path_s < sh.min_rtt_s)) sh.min_rtt_s = path_s;
  double transfer_s = path_s - sh.min_rtt_s;
  if (transfer_s > 0.002 && transfer_s > 0.2 * path_s && bytes >= (64u << 10)) {
    double mbit = static_cast<double>(bytes) * 8 / transfer_s / 1e6;
    sh.mbit_ema = sh.mbit_samples == 0 ? mbit : 0.8 * sh.mbit_ema + 0.2 * mbit;
    ++sh.mbit_samples;
  }
}

std::vector<LinkEstimate> LinkMonitor::Estimates(const ShardRoutes& routes) const {
  std::map<std::string, LinkEstimate> by_region;
  std::map<std::string, int> with_rate;
  for (size_t si = 0; si < shards_.size(); ++si) {
    const Shard& sh = shards_[si];
    if (sh.min_rtt_s < 0) continue;
    const std::string& region = routes.region(si);
    LinkEstimate& e = by_region[region];
    e.server_region = region;
    double rtt_ms = sh.min_rtt_s * 1e3;
    e.min_rtt_ms = e.min_rtt_ms == 0 ? rtt_ms : std::min(e.min_rtt_ms, rtt_ms);
    if (sh.mbit_samples > 0) {
      // Shards of one region share the path: their replies' rates add up
      // only when they overlap, so report the mean of the shards' rates.
      e.mbit += sh.mbit_ema;
      e.samples += sh.mbit_samples;
      ++with_rate[region];
    }
  }
  std::vector<LinkEstimate> out;
  for (auto& [region, e] : by_region) {
    if (with_rate[region] > 0) e.mbit /= with_rate[region];
    out.push_back(e);
  }
  return out;
}

std::vector<RegionTraffic> LinkMonitor::Traffic(const ShardRoutes& routes, const ShardLinks& links) const {
  std::map<std::string, RegionTraffic> by_region;
  for (size_t si = 0; si < shards_.size(); ++si) {
    RegionTraffic& t = by_region[routes.region(si)];
    t.region = routes.region(si);
    t.wire_sent += links.traffic(si).bytes_sent.load();
    t.wire_received += links.traffic(si).bytes_received.load();
    t.raw_sent += shards_[si].raw_sent;
    t.raw_received += shards_[si].raw_received;
  }
  std::vector<RegionTraffic> out;
  for (auto& [region, t] : by_region) out.push_back(std::move(t));
  return out;
}

}  // namespace geodesic::worker
