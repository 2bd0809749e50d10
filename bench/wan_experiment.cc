// `geodesic bench wan`: issue 4's experiment. Trains a multi-region job
// (default examples/three_regions.yaml: us, eu, asia, 2 workers each) in
// several configurations, all for the same number of steps, and reports the
// time each took to reach the job's target accuracy, with the accuracy
// curves and the bytes every link carried:
//   lan        no link emulation (everything at loopback speed)
//   wan-bsp    emulated links, fp32, BSP (staleness bound 0)
//   wan-ssp    emulated links, fp32, bounded staleness
//   wan-ssp-best  emulated links, bounded staleness, compression, the planner
//   wan-bsp-best  the same with BSP
// Writes wan.{csv,md,json}, curves.csv and links.csv to --out, and a plot
// (accuracy vs wall time; bytes per link) with python3-matplotlib.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "bench/run_job.h"
#include "common/files.h"
#include "common/job.h"
#include "common/log.h"
#include "deploy/process.h"

namespace geodesic::bench {
namespace {

using json = nlohmann::json;

struct WanConfig {
  std::string name;
  std::string what;
  std::vector<std::string> overrides;
};

std::vector<WanConfig> Configs(const BenchOptions& o) {
  const std::string bound = std::to_string(o.staleness_bound);
  const std::vector<std::string> compress = {"compression.push=topk:0.005+zstd", "compression.momentum_correction=true",
                                             "compression.pull=fp16"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  return {
      {"lan", "no emulation (loopback), BSP", {"wan.emulation=none", "wan.links=[]"}},
      {"wan-bsp", "WAN, fp32, BSP", {"wan.planner=false"}},
      {"wan-ssp", "WAN, fp32, staleness bound " + bound, {"training.staleness_bound=" + bound, "wan.planner=false"}},
      {"wan-ssp-best",
       "WAN, staleness bound " + bound + ", push topk:0.005+zstd with momentum correction, pull fp16, planner",
       with({"training.staleness_bound=" + bound, "wan.planner=true"}, compress)},
      {"wan-bsp-best", "WAN, BSP, the same compression, planner",
       with({"training.staleness_bound=0", "wan.planner=true"}, compress)},
  };
}

}  // namespace

Status RunWanExperiment(const BenchOptions& options, const std::atomic<bool>* stop) {
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(options.job_file, options.overrides));
  if (job.wan.links.empty()) return InvalidArgument(options.job_file + ": the experiment needs wan.links");
  const std::string exe = options.binary.empty() ? deploy::SelfBinary() : options.binary;
  const std::string out = options.result_file.empty() ? "runs/wan" : options.result_file;
  GD_RETURN_IF_ERROR(MakeDirs(out));

  std::vector<WanConfig> configs;
  for (const WanConfig& c : Configs(options))
    if (options.configs.empty() ||
        std::find(options.configs.begin(), options.configs.end(), c.name) != options.configs.end())
      configs.push_back(c);
  if (configs.empty()) return InvalidArgument("--configs: none of lan, wan-bsp, wan-ssp, wan-ssp-best, wan-bsp-best");

  std::ofstream curves(out + "/curves.csv"), links(out + "/links.csv");
  curves << "config,seconds,step,accuracy\n";
  links << "config,from,to,bytes,configured_mbit,probed_mbit,probed_rtt_ms\n";
  json rows = json::array();
  // The planner's compute term is calibrated by the LAN run's step time: on
  // one machine, workers share its cores, which no constant can know.
  std::string compute_ms;
  for (const WanConfig& c : configs) {
    JobRun jr{exe, options.job_file, out + "/" + c.name, options.overrides, {}};
    jr.overrides.insert(jr.overrides.end(), c.overrides.begin(), c.overrides.end());
    if (!compute_ms.empty()) jr.overrides.push_back("wan.compute_ms=" + compute_ms);
    jr.overrides.push_back("eval.snapshot_every_s=" + std::to_string(options.snapshot_every_s));
    if (options.epochs > 0) jr.overrides.push_back("training.epochs=" + std::to_string(options.epochs));
    GD_LOG(INFO) << "[" << rows.size() + 1 << "/" << configs.size() << "] " << c.name << ": " << c.what;
    auto summary = RunJob(jr, stop);
    if (!summary.ok()) return summary.status().Annotate(c.name);
    const json& s = *summary;
    const int64_t steps = StepsOf(s);
    double wall = s.value("wall_seconds", 0.0);
    json row = {{"config", c.name},
                {"what", c.what},
                {"test_accuracy", s["test_accuracy"]},
                {"seconds_to_target", s["seconds_to_target"]},
                {"wall_seconds", wall},
                {"steps", steps},
                {"observed_step_ms", steps > 0 ? 1000 * wall / steps : 0.0},
                {"bytes_per_step", s.value("bytes_per_step", json::object())},
                {"step_time_breakdown", s["step_time_breakdown"]}};
    if (s.contains("plan")) {
      row["plan"] = s["plan"];
      row["predicted_step_ms"] = s["plan"]["predicted_step_ms"];
    }
    if (c.name == "lan" && steps > 0) compute_ms = std::to_string(1000 * wall / steps);
    rows.push_back(row);
    for (const auto& p : s["accuracy_curve"])
      curves << c.name << "," << p[0].get<double>() << "," << p[1].get<int64_t>() << "," << p[2].get<double>() << "\n";
    if (s.contains("links"))
      for (const auto& l : s["links"])
        links << c.name << "," << l["from"].get<std::string>() << "," << l["to"].get<std::string>() << ","
              << l.value("bytes", json(0)) << "," << l["bandwidth_mbit"] << "," << l.value("probed_mbit", json()) << ","
              << l.value("probed_rtt_ms", json()) << "\n";
    curves.flush();
    links.flush();
    GD_LOG(INFO) << c.name << ": accuracy " << s["test_accuracy"] << ", " << job.eval.target_accuracy << " after "
                 << s["seconds_to_target"] << " s, " << wall << " s of training";
  }

  // The table, with ratios to the LAN time.
  double lan = 0;
  for (const auto& r : rows)
    if (r["config"] == "lan" && r["seconds_to_target"].is_number()) lan = r["seconds_to_target"].get<double>();
  std::ofstream md(out + "/wan.md"), csv(out + "/wan.csv");
  csv << "config,test_accuracy,seconds_to_target,vs_lan,wall_seconds,steps,observed_step_ms,predicted_step_ms\n";
  md << "| configuration | time to " << job.eval.target_accuracy << " (s) | vs LAN | final accuracy | "
     << "training (s) | steps | step (ms) | predicted step (ms) |\n|---|---|---|---|---|---|---|---|\n";
  for (auto& r : rows) {
    json t = r["seconds_to_target"];
    r["vs_lan"] = lan > 0 && t.is_number() ? json(t.get<double>() / lan) : json();
    auto num = [](const json& v, const char* fmt, const char* missing = "not reached") {
      if (!v.is_number()) return std::string(missing);
      char b[64];
      std::snprintf(b, sizeof(b), fmt, v.get<double>());
      return std::string(b);
    };
    csv << r["config"].get<std::string>() << "," << r["test_accuracy"] << "," << t << "," << r["vs_lan"] << ","
        << r["wall_seconds"] << "," << r["steps"] << "," << r["observed_step_ms"] << ","
        << r.value("predicted_step_ms", json()) << "\n";
    md << "| " << r["config"].get<std::string>() << " (" << r["what"].get<std::string>() << ") | " << num(t, "%.1f")
       << " | " << num(r["vs_lan"], "%.2fx") << " | " << num(r["test_accuracy"], "%.4f") << " | "
       << num(r["wall_seconds"], "%.1f") << " | " << r["steps"] << " | " << num(r["observed_step_ms"], "%.0f") << " | "
       << num(r.value("predicted_step_ms", json()), "%.0f", "-") << " |\n";
  }
  md.close();
  csv.close();
  GD_RETURN_IF_ERROR(WriteFileAtomic(out + "/wan.json", rows.dump(2)));
  std::string plot = std::string(GEODESIC_SOURCE_DIR) + "/bench/plot_wan.py";
  std::string cmd = "/usr/bin/python3 '" + plot + "' '" + out + "'";
  if (std::system(cmd.c_str()) != 0) GD_LOG(WARNING) << "no plot (is python3-matplotlib installed?)";
  std::cout << "wrote " << out << "/{wan.csv,wan.md,wan.json,curves.csv,links.csv,wan.png}\n";
  std::ifstream table(out + "/wan.md");
  std::cout << table.rdbuf();
  return Status::Ok();
}

}  // namespace geodesic::bench
