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
#include "common/build_paths.h"
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

// fp32 with and without zstd, then every codec with and without zstd and
// error feedback, then the momentum-corrected ones.
StatusOr<std::vector<Config>> SweepConfigs(const BenchOptions& options) {
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
  return configs;
}

// The sweep's runs, one per configuration, and their rows.
class Sweep {
 public:
  Sweep(const BenchOptions& options, std::string out)
      : o_(options), exe_(options.binary.empty() ? deploy::SelfBinary() : options.binary), out_(std::move(out)) {}

  StatusOr<json> RunAll(const std::vector<Config>& configs, const std::atomic<bool>* stop) {
    std::ofstream csv(out_ + "/compression.csv");
    csv << "config,codec,zstd,error_feedback,momentum_correction,test_accuracy,bytes_per_step,push_bytes_per_step,"
           "pull_bytes_per_step,ratio_vs_fp32,steps,wall_seconds\n";
    json rows = json::array();
    for (const Config& cfg : configs) {
      if (stop->load()) return Cancelled("interrupted");
      const std::string run = out_ + "/run-" + std::to_string(rows.size());
      GD_LOG(INFO) << "[" << rows.size() + 1 << "/" << configs.size() << "] " << cfg.Name();
      StatusOr<json> summary = o_.resume ? Finished(run, cfg) : NotFound("");
      if (!summary.ok()) summary = RunJob(Job(run, cfg), stop);
      if (!summary.ok()) return summary.status().Annotate(cfg.Name());
      json row = Row(cfg, *summary);
      rows.push_back(row);
      csv << row["config"].get<std::string>() << "," << row["codec"].get<std::string>() << "," << cfg.zstd << ","
          << cfg.feedback << "," << cfg.momentum_correction << "," << row["test_accuracy"].get<double>() << ","
          << row["bytes_per_step"].get<double>() << "," << row["push_bytes_per_step"] << ","
          << row["pull_bytes_per_step"] << "," << row["ratio_vs_fp32"] << "," << row["steps"] << ","
          << row["wall_seconds"] << "\n";
      csv.flush();
      GD_LOG(INFO) << cfg.Name() << ": accuracy " << row["test_accuracy"].get<double>() << ", "
                   << row["bytes_per_step"].get<double>() << " bytes/step (" << row["ratio_vs_fp32"].get<double>()
                   << "x fewer than fp32)";
    }
    return rows;
  }

  double fp32_accuracy() const { return fp32_acc_; }

 private:
  std::string Codec(const Config& cfg) const { return cfg.codec + (cfg.zstd ? "+zstd" : ""); }
  std::string PushCodec(const Config& cfg) const { return o_.direction == "pull" ? "fp32" : Codec(cfg); }
  std::string PullCodec(const Config& cfg) const { return o_.direction == "push" ? "fp32" : Codec(cfg); }

  JobRun Job(const std::string& run, const Config& cfg) const {
    JobRun jr{exe_,
              o_.job_file,
              run,
              {"compression.push=" + PushCodec(cfg), "compression.pull=" + PullCodec(cfg),
               std::string("compression.error_feedback=") + (cfg.feedback ? "true" : "false"),
               std::string("compression.momentum_correction=") + (cfg.momentum_correction ? "true" : "false"),
               "eval.snapshot_every_s=100000"},  // only the final accuracy matters here
              {}};
    if (o_.epochs > 0) jr.overrides.push_back("training.epochs=" + std::to_string(o_.epochs));
    return jr;
  }

  // --resume: the summary of a finished run of the same configuration in
  // `run`, else NotFound.
  StatusOr<json> Finished(const std::string& run, const Config& cfg) const {
    auto text = ReadFile(run + "/summary.json");
    json old = text.ok() ? json::parse(*text, nullptr, false) : json();
    if (old.is_object() && old.value("status", "") == "finished" && old.contains("compression")) {
      const json& c = old["compression"];
      if (c.value("push", "") == PushCodec(cfg) && c.value("pull", "") == PullCodec(cfg) &&
          c.value("error_feedback", false) == cfg.feedback &&
          c.value("momentum_correction", false) == cfg.momentum_correction)
        return old;
    }
    return NotFound("");
  }

  json Row(const Config& cfg, const json& s) {
    double acc = s["test_accuracy"].is_number() ? s["test_accuracy"].get<double>() : 0.0;
    double bytes = s["bytes_per_step"]["total"].get<double>();
    if (cfg.codec == "fp32" && !cfg.zstd) fp32_bytes_ = bytes, fp32_acc_ = acc;
    return {{"config", cfg.Name()},
            {"codec", Codec(cfg)},
            {"zstd", cfg.zstd},
            {"error_feedback", cfg.feedback},
            {"momentum_correction", cfg.momentum_correction},
            {"test_accuracy", acc},
            {"bytes_per_step", bytes},
            {"push_bytes_per_step", s["bytes_per_step"]["push"]},
            {"pull_bytes_per_step", s["bytes_per_step"]["pull"]},
            {"ratio_vs_fp32", fp32_bytes_ > 0 ? fp32_bytes_ / bytes : 1.0},
            {"steps", StepsOf(s)},
            {"wall_seconds", s["wall_seconds"]}};
  }

  const BenchOptions& o_;
  const std::string exe_, out_;
  double fp32_bytes_ = 0, fp32_acc_ = 0;
};

void WriteTable(const json& rows, const std::string& dir, double fp32_acc, const std::string& path) {
  std::ofstream md(path);
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
}

}  // namespace

Status RunCompressionSweep(const BenchOptions& options, const std::atomic<bool>* stop) {
  GD_RETURN_IF_ERROR(LoadJobFile(options.job_file).status());  // a bad job file fails before any run
  const std::string out = options.result_file.empty() ? "runs/compression" : options.result_file;
  GD_RETURN_IF_ERROR(MakeDirs(out));
  GD_ASSIGN_OR_RETURN(std::vector<Config> configs, SweepConfigs(options));
  Sweep sweep(options, out);
  GD_ASSIGN_OR_RETURN(json rows, sweep.RunAll(configs, stop));
  const std::string& dir = options.direction;
  WriteTable(rows, dir, sweep.fp32_accuracy(), out + "/compression.md");
  GD_RETURN_IF_ERROR(WriteFileAtomic(out + "/compression.json", rows.dump(2)));

  // The plot, if matplotlib is there (Debian's python3-matplotlib).
  std::string plot = SourcePath("bench/plot_compression.py");
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
