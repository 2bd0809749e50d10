#include "bench/sweep.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <thread>

#include "bench/run_job.h"
#include "bench/sweep_row.h"
#include "common/build_paths.h"
#include "common/files.h"
#include "common/log.h"
#include "config/sweep.h"
#include "deploy/launcher.h"
#include "deploy/process.h"
#include "deploy/verdict.h"

namespace geodesic::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The key that finds a run again on --resume: its job file and overrides,
// in any order.
std::string RunKey(const std::string& job_file, std::vector<std::string> overrides) {
  std::sort(overrides.begin(), overrides.end());
  std::string key = job_file;
  for (const std::string& o : overrides) key += "\n" + o;
  return key;
}

// What a sweep's output folder remembers of the sweep that wrote it: its
// base job and `set:`, which a resumed sweep must share (its axes may grow).
json Identity(const SweepSpec& spec) {
  return {{"name", spec.name}, {"job", spec.job_file}, {"set", spec.overrides}, {"limit_s", spec.limit_s}};
}

// A run that OUT already has: its folder, and how it ended.
struct EarlierRun {
  std::string dir, status, failure;
};

// The runs OUT already has (OUT/runs/*/row.json), by RunKey. A row that
// cannot be read back (edited, cut short) is not a run that ended: it runs
// again. Only the key and the verdict are read from it; the rest of the
// row is rebuilt from the run's summary.
std::map<std::string, EarlierRun> EarlierRuns(const std::string& out) {
  std::map<std::string, EarlierRun> runs;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(out + "/runs", ec)) {
    auto row = ReadJsonFile(e.path().string() + "/row.json");
    if (!row.ok() || !row->is_object()) continue;
    const json job = row->value("job_file", json()), overrides = row->value("overrides", json());
    const json status = row->value("status", json()), failure = row->value("failure", json(""));
    if (!job.is_string() || !overrides.is_array() || !status.is_string() || !failure.is_string() ||
        !std::all_of(overrides.begin(), overrides.end(), [](const json& o) { return o.is_string(); }))
      continue;
    runs[RunKey(job, overrides)] = {e.path().string(), status, failure};
  }
  return runs;
}

// Makes OUT, or checks that it holds this sweep when resuming.
Status PrepareOut(const SweepSpec& spec, const SweepOptions& o) {
  const std::string ident = o.out + "/sweep.json";
  std::error_code ec;
  const bool has_runs = std::filesystem::exists(o.out + "/runs", ec) && !std::filesystem::is_empty(o.out + "/runs", ec);
  if (has_runs && !o.resume)
    return FailedPrecondition(o.out +
                              " holds the runs of an earlier sweep; --resume continues it, or choose another --out");
  if (has_runs) {
    auto old = ReadJsonFile(ident);
    if (old.ok() && ((*old)["job"] != spec.job_file || (*old)["set"] != json(spec.overrides)))
      return FailedPrecondition(o.out + " holds a sweep of " + (*old)["job"].dump() +
                                " with set: " + (*old)["set"].dump() +
                                "; resuming with another base job or set: would mix two experiments; choose another "
                                "--out");
  }
  GD_RETURN_IF_ERROR(MakeDirs(o.out + "/runs"));
  GD_RETURN_IF_ERROR(WriteFileAtomic(ident, Identity(spec).dump(2), /*durable=*/false));
  GD_ASSIGN_OR_RETURN(std::string text, ReadFile(o.sweep_file));
  return WriteFileAtomic(o.out + "/sweep.yaml", text, /*durable=*/false);
}

// One launch, stopped (SIGTERM, then SIGKILL a minute later) at the time
// limit or when the sweep is interrupted.
struct LaunchEnd {
  bool timed_out = false, interrupted = false;
  std::string exit;  // "exited 0"
};

StatusOr<LaunchEnd> RunLaunch(const std::vector<std::string>& argv, const std::string& log, double limit_s,
                              const std::atomic<bool>* stop) {
  deploy::Child child("launch", argv, log);
  GD_RETURN_IF_ERROR(child.Start());
  LaunchEnd end;
  const auto start = Clock::now();
  std::optional<Clock::time_point> signalled;
  while (!child.Poll()) {
    if (!signalled && (stop->load() || Since(start) > limit_s)) {
      end.interrupted = stop->load();
      end.timed_out = !end.interrupted;
      child.Signal(SIGTERM);
      signalled = Clock::now();
    }
    if (signalled && Since(*signalled) > 60) child.Signal(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  end.exit = child.exit()->Describe();
  return end;
}

class SweepRunner {
 public:
  SweepRunner(const SweepOptions& o, const SweepSpec& spec, std::vector<SweepPoint> points,
              const std::atomic<bool>* stop)
      : o_(o),
        spec_(spec),
        points_(std::move(points)),
        rows_(points_.size()),
        exe_(o.binary.empty() ? deploy::SelfBinary() : o.binary),
        stop_(stop) {}

  StatusOr<int> Run() {
    const std::map<std::string, EarlierRun> earlier =
        o_.resume ? EarlierRuns(o_.out) : std::map<std::string, EarlierRun>{};
    int reused = 0;
    for (const SweepPoint& p : points_) {
      auto it = earlier.find(RunKey(p.job_file, p.Overrides(spec_)));
      if (it == earlier.end() || (o_.retry_failed && it->second.status != "finished")) continue;
      const EarlierRun& e = it->second;
      auto summary = ReadJsonFile(e.dir + "/summary.json");
      rows_[p.index] = SweepRow(spec_, p, e.dir, e.status, e.failure, summary.ok() ? *summary : json(),
                                FileSha256(e.dir + "/final_params.bin"));
      ++reused;
    }
    if (reused > 0)
      std::cout << "sweep: " << reused << " of " << points_.size() << " runs kept from " << o_.out << "\n";
    const auto start = Clock::now();
    int ran = 0;
    for (const SweepPoint& p : points_) {
      if (!rows_[p.index].is_null()) continue;
      if (stop_->load()) return Cancelled("interrupted");
      GD_RETURN_IF_ERROR(RunPoint(p));
      ++ran;
      GD_RETURN_IF_ERROR(WriteSweepTables(spec_, rows_, o_.out));
      SayProgress(p, ran, Since(start));
    }
    GD_RETURN_IF_ERROR(WriteSweepTables(spec_, rows_, o_.out));
    return Finish();
  }

 private:
  Status RunPoint(const SweepPoint& p) {
    const std::string dir = o_.out + "/runs/" + p.Slug();
    const std::string log = dir + ".log";
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    std::vector<std::string> argv = {exe_, "launch", p.job_file, "--run-dir", dir, "--quiet"};
    for (const std::string& s : p.Overrides(spec_)) argv.insert(argv.end(), {"--set", s});
    std::cout << "sweep: [" << p.index + 1 << "/" << points_.size() << "] " << p.Describe() << ": running (log " << log
              << ")" << std::endl;
    GD_ASSIGN_OR_RETURN(LaunchEnd end, RunLaunch(argv, log, spec_.limit_s, stop_));
    if (end.interrupted) return Cancelled("interrupted during run " + p.Slug() + "; --resume runs it again");
    auto summary = ReadJsonFile(dir + "/summary.json");
    std::string status = end.timed_out ? "timed_out" : summary.ok() ? summary->value("status", "failed") : "failed";
    std::string failure;
    if (end.timed_out)
      failure = "stopped at the sweep's limit_s of " + std::to_string(static_cast<int>(spec_.limit_s)) + " s";
    else if (status != "finished")
      failure = summary.ok() && summary->contains("failure") ? (*summary)["failure"].get<std::string>()
                                                             : "launch " + end.exit + ": " + deploy::LastErrorLine(log);
    json row = SweepRow(spec_, p, dir, status, failure, summary.ok() ? *summary : json(),
                        FileSha256(dir + "/final_params.bin"));
    GD_RETURN_IF_ERROR(MakeDirs(dir));
    GD_RETURN_IF_ERROR(WriteFileAtomic(dir + "/row.json", row.dump(1), /*durable=*/false));
    rows_[p.index] = std::move(row);
    return Status::Ok();
  }

  void SayProgress(const SweepPoint& p, int ran, double elapsed) const {
    const json& r = rows_[p.index];
    int left = 0;
    for (const json& row : rows_) left += row.is_null();
    auto num = [](const json& v, const char* fmt) {
      if (!v.is_number()) return std::string("-");
      char b[64];
      std::snprintf(b, sizeof(b), fmt, v.get<double>());
      return std::string(b);
    };
    // Token runs: validation loss, tokens/s and bytes per token.
    const bool tokens = r["bytes_per_token_total"].is_number();
    std::cout << "sweep: [" << p.index + 1 << "/" << points_.size() << "] " << r["status"].get<std::string>() << ": "
              << (tokens ? "validation loss " + num(r["test_loss"], "%.4f")
                         : "test accuracy " + num(r["test_accuracy"], "%.4f"))
              << ", target "
              << (r["seconds_to_target"].is_number() ? "after " + num(r["seconds_to_target"], "%.1f") + " s"
                                                     : std::string("not reached"))
              << ", "
              << (tokens ? num(r["tokens_per_second"], "%.0f") + " tokens/s, " +
                               num(r["bytes_per_token_total"], "%.2f") + " bytes/token"
                         : num(r["samples_per_second"], "%.0f") + " samples/s, " + num(r["bytes_per_sample"], "%.0f") +
                               " bytes/sample");
    if (!r["failure"].get<std::string>().empty()) std::cout << " (" << r["failure"].get<std::string>() << ")";
    if (left > 0)
      std::cout << "; " << left << " runs left, about " << static_cast<int>(elapsed / ran * left / 60 + 1) << " min";
    std::cout << std::endl;
  }

  int Finish() const {
    if (o_.plot) {
      const std::string cmd = "/usr/bin/python3 '" + SourcePath("bench/plot_sweep.py") + "' '" + o_.out + "' > '" +
                              o_.out + "/plot.log' 2>&1";
      if (std::system(cmd.c_str()) != 0)
        std::cout << "sweep: no plots (is python3-matplotlib installed? see " << o_.out << "/plot.log)\n";
    }
    std::vector<std::string> bad;
    for (const json& r : rows_)
      if (r["status"] != "finished") bad.push_back(r["run"].get<std::string>() + " " + r["status"].get<std::string>());
    std::cout << "sweep: wrote " << o_.out << "/results.{csv,json,md}, curves.csv and accuracy_vs_{time,bytes}.png\n";
    if (auto md = ReadFile(o_.out + "/results.md"); md.ok()) std::cout << *md;
    if (bad.empty()) return 0;
    std::cout << "sweep: " << bad.size() << " of " << rows_.size() << " runs did not finish:";
    for (const std::string& b : bad) std::cout << "\n  " << b;
    std::cout << std::endl;
    return 1;
  }

  const SweepOptions& o_;
  const SweepSpec& spec_;
  const std::vector<SweepPoint> points_;
  std::vector<json> rows_;  // by point index; null until the run ended
  const std::string exe_;
  const std::atomic<bool>* stop_;
};

// Every run's job, codecs and dataset, before anything starts.
Status CheckRuns(const SweepSpec& spec, const std::vector<SweepPoint>& points) {
  GD_RETURN_IF_ERROR(CheckSweepJobs(spec, points));
  for (const SweepPoint& p : points) {
    GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(p.job_file, p.Overrides(spec)));
    Status s = deploy::CheckLaunchable(job, p.job_file);
    if (!s.ok()) return s.Annotate("run " + p.Slug() + " (" + p.Describe() + ")");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<int> RunSweep(const SweepOptions& options, const std::atomic<bool>* stop) {
  GD_ASSIGN_OR_RETURN(SweepSpec spec, LoadSweepFile(options.sweep_file));
  std::vector<SweepPoint> points = SweepPoints(spec);
  GD_RETURN_IF_ERROR(CheckRuns(spec, points));
  SweepOptions o = options;
  if (o.out.empty()) o.out = "runs/sweep-" + spec.name;
  if (o.dry_run) {
    std::cout << "sweep " << spec.name << ": " << points.size() << " runs of at most " << spec.limit_s
              << " s each, into " << o.out << "\n";
    for (const SweepPoint& p : points) std::cout << "  " << p.Slug() << "  " << p.Describe() << "\n";
    return 0;
  }
  GD_RETURN_IF_ERROR(PrepareOut(spec, o));
  SweepRunner runner(o, spec, std::move(points), stop);
  return runner.Run();
}

}  // namespace geodesic::bench
