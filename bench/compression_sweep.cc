// `geodesic bench compression`: what each codec does to training. Runs the
// job once per configuration (codec, zstd stage on or off, error feedback on
// or off), all for the same number of steps, and writes a CSV, a Markdown
// table and (with python3-matplotlib) a plot of test accuracy against bytes
// per step. `--direction push` compresses pushes (pulls stay fp32), `pull`
// the opposite (error feedback does not apply: pulls send changes to the
// worker's copy, which carries what was dropped), `both` uses the codec both
// ways.

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "bench/run_job.h"
#include "common/files.h"
#include "common/log.h"
#include "config/job.h"
#include "deploy/process.h"

namespace geodesic::bench {
namespace {

using json = nlohmann::json;

struct Config {
  std::string codec;  // as in the job file, without the zstd stage
  bool zstd = false;
  bool feedback = true;
  bool momentum_correction = false;
  bool pull = false;  // compressed pulls carry what they drop in the change to the worker's copy: no "ef"
  std::string Name() const {
    return codec + (zstd ? "+zstd" : "") +
           (codec == "fp32" || pull ? ""
            : feedback              ? " ef"
                                    : " no-ef") +
           (momentum_correction ? " mc" : "");
  }
};

}  // namespace

Status RunCompressionSweep(const BenchOptions& options, const std::atomic<bool>* stop) {
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(options.job_file));
  const std::string exe = options.binary.empty() ? deploy::SelfBinary() : options.binary;
  const std::string out = options.result_file.empty() ? "runs/compression" : options.result_file;
  GD_RETURN_IF_ERROR(MakeDirs(out));

  std::vector<Config> configs;
  for (bool z : {false, true}) configs.push_back({"fp32", z, false});
  const std::string& dir = options.direction;
  if (dir != "push" && dir != "pull" && dir != "both")
    return InvalidArgument("--direction must be push, pull or both, not '" + dir + "'");
  for (const std::string& c : options.codecs)
    for (bool z : {false, true})
      for (bool ef : {true, false})
        if (ef || dir != "pull") configs.push_back({c, z, ef, false, dir == "pull"});
  if (dir != "pull")
    for (const std::string& c : options.mc_codecs) configs.push_back({c, true, true, true});

  std::ofstream csv(out + "/compression.csv");
  csv << "config,codec,zstd,error_feedback,momentum_correction,test_accuracy,bytes_per_step,push_bytes_per_step,pull_"
         "bytes_per_step,"
         "ratio_vs_fp32,steps,wall_seconds\n";
  json rows = json::array();
  double fp32_bytes = 0, fp32_acc = 0;
  for (const Config& cfg : configs) {
    if (stop->load()) return Cancelled("interrupted");
    std::string codec = cfg.codec + (cfg.zstd ? "+zstd" : "");
    std::string run = out + "/run-" + std::to_string(rows.size());
    JobRun jr{exe,
              options.job_file,
              run,
              {"compression.push=" + (dir == "pull" ? std::string("fp32") : codec),
               "compression.pull=" + (dir == "push" ? std::string("fp32") : codec),
               std::string("compression.error_feedback=") + (cfg.feedback ? "true" : "false"),
               std::string("compression.momentum_correction=") + (cfg.momentum_correction ? "true" : "false"),
               "eval.snapshot_every_s=100000"},  // only the final accuracy matters here
              {}};
    if (options.epochs > 0) jr.overrides.push_back("training.epochs=" + std::to_string(options.epochs));
    GD_LOG(INFO) << "[" << rows.size() + 1 << "/" << configs.size() << "] " << cfg.Name();
    // --resume: a finished run of the same configuration is reused.
    StatusOr<json> summary = NotFound("");
    if (options.resume) {
      auto text = ReadFile(run + "/summary.json");
      json old = text.ok() ? json::parse(*text, nullptr, false) : json();
      if (old.is_object() && old.value("status", "") == "finished" && old.contains("compression")) {
        const json& c = old["compression"];
        if (c.value("push", "") == (dir == "pull" ? std::string("fp32") : codec) &&
            c.value("pull", "") == (dir == "push" ? std::string("fp32") : codec) &&
            c.value("error_feedback", false) == cfg.feedback &&
            c.value("momentum_correction", false) == cfg.momentum_correction)
          summary = old;
      }
    }
    if (!summary.ok()) summary = RunJob(jr, stop);
    if (!summary.ok()) return summary.status().Annotate(cfg.Name());
    const json& s = *summary;
    double acc = s["test_accuracy"].is_number() ? s["test_accuracy"].get<double>() : 0.0;
    double bytes = s["bytes_per_step"]["total"].get<double>();
    if (cfg.codec == "fp32" && !cfg.zstd) fp32_bytes = bytes, fp32_acc = acc;
    const int64_t steps = StepsOf(s);
    json row = {{"config", cfg.Name()},
                {"codec", codec},
                {"zstd", cfg.zstd},
                {"error_feedback", cfg.feedback},
                {"momentum_correction", cfg.momentum_correction},
                {"test_accuracy", acc},
                {"bytes_per_step", bytes},
                {"push_bytes_per_step", s["bytes_per_step"]["push"]},
                {"pull_bytes_per_step", s["bytes_per_step"]["pull"]},
                {"ratio_vs_fp32", fp32_bytes > 0 ? fp32_bytes / bytes : 1.0},
                {"steps", steps},
                {"wall_seconds", s["wall_seconds"]}};
    rows.push_back(row);
    csv << row["config"].get<std::string>() << "," << codec << "," << cfg.zstd << "," << cfg.feedback << ","
        << cfg.momentum_correction << "," << acc << "," << bytes << "," << row["push_bytes_per_step"] << ","
        << row["pull_bytes_per_step"] << "," << row["ratio_vs_fp32"] << "," << steps << "," << row["wall_seconds"]
        << "\n";
    csv.flush();
    GD_LOG(INFO) << cfg.Name() << ": accuracy " << acc << ", " << bytes << " bytes/step ("
                 << row["ratio_vs_fp32"].get<double>() << "x fewer than fp32)";
  }

  std::ofstream md(out + "/compression.md");
  md << "Compressed: "
     << (dir == "both"   ? "pushes and pulls"
         : dir == "push" ? "pushes (pulls fp32)"
                         : "pulls (pushes fp32)")
     << "; " << (rows.empty() ? 0 : rows[0]["steps"].get<int64_t>()) << " steps per worker for every row.\n\n";
  md << "| configuration | test accuracy | vs fp32 (points) | push bytes/step | pull bytes/step | total | x fewer "
        "than fp32 (push) | x fewer (pull) | x fewer (total) |\n";
  md << "|---|---|---|---|---|---|---|---|---|\n";
  const double fp32_push = rows.empty() ? 1.0 : rows[0]["push_bytes_per_step"].get<double>();
  const double fp32_pull = rows.empty() ? 1.0 : rows[0]["pull_bytes_per_step"].get<double>();
  for (const auto& r : rows) {
    char line[320];
    std::snprintf(line, sizeof(line), "| %s | %.4f | %+.2f | %.0f | %.0f | %.0f | %.1f | %.1f | %.1f |\n",
                  r["config"].get<std::string>().c_str(), r["test_accuracy"].get<double>(),
                  100 * (r["test_accuracy"].get<double>() - fp32_acc), r["push_bytes_per_step"].get<double>(),
                  r["pull_bytes_per_step"].get<double>(), r["bytes_per_step"].get<double>(),
                  fp32_push / r["push_bytes_per_step"].get<double>(),
                  fp32_pull / r["pull_bytes_per_step"].get<double>(), r["ratio_vs_fp32"].get<double>());
    md << line;
  }
  md.close();
  GD_RETURN_IF_ERROR(WriteFileAtomic(out + "/compression.json", rows.dump(2)));

  // The plot, if matplotlib is there (Debian's python3-matplotlib).
  std::string plot = std::string(GEODESIC_SOURCE_DIR) + "/bench/plot_compression.py";
  std::string column = dir == "push" ? "push_bytes_per_step" : dir == "pull" ? "pull_bytes_per_step" : "bytes_per_step";
  std::string cmd =
      "/usr/bin/python3 '" + plot + "' '" + out + "/compression.csv' '" + out + "/compression.png' " + column;
  if (std::system(cmd.c_str()) != 0) GD_LOG(WARNING) << "no plot (is python3-matplotlib installed?)";
  std::cout << "wrote " << out << "/compression.{csv,md,json,png}" << std::endl;
  std::ifstream table(out + "/compression.md");
  std::cout << table.rdbuf();
  return Status::Ok();
}

}  // namespace geodesic::bench
