// `geodesic bench wan`: issue 4's experiment. Trains a multi-region job
// (default examples/three_regions.yaml: us, eu, asia, 2 workers each) in
// several configurations, all for the same number of steps, and reports the
// time each took to reach the job's target accuracy, with the accuracy
// curves and the bytes every link carried:
//   lan        no link emulation (everything at loopback speed)
//   wan-bsp    emulated links, fp32, BSP (staleness bound 0)
//   wan-ssp    emulated links, fp32, bounded staleness
//   wan-ssp-best  emulated links, bounded staleness, compression, the planner
//   wan-bsp-best  the same with BSP (only when asked for by --configs)
//   lan-local  no emulation, local SGD (rounds of --local-steps steps,
//              averaged, overlapped with the next round), int8 pushes
//              and pulls
//   wan-local  the same over the emulated links, with the planner
//   lan-diloco, wan-diloco  the same rounds with DiLoCo's optimizers
//              (inner AdamW, outer Nesterov momentum; only when asked for
//              by --configs)
//   ddp        PyTorch DistributedDataParallel (gloo, python3-torch) with
//              the same model, data, batch and 6 ranks over the kernel
//              links (bench/ddp_netns.sh; root), stopped after --ddp-cap-x
//              times the best Geodesic WAN time to the target
// Every configuration is compared with the LAN run (lan) and, where it has
// one, with its own configuration on the LAN (wan-bsp: lan; wan-local:
// lan-local) and with the fastest configuration without emulation (vs best
// LAN). Writes wan.{csv,md,json}, curves.csv and links.csv to --out, and a
// plot (accuracy vs wall time; bytes per link) with python3-matplotlib. With
// --repeats N each configuration runs N times in ABBA order (the list, then
// reversed, ...): wan-runs.{csv,md,json} hold every run with ratios inside
// its pass, wan.* the medians per configuration.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "bench/bench.h"
#include "bench/run_job.h"
#include "bench/wan_table.h"
#include "common/build_paths.h"
#include "common/files.h"
#include "common/log.h"
#include "config/job.h"
#include "deploy/process.h"

namespace geodesic::bench {
namespace {

using json = nlohmann::json;

struct WanConfig {
  std::string name;
  std::string what;
  std::vector<std::string> overrides;
  std::string own_lan;     // the same configuration without emulation, if run
  bool local = false;      // local SGD: runs --local-epochs
  bool by_default = true;  // run when --configs is not given
};

std::vector<WanConfig> Configs(const BenchOptions& o) {
  const std::string bound = std::to_string(o.staleness_bound);
  const std::string h = std::to_string(o.local_steps);
  const std::string overlap = o.overlap_rounds ? "true" : "false";
  const int ahead = o.overlap_rounds ? o.overlap_steps : 0;
  const std::string overlapped =
      !o.overlap_rounds ? " not overlapped"
      : ahead > 0       ? " overlapped, averages folded in on arrival or after " + std::to_string(ahead) + " steps"
                        : " overlapped";
  const std::vector<std::string> local = {"training.local_steps=" + h,
                                          "training.overlap_rounds=" + overlap,
                                          "training.overlap_steps=" + std::to_string(ahead),
                                          "training.fragments=" + std::to_string(o.fragments),
                                          "training.staleness_bound=0",
                                          "compression.push=int8",
                                          "compression.pull=int8"};
  const std::vector<std::string> compress = {"compression.push=topk:0.005+zstd", "compression.momentum_correction=true",
                                             "compression.pull=int8"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::string fragmented =
      o.fragments > 1 ? ", one of " + std::to_string(o.fragments) + " fragments synchronized per round" : "";
  const std::string local_what =
      "local SGD, rounds of " + h + " steps" + overlapped + fragmented + ", push and pull int8";
  // DiLoCo (Douillard et al.): AdamW inside the rounds, SGD with Nesterov
  // momentum on the rounds' average; the defaults are docs/wan.md's tuning.
  const std::vector<std::string> diloco =
      with(local, {"optimizer.name=adamw", "optimizer.lr=" + o.diloco_inner_lr, "optimizer.weight_decay=0.01",
                   "training.outer_lr=" + o.diloco_outer_lr, "training.outer_momentum=" + o.diloco_outer_momentum,
                   "training.outer_nesterov=true"});
  const std::string diloco_what = "DiLoCo: rounds of " + h + " steps of AdamW (lr " + o.diloco_inner_lr + ")" +
                                  overlapped + fragmented + ", outer Nesterov SGD (lr " + o.diloco_outer_lr +
                                  ", momentum " + o.diloco_outer_momentum + "), push and pull int8";
  return {
      {"lan", "no emulation (loopback), BSP", {"wan.emulation=none", "wan.links=[]", "training.staleness_bound=0"}, ""},
      {"wan-bsp", "WAN, fp32, BSP", {"wan.planner=false", "training.staleness_bound=0"}, "lan"},
      {"wan-ssp",
       "WAN, fp32, staleness bound " + bound,
       {"training.staleness_bound=" + bound, "wan.planner=false"},
       ""},
      {"wan-ssp-best",
       "WAN, staleness bound " + bound + ", push topk:0.005+zstd with momentum correction, pull int8, planner",
       with({"training.staleness_bound=" + bound, "wan.planner=true"}, compress), ""},
      {"wan-bsp-best", "WAN, BSP, the same compression, planner",
       with({"training.staleness_bound=0", "wan.planner=true"}, compress), "", false, false},
      {"lan-local", "no emulation, " + local_what, with({"wan.emulation=none", "wan.links=[]"}, local), "", true},
      {"wan-local", "WAN, " + local_what + ", planner", with({"wan.planner=true"}, local), "lan-local", true},
      {"lan-diloco", "no emulation, " + diloco_what, with({"wan.emulation=none", "wan.links=[]"}, diloco), "", true,
       false},
      {"wan-diloco", "WAN, " + diloco_what + ", planner", with({"wan.planner=true"}, diloco), "lan-diloco", true,
       false},
      {"ddp", "PyTorch DDP (gloo), BSP, over the kernel-emulated links", {}, "", false},
  };
}

// The fastest time to the target of the Geodesic runs over emulated links.
json BestWanSeconds(const json& rows) {
  json best;
  for (const auto& r : rows)
    if (r["emulation"] != "none" && r["config"] != "ddp" && r["seconds_to_target"].is_number() &&
        (!best.is_number() || r["seconds_to_target"].get<double>() < best.get<double>()))
      best = r["seconds_to_target"];
  return best;
}

// Configuration (e): bench/ddp_netns.sh over the kernel links, capped at
// ddp_cap_x times the best Geodesic WAN time (ddp_max_s without one).
StatusOr<json> RunDdp(const BenchOptions& o, const std::string& out, const json& best, double target,
                      std::ofstream& curves, const std::atomic<bool>* stop) {
  if (geteuid() != 0) return FailedPrecondition("needs root for the kernel-emulated links (deploy/netns)");
  const double cap = best.is_number() ? o.ddp_cap_x * best.get<double>() : o.ddp_max_s;
  const std::string dir = out + "/ddp";
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  // Enough epochs that the time cap, not the data, ends a run that misses
  // the target; the wall-clock timeout covers start-up and evaluation.
  const std::vector<std::string> argv = {"/usr/bin/bash",
                                         SourcePath("bench/ddp_netns.sh"),
                                         "--mode",
                                         "netns",
                                         "--epochs",
                                         "50",
                                         "--timeout",
                                         std::to_string(static_cast<int>(cap * 2 + 300)),
                                         "--out",
                                         dir,
                                         "--",
                                         "--max-train-s",
                                         std::to_string(cap),
                                         "--eval-every-s",
                                         std::to_string(o.snapshot_every_s * 4),
                                         "--target",
                                         std::to_string(target)};
  GD_LOG(INFO) << "ddp: capped at " << cap << " s of training (" << (best.is_number() ? "" : "no Geodesic WAN time; ")
               << o.ddp_cap_x << "x the best Geodesic WAN time); log " << out << "/ddp.log";
  GD_RETURN_IF_ERROR(RunLogged("bench/ddp_netns.sh", argv, out + "/ddp.log", stop));
  GD_ASSIGN_OR_RETURN(json r, ReadJsonFile(dir + "/netns/result.json"));
  const double train = r.value("train_seconds", 0.0);
  const int64_t steps = r.value("steps", int64_t{0});
  for (const auto& p : r["accuracy_curve"])
    curves << "ddp," << p[0].get<double>() << "," << p[1].get<int64_t>() << "," << p[2].get<double>() << "\n";
  GD_LOG(INFO) << "ddp: accuracy " << r["final_test_accuracy"] << ", " << target << " after " << r["seconds_to_target"]
               << " s, " << train << " s of training" << (r.value("stopped_at_time_cap", false) ? " (capped)" : "");
  return json{{"config", "ddp"},
              {"what", "PyTorch DDP (gloo), same CNN, data, batch and 6 ranks over the kernel-emulated links"},
              {"emulation", "netns"},
              {"test_accuracy", r["final_test_accuracy"]},
              {"seconds_to_target", r["seconds_to_target"]},
              {"wall_seconds", train},
              {"time_cap_seconds", cap},
              {"stopped_at_time_cap", r.value("stopped_at_time_cap", false)},
              {"steps", steps},
              {"observed_step_ms", steps > 0 ? 1000 * train / steps : 0.0},
              {"torch", r.value("torch", std::string())}};
}

// The configurations --configs names (default: those run by default).
StatusOr<std::vector<WanConfig>> SelectConfigs(const BenchOptions& options) {
  std::vector<WanConfig> configs;
  std::string names;
  for (const WanConfig& c : Configs(options)) {
    names += (names.empty() ? "" : ", ") + c.name;
    if (options.configs.empty()
            ? c.by_default
            : std::find(options.configs.begin(), options.configs.end(), c.name) != options.configs.end())
      configs.push_back(c);
  }
  if (configs.empty()) return InvalidArgument("--configs: none of " + names);
  for (const std::string& n : options.configs)
    if (std::none_of(configs.begin(), configs.end(), [&](const WanConfig& c) { return c.name == n; }))
      return InvalidArgument("--configs: no configuration " + n + "; there are " + names);
  return configs;
}

// The per-configuration files: accuracy curves and bytes per link.
struct CurveFiles {
  std::ofstream curves, links;
};

void AppendCurvesAndLinks(const std::string& name, const json& s, CurveFiles& files) {
  for (const auto& p : s["accuracy_curve"])
    files.curves << name << "," << p[0].get<double>() << "," << p[1].get<int64_t>() << "," << p[2].get<double>()
                 << "\n";
  if (s.contains("links"))
    for (const auto& l : s["links"])
      files.links << name << "," << l["from"].get<std::string>() << "," << l["to"].get<std::string>() << ","
                  << l.value("bytes", json(0)) << "," << l["bandwidth_mbit"] << "," << l.value("probed_mbit", json())
                  << "," << l.value("probed_rtt_ms", json()) << "\n";
  files.curves.flush();
  files.links.flush();
}

// The table row of a finished Geodesic run.
json RowOf(const WanConfig& c, const JobSpec& job, const json& s) {
  const int64_t steps = StepsOf(s);
  const double wall = s.value("wall_seconds", 0.0);
  json row = {{"config", c.name},
              {"what", c.what},
              {"own_lan", c.own_lan},
              {"emulation", c.name.starts_with("lan") ? "none" : ToString(job.wan.emulation)},
              {"test_accuracy", s["test_accuracy"]},
              {"seconds_to_target", s["seconds_to_target"]},
              {"wall_seconds", wall},
              {"steps", steps},
              {"observed_step_ms", steps > 0 ? 1000 * wall / steps : 0.0},
              {"bytes_per_step", s.value("bytes_per_step", json::object())},
              {"bytes_per_sample", s.value("bytes_per_sample", json())},
              {"compute_utilization", MeanComputeUtilization(s)},
              {"step_time_breakdown", s["step_time_breakdown"]}};
  if (s.contains("plan")) {
    row["plan"] = s["plan"];
    row["predicted_step_ms"] = s["plan"]["predicted_step_ms"];
  }
  return row;
}

// Runs the configurations in order, each as a launched job (ddp: the
// PyTorch baseline), and returns their rows.
class WanRunner {
 public:
  WanRunner(const BenchOptions& options, const JobSpec& job, std::string out, const std::atomic<bool>* stop)
      : o_(options),
        job_(job),
        exe_(options.binary.empty() ? deploy::SelfBinary() : options.binary),
        out_(std::move(out)),
        stop_(stop) {
    files_.curves.open(out_ + "/curves.csv");
    files_.links.open(out_ + "/links.csv");
    files_.curves << "config,seconds,step,accuracy\n";
    files_.links << "config,from,to,bytes,configured_mbit,probed_mbit,probed_rtt_ms\n";
  }

  // Every run's row, with "repeat" (1-based); DDP runs once, in the first pass.
  StatusOr<json> RunAll(const std::vector<WanConfig>& configs) {
    json rows = json::array();
    const size_t total = configs.size() * o_.repeats;
    for (int pass = 0; pass < o_.repeats; ++pass) {
      std::vector<WanConfig> order = configs;
      if (pass % 2 == 1) std::reverse(order.begin(), order.end());
      for (const WanConfig& c : order) {
        if (c.name == "ddp" && pass > 0) continue;
        GD_LOG(INFO) << "[" << rows.size() + 1 << "/" << total << "] " << c.name << ": " << c.what;
        GD_ASSIGN_OR_RETURN(json row, c.name == "ddp" ? RunDdpOnce(rows) : Run(c, pass + 1));
        row["repeat"] = pass + 1;
        row["run"] = RunName(c.name, pass + 1);
        rows.push_back(row);
      }
    }
    return rows;
  }

 private:
  // The run's name in file names and the curves: the configuration's, with
  // ".rK" when configurations are repeated.
  std::string RunName(const std::string& config, int repeat) const {
    return o_.repeats > 1 ? config + ".r" + std::to_string(repeat) : config;
  }

  StatusOr<json> RunDdpOnce(const json& rows) {
    auto row = RunDdp(o_, out_, BestWanSeconds(rows), job_.eval.target_accuracy, files_.curves, stop_);
    if (!row.ok()) return row.status().Annotate("ddp");
    files_.curves.flush();
    return row;
  }

  StatusOr<json> Run(const WanConfig& c, int repeat) {
    const std::string run = RunName(c.name, repeat);
    JobRun jr{exe_, o_.job_file, out_ + "/" + run, o_.overrides, {}};
    jr.overrides.insert(jr.overrides.end(), c.overrides.begin(), c.overrides.end());
    if (const auto compute = ComputeMsFor(c)) jr.overrides.push_back("wan.compute_ms=" + std::to_string(*compute));
    jr.overrides.push_back("eval.snapshot_every_s=" + std::to_string(o_.snapshot_every_s));
    if (c.local)
      jr.overrides.push_back("training.epochs=" + std::to_string(o_.local_epochs));
    else if (o_.epochs > 0)
      jr.overrides.push_back("training.epochs=" + std::to_string(o_.epochs));
    auto summary = RunJob(jr, stop_);
    if (!summary.ok()) return summary.status().Annotate(run);
    const json& s = *summary;
    json row = RowOf(c, job_, s);
    const int64_t steps = row["steps"];
    const double wall = row["wall_seconds"];
    if (steps > 0) step_ms_[c.name] = 1000 * wall / steps;
    AppendCurvesAndLinks(run, s, files_);
    GD_LOG(INFO) << run << ": accuracy " << s["test_accuracy"] << ", " << job_.eval.target_accuracy << " after "
                 << s["seconds_to_target"] << " s, " << wall << " s of training";
    return row;
  }

  const BenchOptions& o_;
  const JobSpec& job_;
  const std::string exe_, out_;
  const std::atomic<bool>* stop_;
  CurveFiles files_;
  // The planner's compute term is calibrated by a LAN run's step time: on
  // one machine, workers share its cores, which no constant can know. A
  // configuration takes its own LAN twin's step (a local SGD step on the
  // LAN has no exchange in it); without one, local SGD takes any local LAN
  // run's and the rest BSP's on the LAN. None: the job's own estimate.
  std::optional<double> ComputeMsFor(const WanConfig& c) const {
    const std::vector<std::string> order = c.local ? std::vector<std::string>{c.own_lan, "lan-local", "lan-diloco"}
                                                   : std::vector<std::string>{c.own_lan, "lan"};
    for (const auto& name : order)
      if (auto it = step_ms_.find(name); !name.empty() && it != step_ms_.end()) return it->second;
    return std::nullopt;
  }

  std::map<std::string, double> step_ms_;  // observed ms per step, by configuration
};

}  // namespace

Status RunWanExperiment(const BenchOptions& options, const std::atomic<bool>* stop) {
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(options.job_file, options.overrides));
  if (job.wan.links.empty()) return InvalidArgument(options.job_file + ": the experiment needs wan.links");
  const std::string out = options.result_file.empty() ? "runs/wan" : options.result_file;
  GD_RETURN_IF_ERROR(MakeDirs(out));
  GD_ASSIGN_OR_RETURN(std::vector<WanConfig> configs, SelectConfigs(options));
  GD_ASSIGN_OR_RETURN(json runs, WanRunner(options, job, out, stop).RunAll(configs));
  json rows = runs;
  if (options.repeats > 1) {
    AddRatiosPerPass(runs, options.repeats);
    WriteTables(runs, job.eval.target_accuracy, out, "wan-runs");
    GD_RETURN_IF_ERROR(WriteFileAtomic(out + "/wan-runs.json", runs.dump(2)));
    std::vector<std::string> names;
    for (const WanConfig& c : configs) names.push_back(c.name);
    rows = Medians(runs, names);
  }
  AddRatios(rows);
  WriteTables(rows, job.eval.target_accuracy, out, "wan");
  GD_RETURN_IF_ERROR(WriteFileAtomic(out + "/wan.json", rows.dump(2)));
  std::string plot = SourcePath("bench/plot_wan.py");
  std::string cmd = "/usr/bin/python3 '" + plot + "' '" + out + "'";
  if (std::system(cmd.c_str()) != 0) GD_LOG(WARNING) << "no plot (is python3-matplotlib installed?)";
  std::cout << "wrote " << out << "/{wan.csv,wan.md,wan.json,curves.csv,links.csv,wan.png}"
            << (options.repeats > 1 ? " and every run in wan-runs.{csv,md,json}; the medians of " +
                                          std::to_string(options.repeats) + " runs each:"
                                    : "")
            << "\n";
  std::ifstream table(out + "/wan.md");
  std::cout << table.rdbuf();
  return Status::Ok();
}

}  // namespace geodesic::bench
