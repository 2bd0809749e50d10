// Prometheus scrape configuration for a local run: every process's
// /metrics, from the addresses they reported in RUN_DIR/http/
// (`geodesic metrics scrape-config RUN_DIR`). Our own job, region, role and
// id labels are kept (honor_labels), so Prometheus' target `job` does not
// replace the Geodesic job's name.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace geodesic::deploy {

struct ScrapeConfigOptions {
  double interval_s = 2;  // scrape_interval (the processes publish every 2 s)
};

struct ScrapeTarget {
  std::string process;  // coordinator, server-0, ... (the `process` label)
  std::string address;  // host:port
};

// A configuration scraping `targets`; `what` goes in its header comment.
std::string ScrapeConfigYaml(const std::string& what, const std::vector<ScrapeTarget>& targets,
                             const ScrapeConfigOptions& options);

// The configuration as YAML, or NotFound when the run directory has no
// reported endpoint (a run from before /metrics, or not started yet).
StatusOr<std::string> RenderScrapeConfig(const std::string& run_dir, const ScrapeConfigOptions& options = {});

}  // namespace geodesic::deploy
