#include "deploy/summary.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "common/files.h"
#include "common/format.h"
#include "common/histogram.h"
#include "common/log.h"
#include "common/push_ledger.h"
#include "deploy/process_id.h"
#include "deploy/rounds.h"
#include "proto/stats.pb.h"
#include "proto/stats_json.h"
#include "worker/federated/privacy.h"

namespace geodesic::deploy {
namespace {

using json = nlohmann::json;

json ReadJson(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return nullptr;
  try {
    return json::parse(*text);
  } catch (const std::exception&) {
    return nullptr;
  }
}

// A process's stats file (proto/stats.proto), if it wrote a readable one.
template <typename Stats>
std::optional<Stats> ReadStats(const std::string& path) {
  auto text = ReadFile(path);
  Stats out;
  if (!text.ok() || !StatsFromJson(*text, &out).ok()) return std::nullopt;
  return out;
}

json ToJson(const google::protobuf::Message& m) { return json::parse(StatsToJson(m)); }

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// What the processes' stats files add up to.
struct Totals {
  json sent = json::object(), received = json::object(), breakdown = json::object(), procs = json::array();
  int64_t samples = 0, worker_steps = 0, push_bytes = 0, pull_bytes = 0;
  IntHistogram staleness;
  json refused = json::object();
  // Passive link estimates from the workers' own pull replies, per (server
  // region -> worker region): the mean over the region's workers of each
  // one's reply throughput (one flow's share of the path) and the least RTT.
  std::map<std::pair<std::string, std::string>, std::tuple<double, double, int, uint64_t>> passive;
  uint64_t updates_taken = 0, duplicates = 0;
  std::map<int, uint64_t> taken_by_worker;
  json partition;                                             // null without a partitioned dataset
  json federated;                                             // null unless a federated job
  int64_t rounds_run = 0;                                     // federated: the most rounds any executor ran
  std::vector<std::vector<stats::RoundStats>> round_records;  // federated: each executor's
  double peak_rss_mb_sum = 0;
  json elastic_shards = json::object();  // elastic jobs: each serving shard's units
  uint64_t unit_duplicates = 0;
  std::vector<double> utilization;  // each worker's share of its training time in compute
};

// DP-FedAvg's guarantee after the rounds that ran, and after each round
// (at most 1000 points), from the Renyi accountant (worker/federated/privacy.h).
json DpReport(const FederatedSpec& f, int64_t rounds) {
  const double q = static_cast<double>(f.per_round) / static_cast<double>(f.clients);
  const int64_t every = std::max<int64_t>(1, (rounds + 999) / 1000);
  json by_round = json::array();
  for (int64_t r = every; r <= rounds; r += every)
    by_round.push_back({r, federated::EpsilonAfter(q, f.dp_noise_multiplier, r, f.dp_delta).epsilon});
  const federated::DpGuarantee g =
      federated::EpsilonAfter(q, f.dp_noise_multiplier, std::max<int64_t>(rounds, 1), f.dp_delta);
  return {{"clip_norm", f.dp_clip_norm},
          {"noise_multiplier", f.dp_noise_multiplier},
          {"delta", f.dp_delta},
          {"sampling_rate", q},
          {"rounds", rounds},
          {"epsilon", g.epsilon},
          {"renyi_order", g.order},
          {"epsilon_by_round", by_round}};
}

// data.partition as the workers drew it: each worker reports the digest of
// the whole split, so they agree unless a worker ran another build or job.
void AddPartition(const std::string& name, const stats::WorkerStats& w, json& p) {
  if (w.partition().empty()) return;
  if (p.is_null()) p = {{"spec", w.partition()}, {"digest", w.partition_digest()}, {"digests_agree", true}};
  if (p["digest"] != w.partition_digest() || p["spec"] != w.partition()) p["digests_agree"] = false;
  p["samples_per_worker"][name] = w.partition_samples();
  p["labels_per_worker"][name] = std::vector<int64_t>(w.partition_labels().begin(), w.partition_labels().end());
}

json ProcessEntry(const Child& c) {
  json p = {{"name", c.name()}, {"pid", c.pid()}, {"log", c.log_file()}};
  if (c.exit()) {
    p["exit"] = c.exit()->Describe();
    p["cpu_seconds"] = c.exit()->cpu_seconds;
    p["max_rss_mb"] = c.exit()->max_rss_mb;
    p["exit_code"] = c.exit()->signal ? json() : json(c.exit()->code);
    p["signal"] = c.exit()->signal ? json(std::string(sigabbrev_np(c.exit()->signal))) : json();
  }
  return p;
}

// federated.gateway: the executors' gateway counts, added up.
void AddGateway(const stats::GatewayStats& g, json& sum) {
  if (sum.is_null())
    sum = {{"refused_by_reason", json::object()},
           {"refusals_unanswered", 0},
           {"updates_dropped", 0},
           {"timeouts", 0},
           {"not_waited", 0}};
  for (const auto& [reason, n] : g.refused_by_reason())
    sum["refused_by_reason"][reason] = sum["refused_by_reason"].value(reason, int64_t{0}) + n;
  for (const auto& [key, n] : {std::pair<const char*, uint32_t>{"refusals_unanswered", g.refusals_unanswered()},
                               {"updates_dropped", g.updates_dropped()},
                               {"timeouts", g.timeouts()},
                               {"not_waited", g.not_waited()}})
    sum[key] = sum[key].get<int64_t>() + n;
}

void AddWorker(const std::string& name, const stats::WorkerStats& w, const JobSpec& job, Totals& t) {
  const std::string& wr = job.RegionOfWorker(w.id()).name;
  for (const auto& [sr, e] : w.links_from_servers()) {
    auto& [rtt, mbit, n, link_samples] = t.passive[{sr, wr}];
    rtt = n == 0 ? e.min_rtt_ms() : std::min(rtt, e.min_rtt_ms());
    mbit += e.mbit();
    link_samples += e.samples();
    ++n;
  }
  AddPartition(name, w, t.partition);
  if (w.has_clients_trained()) {
    if (t.federated.is_null())
      t.federated = {
          {"clients_trained", 0}, {"clients_dropped", 0}, {"clients_late", 0}, {"client_updates_unusable", 0}};
    t.federated["clients_trained"] = t.federated["clients_trained"].get<int64_t>() + w.clients_trained();
    t.federated["clients_dropped"] = t.federated["clients_dropped"].get<int64_t>() + w.clients_dropped();
    t.federated["clients_late"] = t.federated["clients_late"].get<int64_t>() + w.clients_late();
    t.federated["client_updates_unusable"] =
        t.federated["client_updates_unusable"].get<int64_t>() + w.client_updates_unusable();
    t.federated["client_updates_refused"] =
        t.federated.value("client_updates_refused", int64_t{0}) + w.client_updates_refused();
    if (w.has_real_client_updates())
      t.federated["real_client_updates"] =
          t.federated.value("real_client_updates", int64_t{0}) + w.real_client_updates();
    if (w.has_client_updates_clipped())
      t.federated["client_updates_clipped"] =
          t.federated.value("client_updates_clipped", int64_t{0}) + w.client_updates_clipped();
    if (w.has_gateway()) AddGateway(w.gateway(), t.federated["gateway"]);
    t.rounds_run = std::max<int64_t>(t.rounds_run, w.clocks());
    t.round_records.emplace_back(w.rounds().begin(), w.rounds().end());
  }
  t.samples += w.samples();
  t.worker_steps += w.steps();
  t.push_bytes += static_cast<int64_t>(w.bytes_sent());
  t.pull_bytes += static_cast<int64_t>(w.bytes_received());
  double cs = w.compute_seconds(), ns = w.comm_seconds(), ws = w.wait_seconds();
  double tot = cs + ns + ws;
  // Compute utilization: the share of the worker's wall time since it
  // started training spent computing (the rest: communication, waits, and
  // what the three do not cover, such as evaluation and start-up).
  const double wall = w.training_seconds();
  const json util = wall > 0 ? json(std::min(1.0, cs / wall)) : json();
  if (wall > 0) t.utilization.push_back(util.get<double>());
  t.breakdown[name] = {
      {"compute", tot > 0 ? cs / tot : 0},
      {"communication", tot > 0 ? ns / tot : 0},
      {"staleness_wait", tot > 0 ? ws / tot : 0},
      {"utilization", util},
      {"seconds", {{"compute", cs}, {"communication", ns}, {"staleness_wait", ws}, {"training", wall}}},
      {"steps", int64_t{w.steps()}}};
}

// The workers' compute utilization: mean and least, null without workers.
json Utilization(const std::vector<double>& u) {
  if (u.empty()) return json();
  double sum = 0;
  for (double x : u) sum += x;
  return {{"mean", sum / static_cast<double>(u.size())}, {"min", *std::min_element(u.begin(), u.end())}};
}

// A shard's serving process (a promoted backup, else its primary).
void AddServer(const std::string& name, const stats::ShardStats& sv, Totals& t) {
  t.updates_taken += sv.updates_taken();
  for (const auto& [w, n] : sv.taken_by_worker()) t.taken_by_worker[w] += n;
  t.duplicates += sv.duplicates();
  for (const auto& [k, v] : sv.staleness_histogram()) t.staleness.Add(k, v);
  if (sv.has_units_complete()) {
    t.elastic_shards[name] = {{"units_complete", sv.units_complete()}, {"unit_duplicates", sv.unit_duplicates()}};
    t.unit_duplicates += sv.unit_duplicates();
  }
  if (sv.refused_by_reason().empty()) return;
  json refused = json::object();
  for (const auto& [reason, n] : sv.refused_by_reason()) refused[reason] = n;
  t.refused[name] = refused;
}

// Replicated jobs: each shard's last serving process is its promoted
// backup, if any, else its primary; only those count for the shard.
std::set<int> PromotedShards(const RunRecord& run) {
  std::set<int> promoted;
  for (int i = 0; i < run.job.NumServers() && run.job.replication.backups > 0; ++i) {
    // Nothing if it died before writing.
    auto b = ReadStats<stats::ShardStats>(run.dir.stats(ProcessId::Backup(i).Name()));
    if (b && b->promoted()) promoted.insert(i);
  }
  return promoted;
}

// One process's stats: its bytes, and what it adds to the totals.
void AddProcess(const RunRecord& run, const std::set<int>& promoted, const std::string& name, Totals& t) {
  const std::string path = run.dir.stats(name);
  std::optional<std::pair<double, double>> bytes;
  if (StartsWith(name, "worker-")) {
    if (auto w = ReadStats<stats::WorkerStats>(path)) {
      bytes = {w->bytes_sent(), w->bytes_received()};
      AddWorker(name, *w, run.job, t);
    }
  } else if (StartsWith(name, "server-") || StartsWith(name, "backup-")) {
    if (auto sv = ReadStats<stats::ShardStats>(path)) {
      bytes = {sv->bytes_sent(), sv->bytes_received()};
      const bool serving = StartsWith(name, "backup-") ? promoted.count(sv->id()) > 0 : promoted.count(sv->id()) == 0;
      if (serving) AddServer(name, *sv, t);
    }
  } else if (name == "coordinator") {
    if (auto c = ReadStats<stats::CoordinatorStats>(path)) bytes = {c->bytes_sent(), c->bytes_received()};
  }
  if (!bytes) return;
  t.sent[name] = static_cast<int64_t>(bytes->first);
  t.received[name] = static_cast<int64_t>(bytes->second);
}

// The processes that left stats in the run directory, by name, sorted.
std::vector<std::string> StatsNames(const RunDir& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir.stats_dir(), ec))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

Totals AddUpProcesses(const RunRecord& run, const std::set<int>& promoted) {
  Totals t;
  for (auto& c : run.children.children()) {
    t.procs.push_back(ProcessEntry(*c));
    AddProcess(run, promoted, c->name(), t);
  }
  // Processes that no launcher started (a rendered deployment): those that left stats.
  if (run.children.children().empty())
    for (const std::string& name : StatsNames(run.dir)) {
      t.procs.push_back({{"name", name}});
      AddProcess(run, promoted, name, t);
    }
  // Every process's own peak, added: a bound on the job's peak memory (the
  // peaks need not coincide).
  double rss = 0;
  for (const auto& p : t.procs) rss += p.value("max_rss_mb", 0.0);
  t.peak_rss_mb_sum = rss;
  int64_t total_sent = 0, total_received = 0;
  for (auto& [k, v] : t.sent.items()) total_sent += v.get<int64_t>();
  for (auto& [k, v] : t.received.items()) total_received += v.get<int64_t>();
  t.sent["total"] = total_sent;
  t.received["total"] = total_received;
  return t;
}

json PassiveLinks(const Totals& t) {
  json passive_links = json::array();
  for (const auto& [pair, v] : t.passive) {
    const auto& [rtt, mbit, n, samples] = v;
    passive_links.push_back({{"from", pair.first},
                             {"to", pair.second},
                             {"min_rtt_ms", rtt},
                             {"mbit_per_worker", samples > 0 ? json(mbit / n) : json()},
                             {"workers", n},
                             {"samples", samples}});
  }
  return passive_links;
}

// A failover's time, exactly: from the kill to the promoted backup's own
// record of its first update (the status probe sees it later).
json TimeFailovers(const RunRecord& run) {
  json recoveries = run.recoveries;
  for (auto& rec : recoveries) {
    if (!rec.value("failover", false)) continue;
    const std::string target = rec["target"];
    const auto who = ProcessId::Parse(target);
    if (!who || !who->is(ProcessRole::kServer)) continue;
    auto k = run.faults.KilledUnix(target);
    auto b = ReadStats<stats::ShardStats>(run.dir.stats(ProcessId::Backup(who->id).Name()));
    if (!k || !b || !b->has_first_update_unix()) continue;
    if (rec.contains("seconds_to_first_update")) rec["seconds_to_first_update_seen"] = rec["seconds_to_first_update"];
    rec["seconds_to_first_update"] = b->first_update_unix() - *k;
  }
  return recoveries;
}

// Each declared link direction: its shape, probe and bytes carried.
json EmulatedLinks(const RunRecord& run, double wall) {
  json traffic = json::array();
  if (run.link_traffic) {
    traffic = *run.link_traffic;
  } else if (run.wan) {
    traffic = run.wan->Traffic();
  } else if (auto t = run.netns->Traffic(); t.ok()) {
    traffic = *t;
  } else {
    GD_LOG(WARNING) << "bytes per link: " << t.status();
  }
  json links = json::array();
  for (const LinkSpec& l : run.job.wan.links) {
    json rec = {{"from", l.from},
                {"to", l.to},
                {"delay_ms", l.delay_ms},
                {"jitter_ms", l.jitter_ms},
                {"bandwidth_mbit", l.bandwidth_mbit}};
    for (const auto& p : run.link_probes)
      if (p["from"] == l.from && p["to"] == l.to) {
        rec["probed_rtt_ms"] = p.value("probed_rtt_ms", json());
        rec["probed_mbit"] = p.value("probed_mbit", json());
      }
    for (const auto& t : traffic)
      if (t["from"] == l.from && t["to"] == l.to) {
        rec["bytes"] = t["bytes"];
        rec["mean_mbit_while_training"] = wall > 0 ? t["bytes"].get<double>() * 8 / 1e6 / wall : 0.0;
      }
    links.push_back(rec);
  }
  return links;
}

// What emulating the links cost (EmulatedWan::Cost, NetnsWan::Cost); null
// for links emulated outside the launcher (a compose deployment's router).
json EmulatorCost(const RunRecord& run) {
  if (run.wan) return run.wan->Cost();
  if (!run.netns) return json();
  auto cost = run.netns->Cost();
  if (cost.ok()) return *cost;
  GD_LOG(WARNING) << "emulator cost: " << cost.status();
  return json();
}

// The curves on the job's one clock (RunRecord::span): worker 0 times its
// snapshots from its own start, and the evaluator adds each snapshot's Unix
// time, which this rebases. Also the first time at target: accuracy at or
// above eval.target_accuracy, or (models with their own loss) validation
// loss at or below eval.target_loss.
void RebaseCurve(const RunRecord& run, json& result) {
  if (!result.is_object() || !result.contains("loss_curve")) return;
  const json unix_times = result.value("curve_unix", json::array());
  for (const char* name : {"accuracy_curve", "loss_curve"}) {
    if (!result.contains(name)) continue;
    json& curve = result[name];
    if (run.span.start_unix && unix_times.size() == curve.size())
      for (size_t i = 0; i < curve.size(); ++i) curve[i][0] = unix_times[i].get<double>() - *run.span.start_unix;
  }
  const EvalSpec& eval = run.job.eval;
  const bool accuracy = result.contains("accuracy_curve");
  json to_target = nullptr;
  for (const auto& p : result[accuracy ? "accuracy_curve" : "loss_curve"]) {
    const double v = p[2].get<double>();
    if (accuracy ? v >= eval.target_accuracy : eval.target_loss > 0 && v <= eval.target_loss) {
      to_target = p[0];
      break;
    }
  }
  result["seconds_to_target"] = to_target;
}

// What the evaluator measured of the final model and along the way.
void AddScores(const RunRecord& run, const json& result, json& summary) {
  auto take = [&](const char* key, json none) {
    summary[key] = result.is_object() && result.contains(key) ? result[key] : none;
  };
  take("test_accuracy", json());
  take("test_loss", json());
  if (result.is_object() && result.contains("test_perplexity")) summary["test_perplexity"] = result["test_perplexity"];
  take("accuracy_curve", json::array());
  take("loss_curve", json::array());
  const bool classifier = !result.is_object() || result.contains("accuracy_curve") || !result.contains("loss_curve");
  if (classifier) summary["target_accuracy"] = run.job.eval.target_accuracy;
  if (!classifier && run.job.eval.target_loss > 0) summary["target_loss"] = run.job.eval.target_loss;
  take("seconds_to_target", json());
}

// The job, how it ended, and what the evaluator and coordinator recorded.
json JobOutcome(const RunRecord& run, const std::optional<stats::CoordinatorStats>& coord, double wall) {
  json summary;
  summary["job"] = run.job.name;
  summary["run_dir"] = run.dir.path;
  summary["status"] = ToString(run.outcome);
  if (!run.failure.empty()) summary["failure"] = run.failure;
  json failures = json::array();
  for (const Loss& l : run.losses) failures.push_back(l.ToJson());
  summary["failures"] = failures;
  if (!run.unwritten.empty()) summary["unwritten"] = run.unwritten;
  json result = ReadJson(run.dir.result_json());
  RebaseCurve(run, result);
  AddScores(run, result, summary);
  summary["wall_seconds"] = wall;
  summary["total_wall_seconds"] = run.total_wall_seconds;
  summary["model"] = {{"name", ToString(run.job.model.name)}};
  if (result.is_object() && result.contains("num_params")) summary["model"]["parameters"] = result["num_params"];
  if (!run.job.model.path.empty()) summary["model"]["path"] = run.job.model.path;
  if (result.is_object() && result.contains("buffers")) summary["model"]["buffers"] = result["buffers"];
  if (run.job.wan.replan) {
    json replans = json::array();
    if (coord)
      for (const auto& r : coord->replans()) replans.push_back(ToJson(r));
    summary["replans"] = replans;
  }
  if (coord && coord->has_plan()) summary["plan"] = ToJson(coord->plan());
  summary["compression"] = {{"push", run.job.compression.push},
                            {"pull", run.job.compression.pull},
                            {"error_feedback", run.job.compression.error_feedback},
                            {"momentum_correction", run.job.compression.momentum_correction}};
  summary["staleness_bound"] = run.job.training.staleness_bound;
  return summary;
}

// Federated: the per-round table (deploy/rounds.h); WriteSummary also
// writes it as rounds.csv.
void AddRounds(const RunRecord& run, const Totals& t, json& summary) {
  json table = RoundTable(t.round_records, summary, run.job.federated.rounds);
  summary["federated"]["round_totals"] = RoundTotals(table);
  summary["federated"]["rounds_csv"] = run.dir.rounds_csv();
  summary["federated"]["rounds"] = std::move(table);
}

void AddTraffic(const Totals& t, double wall, json& summary) {
  summary["samples"] = t.samples;
  summary["samples_per_second"] = wall > 0 ? t.samples / wall : 0.0;
  // What one worker step costs on the wire, both directions (headers included).
  if (t.worker_steps > 0)
    summary["bytes_per_step"] = {{"push", static_cast<double>(t.push_bytes) / t.worker_steps},
                                 {"pull", static_cast<double>(t.pull_bytes) / t.worker_steps},
                                 {"total", static_cast<double>(t.push_bytes + t.pull_bytes) / t.worker_steps}};
  // What the workers exchanged in all, and per training sample: the
  // measure that compares configurations whose steps differ (local SGD's
  // rounds, batch sizes).
  summary["bytes_exchanged"] = {{"push", t.push_bytes}, {"pull", t.pull_bytes}, {"total", t.push_bytes + t.pull_bytes}};
  if (t.samples > 0) summary["bytes_per_sample"] = static_cast<double>(t.push_bytes + t.pull_bytes) / t.samples;
  summary["bytes_sent"] = t.sent;
  summary["bytes_received"] = t.received;
  json hist = json::object();
  for (const auto& [k, v] : t.staleness.NonZero()) hist[std::to_string(k)] = v;
  summary["staleness_histogram"] = hist;
  summary["staleness_mean"] = t.staleness.Mean();
  summary["staleness_max"] = t.staleness.max();
  summary["step_time_breakdown"] = t.breakdown;
  summary["compute_utilization"] = Utilization(t.utilization);
  summary["messages_refused"] = t.refused;
  summary["processes"] = t.procs;
  summary["peak_rss_mb_sum"] = t.peak_rss_mb_sum;
  summary["passive_links"] = PassiveLinks(t);
}

}  // namespace

json PushAccounting(const std::string& stats_dir, const std::map<int, uint64_t>& taken) {
  struct PerWorker {
    int processes = 0;
    PushCounts c;
  };
  std::map<int, PerWorker> by_worker;
  json unreadable = json::array();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(stats_dir, ec)) {
    const std::string f = e.path().filename().string();
    int id = -1;
    if (e.path().extension() != ".ledger" || std::sscanf(f.c_str(), "worker-%d.", &id) != 1 || id < 0) continue;
    auto c = PushLedger::Read(e.path().string());
    if (!c.ok()) {
      unreadable.push_back(c.status().message());
      continue;
    }
    PerWorker& t = by_worker[id];
    ++t.processes;
    t.c.pushed += c->pushed;
    t.c.acknowledged += c->acknowledged;
    t.c.dropped += c->dropped;
    t.c.refused += c->refused;
  }
  json workers = json::object();
  uint64_t acknowledged = 0, in_flight = 0;
  for (const auto& [id, t] : by_worker) {
    auto it = taken.find(id);
    const uint64_t tk = it == taken.end() ? 0 : it->second;
    workers[std::to_string(id)] = {{"processes", t.processes},
                                   {"pushed", t.c.pushed},
                                   {"acknowledged", t.c.acknowledged},
                                   {"dropped", t.c.dropped},
                                   {"refused", t.c.refused},
                                   {"in_flight_at_exit", t.c.InFlight()},
                                   {"taken", tk}};
    acknowledged += t.c.acknowledged;
    in_flight += t.c.InFlight();
  }
  json out = {{"workers", workers}, {"acknowledged", acknowledged}, {"in_flight_at_exit", in_flight}};
  if (!unreadable.empty()) out["unreadable_ledgers"] = unreadable;
  return out;
}

// Elastic jobs: the data units and who was a member when. Every pushed
// chunk acknowledged is taken, or answered DUPLICATE because its chunk had
// taken the unit from another worker (unit_duplicates), or resent.
json ElasticReport(const std::optional<stats::CoordinatorStats>& coord, const Totals& t) {
  json e = {{"shards", t.elastic_shards}, {"unit_duplicates", t.unit_duplicates}};
  json timeline = json::array();
  if (coord) {
    e["units_total"] = coord->units_total();
    e["units_finished"] = coord->units_finished();
    e["units_reissued"] = coord->units_reissued();
    for (const auto& m : coord->membership())
      timeline.push_back(
          {{"at_s", m.at_s()}, {"worker", m.worker()}, {"what", m.what()}, {"clock", m.clock()}, {"live", m.live()}});
  }
  e["membership"] = timeline;
  return e;
}

// Each region's aggregator (regions.NAME.aggregator): its stats file as it
// wrote it last (null if it wrote none), by region name.
json Aggregators(const RunRecord& run) {
  json out = json::object();
  for (size_t r = 0; r < run.job.regions.size(); ++r)
    if (run.job.regions[r].aggregator)
      out[run.job.regions[r].name] = ReadJson(run.dir.stats(ProcessId::Aggregator(static_cast<int>(r)).Name()));
  return out;
}

json BuildSummary(const RunRecord& run) {
  const auto coord = ReadStats<stats::CoordinatorStats>(run.dir.stats("coordinator"));
  // The launcher's clock; the coordinator's own count restarts with it.
  const double wall = run.span.Seconds().value_or(coord ? coord->training_seconds() : 0);
  json summary = JobOutcome(run, coord, wall);
  const std::set<int> promoted = PromotedShards(run);
  const Totals t = AddUpProcesses(run, promoted);
  AddTraffic(t, wall, summary);
  if (run.job.data.dataset == DatasetKind::kTokens && t.samples > 0) {
    // A sample is a window of data.context predicted tokens.
    const double tokens = static_cast<double>(t.samples) * run.job.data.context;
    summary["tokens"] = tokens;
    summary["tokens_per_second"] = wall > 0 ? tokens / wall : 0.0;
    summary["bytes_per_token"] = {{"push", static_cast<double>(t.push_bytes) / tokens},
                                  {"pull", static_cast<double>(t.pull_bytes) / tokens},
                                  {"total", static_cast<double>(t.push_bytes + t.pull_bytes) / tokens}};
  }
  summary["partition"] = t.partition;
  summary["federated"] = t.federated;
  if (run.job.federated.dp() && t.federated.is_object())
    summary["federated"]["dp"] = DpReport(run.job.federated, t.rounds_run);
  if (t.federated.is_object()) AddRounds(run, t, summary);
  summary["faults_injected"] = run.faults.faults();
  summary["recoveries"] = TimeFailovers(run);
  // Every pushed chunk a worker process saw acknowledged (applied or
  // duplicate), from the push ledgers, which survive a killed process (the
  // stats files do not: a restarted worker rewrites its predecessor's), and
  // every chunk the shards' last serving processes took: equal when no
  // acknowledged update was lost, none was applied twice, and no worker
  // died with a push in flight (push_accounting has the difference).
  json accounting = PushAccounting(run.dir.stats_dir(), t.taken_by_worker);
  summary["push_accounting"] = accounting;
  summary["pushes_acknowledged"] = accounting["acknowledged"];
  summary["updates_taken"] = t.updates_taken;
  summary["duplicates_answered"] = t.duplicates;
  if (run.job.membership.elastic) summary["elastic"] = ElasticReport(coord, t);
  summary["replication"] = {{"backups", run.job.replication.backups},
                            {"promoted", json(std::vector<int>(promoted.begin(), promoted.end()))}};
  if (run.job.HasAggregators()) summary["aggregators"] = Aggregators(run);
  if (run.wan || run.netns || run.link_traffic) {
    summary["links"] = EmulatedLinks(run, wall);
    summary["link_events"] = run.faults.link_events();
    summary["emulator"] = EmulatorCost(run);
  }
  return summary;
}

namespace {

Status WriteSummary(const json& summary, const RunRecord& run, const std::string& summary_file) {
  std::string text = summary.dump(2);
  if (summary["federated"].is_object() && summary["federated"].contains("rounds"))
    GD_RETURN_IF_ERROR(WriteFileAtomic(run.dir.rounds_csv(), RoundsCsv(summary["federated"]["rounds"])));
  GD_RETURN_IF_ERROR(WriteFileAtomic(run.dir.summary_json(), text));
  if (summary_file.empty()) return Status::Ok();
  auto parent = std::filesystem::path(summary_file).parent_path();
  if (!parent.empty()) GD_RETURN_IF_ERROR(MakeDirs(parent.string()));
  return WriteFileAtomic(summary_file, text);
}

}  // namespace

namespace {

// "test accuracy A after S s of training (...); reached T at X s", or for
// models with their own loss "validation loss L (perplexity P) after ...".
std::string VerdictLine(const json& summary, const EvalSpec& eval) {
  const double wall = summary["wall_seconds"].get<double>();
  const int64_t samples = summary["samples"].get<int64_t>();
  const bool accuracy = summary["test_accuracy"].is_number();
  std::string line = accuracy ? "test accuracy " + Fmt("%.4f", summary["test_accuracy"].get<double>())
                              : "validation loss " + Fmt("%.4f", summary["test_loss"].get<double>());
  if (summary.contains("test_perplexity"))
    line += " (perplexity " + Fmt("%.3f", summary["test_perplexity"].get<double>()) + ")";
  line += " after " + Fmt("%.1f", wall) + " s of training (" + Fmt("%.0f", wall > 0 ? samples / wall : 0) +
          " samples/s, " + std::to_string(samples) + " samples)";
  if (summary["seconds_to_target"].is_number())
    line += "; reached " + (accuracy ? Fmt("%.2f", eval.target_accuracy) : "loss " + Fmt("%.3f", eval.target_loss)) +
            " at " + Fmt("%.1f", summary["seconds_to_target"].get<double>()) + " s";
  return line;
}

}  // namespace

// The verdict goes to the terminal first: a summary that cannot be written
// (a full disk) must not hide the accuracy or the failure.
StatusOr<int> FinishRun(const json& summary, const RunRecord& run, const std::string& summary_file,
                        ProgressLine& progress) {
  const std::string outcome = ToString(run.outcome);
  const bool scored = summary["test_accuracy"].is_number() || summary["test_loss"].is_number();
  if (scored) {
    progress.Say("geodesic: " + outcome + ": " + VerdictLine(summary, run.job.eval));
    if (!run.failure.empty()) progress.Say("geodesic: failed: " + run.failure);
  } else {
    progress.Say("geodesic: " + outcome + (run.failure.empty() ? "" : ": " + run.failure) + "; no final score");
  }
  Status written = WriteSummary(summary, run, summary_file);
  if (!written.ok()) {
    progress.Say("geodesic: could not write the summary: " + written.message());
    return 1;
  }
  progress.Say("geodesic: summary written to " + (summary_file.empty() ? run.dir.summary_json() : summary_file));
  if (run.outcome == Outcome::kInterrupted) return 130;
  // A model without a network (synthetic, for benchmarks) has no score.
  bool evaluated = scored || run.job.model.name == ModelKind::kSynthetic;
  return run.outcome == Outcome::kFinished && evaluated ? 0 : 1;
}

StatusOr<int> SummarizeRunDir(const JobSpec& job, const std::string& run_dir, const std::string& summary_file,
                              ProgressLine& progress) {
  const RunDir dir{.path = run_dir};
  if (!std::filesystem::is_directory(dir.stats_dir()))
    return NotFound(run_dir + " holds no stats/ directory: is it a run directory (a compose deployment's volume)?");
  Supervisor none("", nullptr);
  FaultInjector no_faults({}, {}, "", nullptr, nullptr);
  json traffic;
  const bool has_links = std::filesystem::exists(dir.File("links.json"));
  if (has_links) {
    GD_ASSIGN_OR_RETURN(std::string text, ReadFile(dir.File("links.json")));
    traffic = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!traffic.is_array()) return InvalidArgument(dir.File("links.json") + ": not the link router's JSON array");
  }
  const bool finished = std::filesystem::exists(dir.result_json());
  const RunRecord run{.job = job,
                      .dir = dir,
                      .outcome = finished ? Outcome::kFinished : Outcome::kFailed,
                      .failure = finished ? "" : "no " + dir.result_json() + ": the evaluator has not finished",
                      .losses = {},
                      .unwritten = {},
                      .span = {},
                      .total_wall_seconds = 0,
                      .children = none,
                      .faults = no_faults,
                      .recoveries = json::array(),
                      .link_probes = json::array(),
                      .wan = nullptr,
                      .netns = nullptr,
                      .link_traffic = has_links ? &traffic : nullptr};
  return FinishRun(BuildSummary(run), run, summary_file, progress);
}

}  // namespace geodesic::deploy
