// `geodesic metrics scrape-config RUN_DIR [--out FILE]`: a Prometheus
// configuration that scrapes every process of a running local job
// (deploy/scrape_config.h; docs/observability.md).
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "common/files.h"
#include "deploy/scrape_config.h"

namespace geodesic::cli {
namespace {

struct ScrapeFlags {
  std::string run_dir, out;
  deploy::ScrapeConfigOptions options;
};

int RunScrapeConfig(const ScrapeFlags& f) {
  auto yaml = deploy::RenderScrapeConfig(f.run_dir, f.options);
  if (!yaml.ok()) return Fail(yaml.status());
  if (f.out.empty()) {
    std::cout << *yaml;
    return 0;
  }
  Status s = WriteFileAtomic(f.out, *yaml);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace

Command AddMetrics(CLI::App& app) {
  auto f = std::make_shared<ScrapeFlags>();
  auto* cmd = app.add_subcommand("metrics", "the metrics of a running job (every process serves /metrics)");
  cmd->require_subcommand(1);
  auto* scrape = cmd->add_subcommand("scrape-config", "print a Prometheus config that scrapes every process of a run");
  scrape->add_option("run_dir", f->run_dir, "the job's run directory")->required()->check(CLI::ExistingDirectory);
  scrape->add_option("--out", f->out, "write it here instead of standard output");
  scrape->add_option("--interval", f->options.interval_s, "scrape interval (s)")->check(CLI::Range(0.5, 3600.0));
  return {cmd, [f] { return RunScrapeConfig(*f); }};
}

}  // namespace geodesic::cli
