#include "deploy/wan_router.h"

#include <chrono>
#include <map>
#include <thread>

#include "common/files.h"
#include "common/format.h"
#include "common/log.h"
#include "deploy/emulated_wan.h"
#include "wan/link_emulator.h"

namespace geodesic::deploy {
namespace {

using Clock = std::chrono::steady_clock;
using Links = std::map<std::pair<std::string, std::string>, int>;

// One emulator link per unordered pair of regions, forward from the first in job order.
Links AddLinks(const JobSpec& job, wan::LinkEmulator& emulator) {
  Links links;
  for (size_t i = 0; i < job.regions.size(); ++i)
    for (size_t j = i + 1; j < job.regions.size(); ++j) {
      const std::string &a = job.regions[i].name, &b = job.regions[j].name;
      links[{a, b}] = emulator.AddLink(a + "<->" + b, ShapeOf(job.Link(a, b)), ShapeOf(job.Link(b, a)));
    }
  return links;
}

// Adds every route, retrying those whose target does not resolve yet.
Status AddRoutes(const std::vector<RouterRoute>& routes, const Links& links, const WanRouterOptions& o,
                 wan::LinkEmulator& emulator, const std::atomic<bool>& stop) {
  std::vector<const RouterRoute*> pending;
  for (const RouterRoute& r : routes) pending.push_back(&r);
  const auto start = Clock::now();
  auto last_said = start;
  while (!pending.empty()) {
    if (stop) return Cancelled("wan-router: stopped while waiting for " + pending.front()->target);
    std::string error;
    std::erase_if(pending, [&](const RouterRoute* r) {
      auto port = emulator.AddRoute(links.at(r->link), "0.0.0.0", r->port, r->target, r->target_port,
                                    r->forward ? wan::LinkDirection::kForward : wan::LinkDirection::kBack);
      if (!port.ok()) error = port.status().message();
      return port.ok();
    });
    if (pending.empty()) break;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > o.resolve_wait_s)
      return Unavailable("wan-router: gave up after " + Fmt("%.0f", waited) + " s: " + error);
    if (Clock::now() - last_said > std::chrono::seconds(10) || last_said == start) {
      GD_LOG(INFO) << "wan-router: waiting for " << pending.size() << " routes (" << error << ")";
      last_said = Clock::now();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  GD_LOG(INFO) << "wan-router: all " << routes.size() << " routes up";
  return Status::Ok();
}

Status WriteTraffic(const Links& links, const wan::LinkEmulator& emulator, const std::string& file) {
  if (file.empty()) return Status::Ok();
  return WriteFileAtomic(file, LinkTraffic(links, emulator).dump(2) + "\n", /*durable=*/false);
}

}  // namespace

Status RunWanRouter(const JobSpec& job, const WanRouterOptions& options, const std::atomic<bool>& stop) {
  GD_ASSIGN_OR_RETURN(std::vector<RouterRoute> routes, RouterRoutes(job, options.render));
  wan::LinkEmulator emulator;
  const Links links = AddLinks(job, emulator);
  GD_RETURN_IF_ERROR(emulator.Start());
  GD_LOG(INFO) << "wan-router: " << links.size() << " links between " << job.regions.size() << " regions, "
               << routes.size() << " routes";
  Status s = AddRoutes(routes, links, options, emulator, stop);
  while (s.ok() && !stop) {
    if (Status w = WriteTraffic(links, emulator, options.traffic_file); !w.ok()) GD_LOG(WARNING) << w;
    for (int i = 0; i < options.traffic_every_s * 10 && !stop; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (Status w = WriteTraffic(links, emulator, options.traffic_file); !w.ok()) GD_LOG(WARNING) << w;
  emulator.Stop();
  return s;
}

}  // namespace geodesic::deploy
