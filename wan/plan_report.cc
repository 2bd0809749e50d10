#include "wan/plan_report.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace geodesic::wan {
namespace {

template <typename... Args>
std::string Format(const char* fmt, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

std::string Counts(const std::vector<uint64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "/" : "") + std::to_string(v[i]);
  return s;
}

std::vector<uint64_t> ChunksPerServer(int servers, const std::vector<int32_t>& owner) {
  std::vector<uint64_t> n(servers, 0);
  for (int32_t s : owner) ++n[s];
  return n;
}

// One placement of the comparison.
struct Row {
  std::string name;
  std::vector<uint64_t> chunks;
  Prediction prediction;
};

// What both forms of the report show.
struct Report {
  const Planner& planner;
  const Plan& plan;
  const std::vector<std::string>& regions;
  int R = 0, S = 0;
  std::vector<uint64_t> chunks = {}, elems = {};  // per server
  std::vector<Row> rows = {};                     // the plan first
  std::vector<std::string> notes = {};
};

std::vector<Row> CompareRows(const Report& r,
                             const std::vector<std::pair<std::string, std::vector<int32_t>>>& baselines) {
  std::vector<Row> rows = {{"planner", r.chunks, r.plan.prediction}};
  std::vector<std::pair<std::string, std::vector<int32_t>>> others = baselines;
  others.push_back({"round-robin", r.planner.RoundRobin()});
  for (const auto& [name, o] : others) {
    auto pr = r.planner.Predict(o, r.plan.codecs, r.plan.links);
    if (pr.ok()) rows.push_back({name, ChunksPerServer(r.S, o), *pr});
  }
  return rows;
}

std::vector<std::string> Notes(const Report& r) {
  bool lossy_links = false;
  for (int a = 0; a < r.R; ++a)
    for (int b = 0; b < r.R; ++b) lossy_links |= r.plan.links.at(a, b).loss > 0;
  std::vector<std::string> notes = {};
  if (lossy_links && r.planner.emulation() != WanEmulation::kNetns)
    notes.push_back("wan.emulation is " + ToString(r.planner.emulation()) +
                    ": declared loss is not emulated, so measured times on lossy links will be lower");
  notes.push_back(r.planner.overlapped()
                      ? "staleness bound >= 1: the model overlaps compute with the round trip and pushes with pulls"
                      : "BSP: the model adds compute, pushes and pulls (a pull waits for every push)");
  return notes;
}

// ---- JSON ----

nlohmann::json PredictionJson(const Prediction& pr) {
  nlohmann::json j = {
      {"compute_ms", pr.compute_ms}, {"comm_ms", pr.comm_ms}, {"step_ms", pr.step_ms}, {"bottleneck", pr.bottleneck}};
  if (pr.local_steps > 1) {
    j["local_steps"] = pr.local_steps;
    j["round_ms"] = pr.round_ms;
    j["overlap_rounds"] = pr.overlap_rounds;
    j["overlap_steps"] = pr.overlap_steps;
    j["fragments"] = pr.fragments;
    j["fragment_comm_ms"] = pr.fragment_comm_ms;
  }
  j["links"] = nlohmann::json::array();
  for (const LinkLoad& l : pr.links)
    j["links"].push_back({{"from", l.from},
                          {"to", l.to},
                          {"push_bytes", l.push_bytes},
                          {"pull_bytes", l.pull_bytes},
                          {"delay_ms", l.delay_ms},
                          {"goodput_mbit", l.goodput_mbit},
                          {"serialization_ms", l.serialization_ms},
                          {"recovery_ms", l.recovery_ms},
                          {"time_ms", l.time_ms}});
  j["pairs"] = nlohmann::json::array();
  for (const PairTime& t : pr.pairs)
    j["pairs"].push_back({{"worker_region", t.worker_region}, {"server_region", t.server_region}, {"ms", t.ms}});
  return j;
}

nlohmann::json LinkMatrixJson(const Report& r) {
  const LinkMatrix& m = r.plan.links;
  nlohmann::json links = nlohmann::json::array();
  for (int a = 0; a < r.R; ++a)
    for (int b = 0; b < r.R; ++b) {
      const LinkState& l = m.at(a, b);
      links.push_back({{"from", r.regions[a]},
                       {"to", r.regions[b]},
                       {"delay_ms", l.delay_ms},
                       {"bandwidth_mbit", l.bandwidth_mbit},
                       {"loss", l.loss},
                       {"declared", l.declared},
                       {"goodput_mbit", m.GoodputMbit(a, b)}});
    }
  return links;
}

nlohmann::json PlanJson(const Report& r) {
  nlohmann::json servers = nlohmann::json::array();
  for (int s = 0; s < r.S; ++s)
    servers.push_back({{"id", s},
                       {"region", r.regions[r.planner.server_regions()[s]]},
                       {"chunks", r.chunks[s]},
                       {"bytes", r.elems[s] * sizeof(float)}});
  nlohmann::json codecs = nlohmann::json::array();
  for (int w = 0; w < r.R; ++w)
    for (int s = 0; s < r.R; ++s)
      codecs.push_back({{"worker_region", r.regions[w]},
                        {"server_region", r.regions[s]},
                        {"push", r.plan.codecs.Push(w, s)},
                        {"pull", r.plan.codecs.Pull(w, s)}});
  return {{"owner", r.plan.shard_map.owner},
          {"servers", servers},
          {"codecs", codecs},
          {"prediction", PredictionJson(r.plan.prediction)}};
}

std::string JsonReport(const Report& r) {
  const cluster::ChunkLayout& layout = r.planner.layout();
  nlohmann::json j;
  j["num_params"] = layout.num_params();
  j["chunk_elems"] = layout.chunk_elems();
  j["num_chunks"] = layout.num_chunks();
  j["compute_ms"] = r.planner.compute_ms();
  j["link_matrix"] = LinkMatrixJson(r);
  j["plan"] = PlanJson(r);
  j["comparison"] = nlohmann::json::array();
  for (const Row& row : r.rows)
    j["comparison"].push_back({{"placement", row.name},
                               {"chunks_per_server", row.chunks},
                               {"step_ms", row.prediction.step_ms},
                               {"comm_ms", row.prediction.comm_ms},
                               {"bottleneck", row.prediction.bottleneck}});
  j["notes"] = r.notes;
  return j.dump(2) + "\n";
}

// ---- text ----

std::string TextModelAndLinks(const Report& r) {
  const cluster::ChunkLayout& layout = r.planner.layout();
  const LinkMatrix& m = r.plan.links;
  std::string out;
  const uint64_t last = layout.num_params() - layout.Begin(layout.num_chunks() - 1);
  out += Format("model: %llu parameters in %u chunks of %llu floats (the last %llu); %d servers, %d regions\n",
                static_cast<unsigned long long>(layout.num_params()), layout.num_chunks(),
                static_cast<unsigned long long>(layout.chunk_elems()), static_cast<unsigned long long>(last), r.S, r.R);
  out += Format("compute: %.1f ms per step per worker (--compute-ms); cost model: docs/planner.md\n\n",
                r.planner.compute_ms());
  out += m.bbr() ? "link matrix (one way; goodput under BBR: the bandwidth less the lost packets):\n"
                 : "link matrix (one way; goodput: the bandwidth, capped under loss by the Mathis TCP model):\n";
  out += Format("  %-24s %9s %10s %7s %10s\n", "link", "delay ms", "Mbit/s", "loss", "goodput");
  for (int a = 0; a < r.R; ++a)
    for (int b = 0; b < r.R; ++b) {
      const LinkState& l = m.at(a, b);
      out += Format("  %-24s %9.2f %10.1f %7.4f %10.2f%s\n", (r.regions[a] + " -> " + r.regions[b]).c_str(), l.delay_ms,
                    l.bandwidth_mbit, l.loss, m.GoodputMbit(a, b), l.declared ? "" : "  (undeclared: loopback)");
    }
  return out;
}

std::string TextPlacementAndCodecs(const Report& r) {
  std::string out = "\nplacement:\n";
  out += Format("  %-8s %-12s %7s %12s %8s\n", "server", "region", "chunks", "bytes", "workers");
  for (int s = 0; s < r.S; ++s) {
    const int region = r.planner.server_regions()[s];
    out += Format("  %-8d %-12s %7llu %12llu %8d\n", s, r.regions[region].c_str(),
                  static_cast<unsigned long long>(r.chunks[s]),
                  static_cast<unsigned long long>(r.elems[s] * sizeof(float)), r.planner.workers_per_region()[region]);
  }
  out += "\ncodecs per region pair (push / pull):\n";
  for (int a = 0; a < r.R; ++a)
    for (int b = a; b < r.R; ++b)
      out += Format("  %-24s %s / %s\n", (r.regions[a] + " <-> " + r.regions[b]).c_str(),
                    r.plan.codecs.Push(a, b).c_str(), r.plan.codecs.Pull(a, b).c_str());
  return out;
}

std::string TextTraffic(const Report& r) {
  std::string out = "\npredicted traffic per step (links with traffic):\n";
  out += Format("  %-24s %12s %12s %9s %12s %9s\n", "link", "push bytes", "pull bytes", "delay ms", "serialize ms",
                "time ms");
  for (const LinkLoad& l : r.plan.prediction.links) {
    if (l.time_ms == 0) continue;
    out += Format("  %-24s %12.0f %12.0f %9.2f %12.2f %9.2f\n", (l.from + " -> " + l.to).c_str(), l.push_bytes,
                  l.pull_bytes, l.delay_ms, l.serialization_ms, l.time_ms);
  }
  out += r.plan.links.bbr() && !r.planner.overlapped()
             ? Format(
                   "\npredicted push-then-pull time per (worker region, server region; under BBR at least "
                   "%.2f RTT):\n",
                   1 + kBbrExchangeRtts)
             : "\npredicted push-then-pull time per (worker region, server region):\n";
  for (const PairTime& t : r.plan.prediction.pairs)
    out +=
        Format("  %-32s %9.2f ms\n", (t.worker_region + " workers <-> " + t.server_region + " servers").c_str(), t.ms);
  return out;
}

std::string TextStep(const Report& r) {
  const Prediction& pr = r.plan.prediction;
  if (pr.local_steps > 1 && pr.fragments > 1) {
    const int hidden_steps = !pr.overlap_rounds ? 0 : pr.overlap_steps > 0 ? pr.overlap_steps : pr.local_steps;
    return Format(
        "\npredicted step: %.1f ms = round %.1f ms / %d local steps; round = %d x compute %.1f + its fragment's "
        "exchange less the %.1f ms the next round hides (%d fragments in turn: %.1f ms on average, the whole "
        "model %.1f ms; bottleneck of the whole model: %s)\n",
        pr.step_ms, pr.round_ms, pr.local_steps, pr.local_steps, pr.compute_ms, hidden_steps * pr.compute_ms,
        pr.fragments, pr.fragment_comm_ms, pr.comm_ms, pr.bottleneck.c_str());
  }
  if (pr.local_steps > 1 && pr.overlap_steps > 0)
    return Format(
        "\npredicted step: %.1f ms = round %.1f ms / %d local steps; round = %d x compute %.1f + max(0, "
        "communication %.1f - %d x compute) (bottleneck: %s)\n",
        pr.step_ms, pr.round_ms, pr.local_steps, pr.local_steps, pr.compute_ms, pr.comm_ms, pr.overlap_steps,
        pr.bottleneck.c_str());
  if (pr.local_steps > 1)
    return Format(pr.overlap_rounds
                      ? "\npredicted step: %.1f ms = round %.1f ms / %d local steps; round = max(%d x compute %.1f, "
                        "communication %.1f) (bottleneck: %s)\n"
                      : "\npredicted step: %.1f ms = round %.1f ms / %d local steps; round = %d x compute %.1f + "
                        "communication %.1f (bottleneck: %s)\n",
                  pr.step_ms, pr.round_ms, pr.local_steps, pr.local_steps, pr.compute_ms, pr.comm_ms,
                  pr.bottleneck.c_str());
  return Format(r.planner.overlapped()
                    ? "\npredicted step: %.1f ms = max(compute %.1f, communication %.1f) (bottleneck: %s)\n"
                    : "\npredicted step: %.1f ms = compute %.1f + communication %.1f (bottleneck: %s)\n",
                pr.step_ms, pr.compute_ms, pr.comm_ms, pr.bottleneck.c_str());
}

std::string TextComparison(const Report& r) {
  std::string out = "\ncomparison (the plan's codecs):\n";
  out += Format("  %-16s %10s %10s  %-18s %s\n", "placement", "step ms", "comm ms", "chunks/server", "bottleneck");
  for (const Row& row : r.rows)
    out += Format("  %-16s %10.1f %10.1f  %-18s %s\n", row.name.c_str(), row.prediction.step_ms, row.prediction.comm_ms,
                  Counts(row.chunks).c_str(), row.prediction.bottleneck.c_str());
  for (const std::string& n : r.notes) out += "\nnote: " + n;
  return out + "\n";
}

}  // namespace

std::string PlanReport(const Planner& planner, const Plan& plan,
                       const std::vector<std::pair<std::string, std::vector<int32_t>>>& baselines, bool json) {
  Report r{.planner = planner, .plan = plan, .regions = planner.regions()};
  r.R = static_cast<int>(r.regions.size());
  r.S = planner.num_servers();
  const cluster::ChunkLayout& layout = planner.layout();
  const std::vector<int32_t>& owner = plan.shard_map.owner;
  r.chunks = ChunksPerServer(r.S, owner);
  r.elems.assign(r.S, 0);
  for (uint32_t c = 0; c < owner.size(); ++c)
    r.elems[owner[c]] += std::min(layout.chunk_elems(), layout.num_params() - layout.Begin(c));
  r.rows = CompareRows(r, baselines);
  r.notes = Notes(r);
  if (json) return JsonReport(r);
  return TextModelAndLinks(r) + TextPlacementAndCodecs(r) + TextTraffic(r) + TextStep(r) + TextComparison(r);
}

double WanBytesPerStep(const Prediction& p) {
  double bytes = 0;
  for (const LinkLoad& l : p.links)
    if (l.from != l.to) bytes += l.push_bytes + l.pull_bytes;
  return bytes;
}

std::string AggregatorComparison(const Plan& as_job, const Plan& other, bool job_has, bool json) {
  const Prediction &with = job_has ? as_job.prediction : other.prediction,
                   &without = job_has ? other.prediction : as_job.prediction;
  if (json)
    return nlohmann::json{{"with", {{"wan_bytes_per_step", WanBytesPerStep(with)}, {"step_ms", with.step_ms}}},
                          {"without", {{"wan_bytes_per_step", WanBytesPerStep(without)}, {"step_ms", without.step_ms}}}}
        .dump();
  std::string out = "\nregional aggregators (regions.NAME.aggregator; the planner's placement for each):\n";
  out += Format("  %-32s %14s %10s\n", "", "WAN MB/step", "step ms");
  out += Format("  %-32s %14.2f %10.1f\n", job_has ? "as the job says" : "an aggregator in every region",
                WanBytesPerStep(with) / 1e6, with.step_ms);
  out += Format("  %-32s %14.2f %10.1f\n", job_has ? "none" : "none (as the job says)", WanBytesPerStep(without) / 1e6,
                without.step_ms);
  return out;
}

}  // namespace geodesic::wan
