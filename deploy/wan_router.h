// The link router of a compose deployment (`geodesic wan-router`;
// deploy/render.h, RenderCompose; docs/deploy.md): the one container on
// every region's network. It runs the user-space link emulator that
// `geodesic launch` uses (wan/link_emulator.h) with one link per pair of
// regions, shaped as the job declares (unshaped where it declares none),
// and listens on every route of RouterRoutes, so that each process reaches
// another region's processes only through the link between the two regions.
//
// The routes' targets are container names, which resolve only once their
// containers run: the router retries each route's resolution every half
// second, saying what it waits for, up to `resolve_wait_s`. It writes the
// bytes each link direction carried (LinkTraffic's JSON) to
// `traffic_file` every `traffic_every_s` and when it stops, which is what
// `geodesic deploy summarize` reports per link.
//
// Runs on the caller's thread until *stop; the emulator has its own.
#pragma once

#include <atomic>
#include <string>

#include "common/status.h"
#include "config/job.h"
#include "deploy/render.h"

namespace geodesic::deploy {

struct WanRouterOptions {
  RenderOptions render;  // base_port and router_base_port as the compose file was rendered with
  std::string traffic_file;
  double resolve_wait_s = 600;
  double traffic_every_s = 2;
};

// Unavailable if a route's target does not resolve in time or a listener
// cannot bind; Cancelled when stopped before every route is up.
Status RunWanRouter(const JobSpec& job, const WanRouterOptions& options, const std::atomic<bool>& stop);

}  // namespace geodesic::deploy
