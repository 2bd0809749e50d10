// `geodesic deploy render JOB.yaml --target hosts --out DIR`: the job laid
// out for machines the launcher does not own (deploy/render.h;
// docs/deploy.md).
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "config/job.h"
#include "deploy/render.h"

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
  auto files = deploy::Render(*job, f.options);
  if (!files.ok()) return Fail(files.status());
  if (Status s = deploy::WriteRendered(f.out, *files); !s.ok()) return Fail(s);
  if (Status s = deploy::WriteSecrets(*job, f.options, f.out); !s.ok()) return Fail(s);
  std::cout << "geodesic: rendered job '" << job->name << "' for " << f.options.target << " into " << f.out << ":";
  for (const auto& [name, _] : *files) std::cout << " " << name;
  std::cout << "\n";
  return 0;
}

}  // namespace

Command AddDeploy(CLI::App& app) {
  auto f = std::make_shared<RenderFlags>();
  auto* cmd = app.add_subcommand("deploy", "lay a job out for machines the launcher does not own");
  cmd->require_subcommand(1);
  auto* render = cmd->add_subcommand("render", "write the files that start JOB on plain hosts or on Kubernetes");
  render->add_option("job", f->job_file, "job file (YAML)")->required()->check(CLI::ExistingFile);
  render->add_option("--target", f->options.target, "hosts (one script per machine) or kubernetes")
      ->check(CLI::IsMember({"hosts", "kubernetes", "compose"}));
  render->add_option("--out", f->out, "directory to write into (created)")->required();
  render->add_option("--set", f->overrides, "override a job-file key, e.g. training.staleness_bound=0");
  render->add_option("--base-port", f->options.base_port, "ZeroMQ ports: process k listens on BASE + k");
  render->add_option("--http-base-port", f->options.http_base_port, "HTTP ports: process k serves on BASE + k");
  render->add_option("--image", f->options.image, "kubernetes: the image every pod runs (default geodesic:latest)");
  render->add_option("--pull-policy", f->options.pull_policy, "kubernetes: imagePullPolicy")
      ->check(CLI::IsMember({"Always", "IfNotPresent", "Never"}));
  render
      ->add_option("--workload", f->options.workload,
                   "kubernetes: statefulsets (a cluster) or pods (podman play kube; also a cluster)")
      ->check(CLI::IsMember({"statefulsets", "pods"}));
  render->add_option("--volume-size", f->options.volume_size, "kubernetes: each pod's data volume (default 1Gi)");
  return {cmd, [f] { return RunRender(*f); }};
}

}  // namespace geodesic::cli
