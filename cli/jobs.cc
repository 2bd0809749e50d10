// Whole jobs on this machine and the run directories of running ones:
// launch, wan, plan, checkpoint, status.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cluster/chunking.h"
#include "common/log.h"
#include "config/job.h"
#include "deploy/control.h"
#include "deploy/launcher.h"
#include "wan/aggregator_choice.h"
#include "wan/plan_report.h"
#include "wan/planner.h"
#include "worker/job_check.h"

namespace geodesic::cli {
namespace {

// The data, and the model on it (a TorchScript module is loaded and tried).
Status CheckModel(const deploy::LaunchOptions& launch) {
  if (launch.job_file.empty()) return Status::Ok();
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(launch.job_file, launch.overrides));
  std::string chose;
  GD_RETURN_IF_ERROR(worker::CheckDevice(job, &chose));
  if (job.training.device == TrainingDevice::kAuto) GD_LOG(INFO) << "device: " << chose;
  if (job.data.dataset == DatasetKind::kFashionMnist && job.model.name != ModelKind::kTorchScript)
    return Status::Ok();  // the launcher checks the files; the built-in models take them
  return worker::CheckModelOnData(job).status();
}

// The chunk layout of the job's model on its data (the model is built).
StatusOr<cluster::ChunkLayout> JobLayout(const JobSpec& job) {
  GD_ASSIGN_OR_RETURN(auto model, worker::CheckModelOnData(job));
  return cluster::ChunkLayout(job.ShardValues(static_cast<int64_t>(model.num_params())),
                              cluster::ChunkElemsFor(job.wire.chunk_bytes),
                              {model.block_starts().begin(), model.block_starts().end()});
}

int RunLaunch(deploy::LaunchOptions launch, const CLI::Option* job_arg) {
  SetLogPrefix("launch");
  if (job_arg->count() == 0 && launch.resume_dir.empty())
    return Fail(InvalidArgument("launch needs a job file (or --resume RUN_DIR)"));
  if (Status s = CheckModel(launch); !s.ok()) return Fail(s);
  launch.resolve_auto_aggregators = [](JobSpec* job) { return ResolveAutoAggregators(job, std::cout); };
  auto r = deploy::Launch(launch, &g_stop);
  if (!r.ok()) return Fail(r.status());
  return *r;
}

struct WanFlags {
  std::string action, run_dir, region_a, region_b;
};

int RunWan(const WanFlags& f) {
  if (f.action == "replan") {
    Status s = deploy::RequestReplan(f.run_dir);
    if (s.ok()) std::cout << "asked the coordinator to re-plan; see " << f.run_dir << "/logs\n";
    return s.ok() ? 0 : Fail(s);
  }
  if (f.region_a.empty() || f.region_b.empty()) return Fail(InvalidArgument("wan cut/heal needs two regions"));
  Status s = deploy::ControlLink(f.run_dir, f.action, f.region_a, f.region_b);
  return s.ok() ? 0 : Fail(s);
}

struct PlanFlags {
  std::string job_file;
  std::vector<std::string> overrides;
  wan::PlannerOptions options;
  double compute_ms = 0;
  bool json = false;
};

// Builds the job's model for its parameter count, plans, and compares with
// the bytes-balanced placement the coordinator uses without the planner.
int RunPlan(PlanFlags& f, const CLI::Option* compute_opt) {
  if (compute_opt->count() > 0) f.options.compute_ms = f.compute_ms;
  auto job = LoadJobFile(f.job_file, f.overrides);
  if (!job.ok()) return Fail(job.status());
  auto laid_out = JobLayout(*job);
  if (!laid_out.ok()) return Fail(laid_out.status());
  const cluster::ChunkLayout& layout = *laid_out;
  auto chosen = wan::ChooseAggregators(&*job, layout, f.options);
  if (!chosen.ok()) return Fail(chosen.status());
  auto planner = wan::Planner::Create(*job, layout, f.options);
  if (!planner.ok()) return Fail(planner.status());
  const std::vector<int32_t> balanced = cluster::PlaceChunks(layout, job->NumServers()).owner;
  const wan::Plan plan = planner->MakePlan(planner->declared_links(), {balanced});
  std::string report = wan::PlanReport(*planner, plan, {{"bytes-balanced", balanced}}, f.json);
  // The same job with an aggregator in every region, or in none.
  JobSpec other = *job;
  for (auto& r : other.regions) r.aggregator = !job->HasAggregators();
  auto other_planner = wan::Planner::Create(other, layout, f.options);
  if (!other_planner.ok()) return Fail(other_planner.status());
  const wan::Plan other_plan = other_planner->MakePlan(other_planner->declared_links(), {balanced});
  const std::string aggregators = wan::AggregatorComparison(plan, other_plan, job->HasAggregators(), f.json);
  if (f.json) {
    nlohmann::json j = nlohmann::json::parse(report);
    j["aggregators"] = nlohmann::json::parse(aggregators);
    j["aggregators"]["regions"] = nlohmann::json::parse(wan::AggregatorChoiceReport(*chosen, true));
    report = j.dump(2) + "\n";
  } else {
    report += aggregators + wan::AggregatorChoiceReport(*chosen, false);
  }
  std::cout << report;
  return 0;
}

}  // namespace

Status ResolveAutoAggregators(JobSpec* job, std::ostream& out) {
  GD_ASSIGN_OR_RETURN(cluster::ChunkLayout layout, JobLayout(*job));
  GD_ASSIGN_OR_RETURN(std::vector<wan::AggregatorChoice> chosen, wan::ChooseAggregators(job, layout));
  out << wan::AggregatorChoiceReport(chosen, false) << std::flush;
  return Status::Ok();
}

namespace {

int RunCheckpoint(const std::string& run_dir) {
  auto asked = deploy::RequestCheckpoint(run_dir);
  if (!asked.ok()) return Fail(asked.status());
  std::cout << "asked " << *asked << " server(s) for a checkpoint; see " << run_dir << "/checkpoints\n";
  return 0;
}

int RunStatus(const std::string& run_dir) {
  auto r = deploy::QueryStatus(run_dir, 3000);
  if (!r.ok()) return Fail(r.status());
  std::cout << *r << std::endl;
  return 0;
}

}  // namespace

Command AddLaunch(CLI::App& app) {
  auto launch = std::make_shared<deploy::LaunchOptions>();
  auto* cmd = app.add_subcommand("launch", "run a whole job on this machine: coordinator, servers, workers");
  auto* job_arg = cmd->add_option("job", launch->job_file, "job file (YAML)")->check(CLI::ExistingFile);
  cmd->add_option("--resume", launch->resume_dir,
                  "continue the stopped job in this run directory from its checkpoints (job file optional)")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--set", launch->overrides, "override a job-file key, e.g. training.staleness_bound=0");
  cmd->add_option("--summary", launch->summary_file, "write the job summary JSON here");
  cmd->add_option("--run-dir", launch->run_dir, "directory for logs, stats and snapshots (default runs/<job>-<time>)");
  cmd->add_option("--kill", launch->kills,
                  "fault injection: signal ROLE:ID after SECONDS of training: ROLE:ID@SECONDS[:SIGNAL], "
                  "e.g. worker:2@5 (SIGKILL), worker:2@5:STOP then worker:2@9:CONT (repeatable)");
  cmd->add_option("--cut", launch->cuts,
                  "partition on emulated links: cut regions A and B apart after SECONDS of training for "
                  "DURATION seconds: A:B@SECONDS+DURATION, e.g. us:asia@10+5 (repeatable)");
  cmd->add_option("--join", launch->joins,
                  "elastic jobs: start worker ID (an id beyond the workers the job starts with) after SECONDS of "
                  "training: worker:ID@SECONDS, e.g. worker:4@10 (repeatable); stop one with --kill worker:ID@S:TERM");
  cmd->add_flag("--restart-workers", launch->restart_workers,
                "restart a worker that dies; it rejoins at the live workers' clock (default: go on without it)");
  cmd->add_flag("--quiet", launch->quiet, "no live progress line");
  cmd->add_option("--dashboard", launch->dashboard,
                  "serve the live dashboard and the launcher's /metrics on HOST:PORT (port 0: a free one; the URL "
                  "is printed and written to RUN_DIR/http/dashboard)")
      ->default_val("127.0.0.1:0");
  cmd->add_flag_callback(
      "--no-dashboard", [launch] { launch->dashboard.clear(); }, "serve no dashboard");
  cmd->add_option("--metrics-linger", launch->metrics_linger_s,
                  "at the job's end, every process and the dashboard keep serving until their final metrics were "
                  "scraped once, at most this long (s; default 0)")
      ->check(CLI::Range(0.0, 600.0));
  cmd->add_flag_callback(
      "--no-metrics", [launch] { launch->metrics = false; },
      "start the processes without /metrics, /healthz and /readyz (bench/metrics_overhead.sh compares)");
  cmd->add_option("--dashboard-token-file", launch->dashboard_token_file,
                  "require this token (the file's first line, 16 characters or more) of every dashboard request; "
                  "secured jobs serve the dashboard only with one")
      ->check(CLI::ExistingFile);
  return {cmd, [launch, job_arg] { return RunLaunch(*launch, job_arg); }};
}

Command AddWan(CLI::App& app) {
  auto f = std::make_shared<WanFlags>();
  auto* cmd = app.add_subcommand(
      "wan", "cut or heal an emulated link of a running job, or make it re-plan its shard placement now (wan.replan)");
  cmd->add_option("action", f->action, "cut | heal | replan")
      ->required()
      ->check(CLI::IsMember({"cut", "heal", "replan"}));
  cmd->add_option("run_dir", f->run_dir, "the job's run directory")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("region_a", f->region_a, "one region (cut, heal)");
  cmd->add_option("region_b", f->region_b, "the other region (cut, heal)");
  return {cmd, [f] { return RunWan(*f); }};
}

Command AddPlan(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  auto* cmd = app.add_subcommand("plan", "print the planner's shard placement, codecs and predicted step time");
  cmd->add_option("job", f->job_file, "job file (YAML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", f->overrides, "override a job-file key, e.g. wan.replan_drift=0.3");
  auto* compute_opt = cmd->add_option("--compute-ms", f->compute_ms,
                                      "compute time of one step per worker, ms (default: 30 per batch of 64 for "
                                      "the CNN; see docs/planner.md)");
  compute_opt->check(CLI::Range(0.0, 1e6));
  cmd->add_flag("--json", f->json, "print JSON");
  return {cmd, [f, compute_opt] { return RunPlan(*f, compute_opt); }};
}

Command AddCheckpoint(CLI::App& app) {
  auto run_dir = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("checkpoint", "ask every server of a running job to write a checkpoint now");
  cmd->add_option("run_dir", *run_dir, "the job's run directory")->required()->check(CLI::ExistingDirectory);
  return {cmd, [run_dir] { return RunCheckpoint(*run_dir); }};
}

Command AddStatus(CLI::App& app) {
  auto run_dir = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("status", "print a running job's status (from its run directory) as JSON");
  cmd->add_option("run_dir", *run_dir, "the job's run directory")->required()->check(CLI::ExistingDirectory);
  return {cmd, [run_dir] { return RunStatus(*run_dir); }};
}

}  // namespace geodesic::cli
