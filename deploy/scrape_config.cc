#include "deploy/scrape_config.h"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <vector>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/files.h"
#include "deploy/run_dir.h"
#include "transport/http_endpoint.h"

namespace geodesic::deploy {

std::string ScrapeConfigYaml(const std::string& what, const std::vector<ScrapeTarget>& targets,
                             const ScrapeConfigOptions& options) {
  std::ostringstream y;
  y << "# Prometheus scrape configuration for " << what << "\n"
    << "global:\n  scrape_interval: " << options.interval_s << "s\n  scrape_timeout: " << options.interval_s
    << "s\nscrape_configs:\n  - job_name: geodesic\n    honor_labels: true\n";
  if (!options.credentials_file.empty()) {
    std::string quoted;  // a YAML double-quoted scalar
    for (char c : options.credentials_file)
      quoted += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    y << "    authorization:\n      type: Bearer\n      credentials_file: \"" << quoted << "\"\n";
  }
  y << "    static_configs:\n";
  for (const auto& t : targets)
    y << "      - targets: [\"" << t.address << "\"]\n        labels: {process: \"" << t.process << "\"}\n";
  return y.str();
}

std::string MetricsTokenPath(const std::string& run_dir) { return RunDir{run_dir}.File("metrics.token"); }

std::string MetricsToken(const std::string& secret, const std::string& job_name) {
  const std::string message = "gdm1;" + std::to_string(job_name.size()) + ":" + job_name + ";";
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &n);
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < n; ++i) hex += {kHex[mac[i] >> 4], kHex[mac[i] & 15]};
  return hex;
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
  ScrapeConfigOptions o = options;
  if (o.credentials_file.empty() && std::filesystem::exists(MetricsTokenPath(run_dir)))
    o.credentials_file = std::filesystem::absolute(MetricsTokenPath(run_dir)).lexically_normal().string();
  return ScrapeConfigYaml("the Geodesic run in " + run_dir +
                              "\n# (geodesic metrics scrape-config; re-render it after a process restarts on a new "
                              "port).",
                          targets, o);
}

}  // namespace geodesic::deploy
