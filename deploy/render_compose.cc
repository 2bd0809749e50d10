// `geodesic deploy render --target compose` (deploy/render.h,
// docs/deploy.md): the job as one compose file, every process in a container
// of its own, regions as networks that meet only in the link router.
#include <map>
#include <sstream>

#include "deploy/render.h"
#include "deploy/yaml_writer.h"

namespace geodesic::deploy {
namespace {

using Node = nlohmann::ordered_json;

constexpr const char* kRunDir = "/var/lib/geodesic";
constexpr const char* kRouter = "wan";

std::string Network(const std::string& region) { return "region-" + DnsLabel(region, 50); }

// What every container shares: the image, the job file, the run volume,
// one compute thread, and a restart after a failure (not after the end).
Node ContainerBase(const RenderOptions& o, const std::string& name) {
  Node s;
  s["image"] = o.image;
  s["hostname"] = name;
  s["environment"] = Node::array({"OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1"});
  s["volumes"] = Node::array({std::string("./job.yaml:") + kContainerJobPath + ":ro", std::string("run:") + kRunDir});
  s["restart"] = "on-failure";
  return s;
}

Node ProcessService(const RenderOptions& o, const PlacedProcess& p, const std::vector<RouterRoute>& routes) {
  Node s = ContainerBase(o, p.name);
  std::vector<std::string> args =
      ProcessArgs(p, {.job_file = kContainerJobPath,
                      .coordinator = "tcp://coordinator:" + std::to_string(o.base_port),
                      .http_host = "0.0.0.0",
                      .in_run_dir = [](const std::string& rel) { return std::string(kRunDir) + "/" + rel; }});
  // Members dial a shard by its name, the name their routes know (a bound address would be reachable
  // across region networks on the host's bridges, bypassing the router).
  if (p.role == "server") args.insert(args.end(), {"--advertise", Endpoint(p)});
  for (const RouterRoute& r : routes)
    if (r.client_region == p.region)
      args.insert(args.end(), {"--route", "tcp://" + r.target + ":" + std::to_string(r.target_port) + "=tcp://" +
                                              kRouter + ":" + std::to_string(r.port)});
  s["command"] = args;
  s["networks"] = Node::array({Network(p.region)});
  return s;
}

Node RouterService(const JobSpec& job, const RenderOptions& o) {
  Node s = ContainerBase(o, kRouter);
  s["command"] = Node::array({"wan-router", "--job", kContainerJobPath, "--base-port", std::to_string(o.base_port),
                              "--router-base-port", std::to_string(o.router_base_port), "--traffic-file",
                              std::string(kRunDir) + "/links.json"});
  for (const RegionSpec& r : job.regions) s["networks"].push_back(Network(r.name));
  return s;
}

std::string Header(const JobSpec& job) {
  std::ostringstream s;
  s << "# Geodesic job '" << job.name
    << "' as a compose file (rendered by `geodesic deploy render --target compose`).\n"
    << "# Run it beside job.yaml:  podman-compose -p geodesic-" << DnsLabel(job.name)
    << " up -d   (or docker compose up -d)\n"
    << "# A network per region; service `wan` (`geodesic wan-router`), the one container on every region's\n"
    << "# network, carries all traffic between regions through the user-space link emulator, shaped as\n"
    << "# declared below (unshaped between regions with no declared link) and counted per link in\n"
    << "# links.json (loss is not emulated: TCP hides it from a proxy). Volume `run` is the run directory,\n"
    << "# which `geodesic deploy summarize` reads.\n";
  s << LinkMatrixComment(job, "across real regions");
  return s.str();
}

}  // namespace

StatusOr<std::vector<PlacedProcess>> ComposeProcesses(const JobSpec& job, const RenderOptions& options) {
  GD_ASSIGN_OR_RETURN(std::vector<PlacedProcess> all, PlaceProcesses(job, options));
  std::map<std::string, std::string> aggregator;  // region -> its aggregator's endpoint, by container name
  for (PlacedProcess& p : all) {
    p.host = p.name;
    if (p.port) p.port = options.base_port;
    p.http_port = options.http_base_port;
    if (p.role == "aggregator") aggregator[p.region] = Endpoint(p);
  }
  for (PlacedProcess& p : all)
    if (!p.aggregator.empty()) p.aggregator = aggregator.at(p.region);
  return all;
}

StatusOr<std::vector<RouterRoute>> RouterRoutes(const JobSpec& job, const RenderOptions& options) {
  GD_ASSIGN_OR_RETURN(std::vector<PlacedProcess> all, ComposeProcesses(job, options));
  std::map<std::string, size_t> order;
  for (size_t i = 0; i < job.regions.size(); ++i) order[job.regions[i].name] = i;
  std::vector<RouterRoute> routes;
  for (const RegionSpec& client : job.regions)
    for (const PlacedProcess& p : all) {
      // An aggregator serves its own region's workers only: no route to it.
      if (p.port == 0 || p.region == client.name || p.role == "aggregator") continue;
      const bool forward = order[client.name] < order[p.region];
      routes.push_back({.client_region = client.name,
                        .target = p.name,
                        .target_port = p.port,
                        .link = forward ? std::pair(client.name, p.region) : std::pair(p.region, client.name),
                        .forward = forward,
                        .port = options.router_base_port + static_cast<int>(routes.size())});
    }
  if (options.router_base_port < 1024 || options.router_base_port + static_cast<int>(routes.size()) > 65535)
    return InvalidArgument("deploy render: the link router's " + std::to_string(routes.size()) + " ports from " +
                           std::to_string(options.router_base_port) + " do not fit in 1024..65535");
  return routes;
}

StatusOr<std::string> RenderCompose(const JobSpec& job, const RenderOptions& options) {
  if (job.security.mode == SecurityMode::kCurve)
    return InvalidArgument(
        "deploy render: --target compose does not render security.mode: curve yet; use --target hosts for a "
        "secured job");
  GD_ASSIGN_OR_RETURN(std::vector<PlacedProcess> all, ComposeProcesses(job, options));
  GD_ASSIGN_OR_RETURN(std::vector<RouterRoute> routes, RouterRoutes(job, options));
  Node doc;
  doc["name"] = "geodesic-" + DnsLabel(job.name);
  doc["services"][kRouter] = RouterService(job, options);
  for (const PlacedProcess& p : all) doc["services"][p.name] = ProcessService(options, p, routes);
  for (const RegionSpec& r : job.regions) doc["networks"][Network(r.name)] = Node::object();
  doc["volumes"]["run"] = Node::object();
  return Header(job) + ToYaml(doc);
}

}  // namespace geodesic::deploy
