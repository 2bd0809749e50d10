// `geodesic bench failover`: what shard replication (replication.backups: 1)
// costs and buys, measured in one run. First the same synthetic job without
// and with backups, alternating, for steps per second; then the replicated
// job again `kills` times with a primary SIGKILLed mid-run, for the failover
// time (the kill to the promoted backup's first applied update, as the
// launcher measures it) and the zero-loss check (every chunk acknowledged
// to a worker is one the final serving shards took).

#include <algorithm>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/bench.h"
#include "bench/run_job.h"
#include "bench/stats.h"
#include "common/files.h"
#include "common/log.h"
#include "deploy/process.h"

namespace geodesic::bench {
namespace {

using json = nlohmann::json;

// Two regions, a shard and its backup in each; BSP; a short lease, so that
// failover (about lease + a heartbeat) is quick.
const char* kJob = R"(
name: failover
seed: 3
regions:
  a: {servers: 1, workers: 1}
  b: {servers: 1, workers: 2}
model: {name: synthetic, synthetic_params: 200000}
training: {steps: 2500, staleness_bound: 0}
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
wire: {chunk_bytes: 65536}
membership: {heartbeat_ms: 100, lease_ms: 600}
checkpoint: {every_clocks: 0}
)";

// kJob, with the link between the regions when --rtt-ms asks for one.
std::string JobText(const BenchOptions& options) {
  std::string job = kJob;
  if (options.link_rtt_ms > 0) {
    // The backups live in the other region, so every acknowledgement waits
    // a round trip over this link (docs/benchmarks.md).
    std::ostringstream link;
    link << "wan:\n  emulation: proxy\n  probe: false\n  links:\n    - {regions: [a, b], rtt_ms: "
         << options.link_rtt_ms;
    if (options.link_mbit > 0) link << ", bandwidth_mbit: " << options.link_mbit;
    link << "}\n";
    job += link.str();
  }
  return job;
}

// Launches the bench's job under out/NAME with extra overrides and flags.
struct Runner {
  const BenchOptions& options;
  std::string exe, job_file, out;
  const std::atomic<bool>* stop;

  StatusOr<json> operator()(const std::string& name, std::vector<std::string> sets,
                            std::vector<std::string> extra) const {
    for (const auto& o : options.overrides) sets.push_back(o);
    return RunJob(
        JobRun{
            .binary = exe, .job_file = job_file, .run_dir = out + "/" + name, .overrides = sets, .extra_args = extra},
        stop);
  }
};

// Throughput: alternate plain and replicated so that machine noise hits both.
StatusOr<json> Throughput(const Runner& run) {
  std::map<std::string, std::vector<double>> rates;
  for (int round = 0; round < run.options.rounds && !run.stop->load(); ++round)
    for (int backups : {0, 1}) {
      const std::string name = (backups ? "replicated-" : "plain-") + std::to_string(round);
      GD_ASSIGN_OR_RETURN(json s, run(name, {"replication.backups=" + std::to_string(backups)}, {}));
      double wall = s.value("wall_seconds", 0.0);
      double rate = wall > 0 ? static_cast<double>(StepsOf(s)) / wall : 0;
      rates[backups ? "replicated" : "plain"].push_back(rate);
      std::cerr << name << ": " << rate << " steps/s per worker (" << wall << " s)\n";
    }
  const double plain = Median(rates["plain"]), replicated = Median(rates["replicated"]);
  return json{{"plain", rates["plain"]},
              {"replicated", rates["replicated"]},
              {"plain_median", plain},
              {"replicated_median", replicated},
              {"cost", plain > 0 ? 1 - replicated / plain : 0}};
}

struct Failovers {
  std::vector<double> seconds;  // of the kills whose failover was measured
  json kills = json::array();
  bool lossless = true;
};

// Failover, alternating which primary dies.
StatusOr<Failovers> KillPrimaries(const Runner& run) {
  Failovers f;
  for (int k = 0; k < run.options.kills && !run.stop->load(); ++k) {
    const std::string target = "server:" + std::to_string(k % 2) + "@1.5";
    GD_ASSIGN_OR_RETURN(json s, run("kill-" + std::to_string(k), {"replication.backups=1"}, {"--kill", target}));
    json rec = s["recoveries"].empty() ? json() : s["recoveries"][0];
    double t = rec.is_object() ? rec.value("seconds_to_first_update", -1.0) : -1.0;
    const bool ok = s["pushes_acknowledged"] == s["updates_taken"];
    f.lossless &= ok;
    if (t >= 0) f.seconds.push_back(t);
    f.kills.push_back({{"kill", target},
                       {"seconds_to_first_update", t},
                       {"pushes_acknowledged", s["pushes_acknowledged"]},
                       {"updates_taken", s["updates_taken"]},
                       {"duplicates_answered", s["duplicates_answered"]}});
    std::cerr << "kill " << target << ": first update after " << t << " s; acknowledged " << s["pushes_acknowledged"]
              << ", taken " << s["updates_taken"] << (ok ? "" : "  LOST UPDATES") << "\n";
  }
  return f;
}

void PrintSummary(const BenchOptions& options, const json& rates, const Failovers& f) {
  const double plain = rates["plain_median"], replicated = rates["replicated_median"];
  char where[64] = "loopback";
  if (options.link_rtt_ms > 0) std::snprintf(where, sizeof(where), "regions %g ms RTT apart", options.link_rtt_ms);
  std::printf("throughput (steps/s per worker, median of %d, %s): plain %.1f, replicated %.1f (cost %.1f%%)\n",
              options.rounds, where, plain, replicated, plain > 0 ? 100 * (1 - replicated / plain) : 0.0);
  std::printf(
      "failover (SIGKILL of a primary -> first update applied by its promoted backup): median %.2f s over "
      "%zu kills; zero acknowledged updates lost: %s\n",
      Median(f.seconds), f.seconds.size(), f.lossless ? "yes" : "NO");
}

}  // namespace

Status RunFailoverBench(const BenchOptions& options, const std::atomic<bool>* stop) {
  const std::string exe = options.binary.empty() ? deploy::SelfBinary() : options.binary;
  const std::string out = options.result_file.empty() ? "runs/failover" : options.result_file;
  GD_RETURN_IF_ERROR(MakeDirs(out));
  const std::string job_file = out + "/job.yaml";
  GD_RETURN_IF_ERROR(WriteFileAtomic(job_file, JobText(options), /*durable=*/false));
  const Runner run{options, exe, job_file, out, stop};
  json report;
  GD_ASSIGN_OR_RETURN(report["steps_per_second"], Throughput(run));
  GD_ASSIGN_OR_RETURN(Failovers f, KillPrimaries(run));
  report["link"] = {{"rtt_ms", options.link_rtt_ms}, {"mbit", options.link_mbit}};
  report["failovers"] = f.kills;
  report["failover_seconds_median"] = Median(f.seconds);
  report["failovers_measured"] = f.seconds.size();
  report["zero_loss"] = f.lossless;
  if (options.json) {
    std::cout << report.dump(2) << "\n";
  } else {
    PrintSummary(options, report["steps_per_second"], f);
  }
  if (f.seconds.size() != static_cast<size_t>(options.kills))
    return Internal("a failover was not measured; see " + out);
  if (!f.lossless) return DataLoss("acknowledged updates were lost; see " + out);
  return Status::Ok();
}

}  // namespace geodesic::bench
