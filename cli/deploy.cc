// `geodesic deploy render JOB.yaml --target hosts|kubernetes|compose --out
// DIR`: the job laid out for machines the launcher does not own
// (deploy/render.h; docs/deploy.md); `geodesic deploy summarize` of such a
// run's directory; `geodesic wan-router`, a compose deployment's link
// router (deploy/wan_router.h).
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "common/log.h"
#include "config/job.h"
#include "deploy/progress.h"
#include "deploy/render.h"
#include "deploy/summary.h"
#include "deploy/wan_router.h"

namespace geodesic::cli {
namespace {

struct RenderFlags {
  std::string job_file, out;
  std::vector<std::string> overrides;
  deploy::RenderOptions options;
};

int RunRender(const RenderFlags& f) {
  auto job = LoadJobFile(f.job_file, f.overrides);
  if (!job.ok()) return Fail(job.status());
  if (job->HasAutoAggregators())
    if (Status s = ResolveAutoAggregators(&*job, std::cout); !s.ok()) return Fail(s);
  auto files = deploy::Render(*job, f.options);
  if (!files.ok()) return Fail(files.status());
  if (Status s = deploy::WriteRendered(f.out, *files); !s.ok()) return Fail(s);
  if (Status s = deploy::WriteSecrets(*job, f.options, f.out); !s.ok()) return Fail(s);
  std::cout << "geodesic: rendered job '" << job->name << "' for " << f.options.target << " into " << f.out << ":";
  for (const auto& [name, _] : *files) std::cout << " " << name;
  if (job->security.mode == SecurityMode::kCurve)
    std::cout << (f.options.target == "kubernetes" ? " kubernetes-secrets.yaml" : "")
              << " and secrets/ (private: give each machine only its own)";
  std::cout << "\n";
  return 0;
}

struct SummarizeFlags {
  std::string job_file, run_dir, summary_file;
  std::vector<std::string> overrides;
};

int RunSummarize(const SummarizeFlags& f) {
  auto job = LoadJobFile(f.job_file, f.overrides);
  if (!job.ok()) return Fail(job.status());
  deploy::ProgressLine progress(/*quiet=*/false);
  auto rc = deploy::SummarizeRunDir(*job, f.run_dir, f.summary_file, progress);
  return rc.ok() ? *rc : Fail(rc.status());
}

CLI::App* AddSummarize(CLI::App* deploy, SummarizeFlags& f) {
  auto* cmd = deploy->add_subcommand(
      "summarize",
      "write summary.json of a rendered deployment's run from its shared run directory (compose: volume run)");
  cmd->add_option("job", f.job_file, "the job file the run used")->required()->check(CLI::ExistingFile);
  cmd->add_option("--run-dir", f.run_dir, "the run directory the processes shared")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--set", f.overrides, "override a job-file key, as the run did");
  cmd->add_option("--summary-file", f.summary_file, "also write the summary here");
  return cmd;
}

struct RouterFlags {
  std::string job_file;
  deploy::WanRouterOptions options;
};

int RunRouter(const RouterFlags& f) {
  SetLogPrefix("wan-router");
  auto job = LoadJobFile(f.job_file);
  if (!job.ok()) return Fail(job.status());
  Status s = deploy::RunWanRouter(*job, f.options, g_stop);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace

Command AddWanRouter(CLI::App& app) {
  auto f = std::make_shared<RouterFlags>();
  auto* cmd = app.add_subcommand(
      "wan-router", "a compose deployment's link router: the emulated WAN links between its region networks");
  cmd->add_option("--job", f->job_file, "job file (YAML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--base-port", f->options.render.base_port, "the processes' ZeroMQ port, as rendered");
  cmd->add_option("--router-base-port", f->options.render.router_base_port, "this router's first port, as rendered");
  cmd->add_option("--traffic-file", f->options.traffic_file, "write the bytes each link carried here (JSON)");
  cmd->add_option("--resolve-wait", f->options.resolve_wait_s, "seconds to wait for the routes' targets to resolve")
      ->check(CLI::Range(0.0, 86400.0));
  return {cmd, [f] { return RunRouter(*f); }};
}

Command AddDeploy(CLI::App& app) {
  auto f = std::make_shared<RenderFlags>();
  auto summarize = std::make_shared<SummarizeFlags>();
  auto* cmd = app.add_subcommand("deploy", "lay a job out for machines the launcher does not own");
  cmd->require_subcommand(1);
  auto* summarize_cmd = AddSummarize(cmd, *summarize);
  auto* render = cmd->add_subcommand("render", "write the files that start JOB on hosts, Kubernetes or compose");
  render->add_option("job", f->job_file, "job file (YAML)")->required()->check(CLI::ExistingFile);
  render->add_option("--target", f->options.target, "hosts (one script per machine), kubernetes or compose")
      ->check(CLI::IsMember({"hosts", "kubernetes", "compose"}));
  render->add_option("--out", f->out, "directory to write into (created)")->required();
  render->add_option("--set", f->overrides, "override a job-file key, e.g. training.staleness_bound=0");
  render->add_option("--base-port", f->options.base_port, "ZeroMQ ports: process k listens on BASE + k");
  render->add_option("--http-base-port", f->options.http_base_port, "HTTP ports: process k serves on BASE + k");
  render->add_option("--image", f->options.image,
                     "kubernetes, compose: the image every container runs (default geodesic:latest)");
  render->add_option("--pull-policy", f->options.pull_policy, "kubernetes: imagePullPolicy")
      ->check(CLI::IsMember({"Always", "IfNotPresent", "Never"}));
  render
      ->add_option("--workload", f->options.workload,
                   "kubernetes: statefulsets (a cluster) or pods (podman play kube; also a cluster)")
      ->check(CLI::IsMember({"statefulsets", "pods"}));
  render->add_option("--volume-size", f->options.volume_size, "kubernetes: each pod's data volume (default 1Gi)");
  render->add_option("--metrics-namespace", f->options.metrics_namespace,
                     "kubernetes: the namespace (Prometheus') whose pods the NetworkPolicy admits to the HTTP ports, "
                     "besides the job's own and the kubelet (default monitoring)");
  render->add_option("--router-base-port", f->options.router_base_port,
                     "compose: the link router's ports start here (default 7500)");
  return {cmd,
          [f, summarize, summarize_cmd] { return summarize_cmd->parsed() ? RunSummarize(*summarize) : RunRender(*f); }};
}

}  // namespace geodesic::cli
