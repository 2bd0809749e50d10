// Prometheus scrape configuration for a local run: every process's
// /metrics, from the addresses they reported in RUN_DIR/http/
// (`geodesic metrics scrape-config RUN_DIR`). Our own job, region, role and
// id labels are kept (honor_labels), so Prometheus' target `job` does not
// replace the Geodesic job's name.
//
// Secured jobs (security.mode: curve): every process's /metrics requires the
// job's metrics token as a bearer token (docs/observability.md). The token
// is derived from the job secret (MetricsToken), so whoever holds the secret
// (the launcher, `geodesic deploy render`) writes the same one, and the
// token does not reveal the secret. The launcher writes it to
// RUN_DIR/metrics.token (0600); the configuration names that file
// (`authorization: {credentials_file: ...}`), never the token itself.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace geodesic::deploy {

struct ScrapeConfigOptions {
  double interval_s = 2;  // scrape_interval (the processes publish every 2 s)
  // Set: Prometheus sends this file's token as `Authorization: Bearer`.
  std::string credentials_file;
};

// Where a launch keeps its metrics token: RUN_DIR/metrics.token.
std::string MetricsTokenPath(const std::string& run_dir);

// The job's metrics token: the lowercase hex HMAC-SHA256, under the job
// secret, of "gdm1;" and the job's name, length-prefixed (64 characters).
std::string MetricsToken(const std::string& secret, const std::string& job_name);

struct ScrapeTarget {
  std::string process;  // coordinator, server-0, ... (the `process` label)
  std::string address;  // host:port
};

// A configuration scraping `targets`; `what` goes in its header comment.
std::string ScrapeConfigYaml(const std::string& what, const std::vector<ScrapeTarget>& targets,
                             const ScrapeConfigOptions& options);

// The configuration as YAML, or NotFound when the run directory has no
// reported endpoint (a run from before /metrics, or not started yet). With
// RUN_DIR/metrics.token (a secured job), it authenticates with that file
// (its absolute path).
StatusOr<std::string> RenderScrapeConfig(const std::string& run_dir, const ScrapeConfigOptions& options = {});

}  // namespace geodesic::deploy
