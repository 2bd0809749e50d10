#include "deploy/scrape_config.h"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <vector>

#include "common/files.h"
#include "deploy/run_dir.h"
#include "transport/http_endpoint.h"

namespace geodesic::deploy {

std::string ScrapeConfigYaml(const std::string& what, const std::vector<ScrapeTarget>& targets,
                             const ScrapeConfigOptions& options) {
  std::ostringstream y;
  y << "# Prometheus scrape configuration for " << what << "\n"
    << "global:\n  scrape_interval: " << options.interval_s << "s\n  scrape_timeout: " << options.interval_s
    << "s\nscrape_configs:\n  - job_name: geodesic\n    honor_labels: true\n    static_configs:\n";
  for (const auto& t : targets)
    y << "      - targets: [\"" << t.address << "\"]\n        labels: {process: \"" << t.process << "\"}\n";
  return y.str();
}

StatusOr<std::string> RenderScrapeConfig(const std::string& run_dir, const ScrapeConfigOptions& options) {
  const RunDir dir{run_dir};
  std::vector<ScrapeTarget> targets;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir.http_dir(), ec)) {
    GD_ASSIGN_OR_RETURN(std::string address, ReadFile(e.path().string()));
    GD_RETURN_IF_ERROR(transport::CheckHttpBind(address));
    targets.push_back({e.path().filename().string(), address});
  }
  if (targets.empty())
    return NotFound(dir.http_dir() + " lists no process: is " + run_dir + " the run directory of a started job?");
  std::sort(targets.begin(), targets.end(), [](const auto& a, const auto& b) { return a.process < b.process; });
  return ScrapeConfigYaml("the Geodesic run in " + run_dir +
                              "\n# (geodesic metrics scrape-config; re-render it after a process restarts on a new "
                              "port).",
                          targets, options);
}

}  // namespace geodesic::deploy
