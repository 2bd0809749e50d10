#include "deploy/rounds.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/format.h"

namespace geodesic::deploy {
namespace {

using json = nlohmann::json;

const char* const kColumns[] = {"round",
                                "test_accuracy",
                                "test_loss",
                                "selected",
                                "participants",
                                "dropped",
                                "unusable",
                                "clipped",
                                "samples",
                                "bytes_up",
                                "bytes_down",
                                "wall_s",
                                "compute_s",
                                "client_eval_s",
                                "straggler_wait_s",
                                "comm_s",
                                "client_accuracy_mean",
                                "client_accuracy_p10",
                                "late",
                                "simulated_s",
                                "mean_staleness",
                                "client_bytes_up",
                                "refused",
                                "real_clients"};

// The nearest-rank 10th percentile.
double P10(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<size_t>(std::ceil(0.1 * static_cast<double>(v.size())));
  return v[std::max<size_t>(rank, 1) - 1];
}

// `curve`'s point at step `round` ([seconds, step, value]), or `last` for
// the job's last round; null if neither.
json AtRound(const json& curve, const json& last, int64_t round, int64_t last_round) {
  if (round == last_round && last.is_number()) return last;
  if (!curve.is_array()) return nullptr;
  for (const auto& p : curve)
    if (p.size() == 3 && p[1].get<int64_t>() == round) return p[2];
  return nullptr;
}

// One round's records, one per executor that ran it.
json Row(int64_t round, const std::vector<const stats::RoundStats*>& recs) {
  int64_t selected = 0, trained = 0, dropped = 0, unusable = 0, clipped = 0, samples = 0, late = 0, staleness = 0;
  double simulated = 0, client_up = 0;
  int64_t refused = 0, real = 0;
  double up = 0, down = 0, start = 1e300, end = 0, last_push = 0, compute = 0, eval = 0, span = 0, pushed = 0;
  bool closed = true;
  std::vector<float> acc;
  std::vector<int64_t> clients;
  for (const stats::RoundStats* r : recs) {
    clients.insert(clients.end(), r->clients().begin(), r->clients().end());
    selected = std::max<int64_t>(selected, r->selected());
    trained += r->trained(), dropped += r->dropped(), unusable += r->unusable(), clipped += r->clipped();
    samples += r->samples(), up += r->bytes_sent(), down += r->bytes_received();
    late += r->late(), simulated = std::max(simulated, r->simulated_seconds()), staleness += r->staleness_sum();
    client_up += r->client_uplink_bytes(), refused += r->refused(), real += r->real();
    start = std::min(start, r->start_unix()), end = std::max(end, r->end_unix());
    last_push = std::max(last_push, r->pushed_unix()), pushed += r->pushed_unix();
    compute += r->compute_seconds(), eval += r->client_eval_seconds();
    span += r->end_unix() - r->start_unix();
    closed = closed && r->end_unix() > 0;
    acc.insert(acc.end(), r->client_accuracy().begin(), r->client_accuracy().end());
  }
  const auto n = static_cast<double>(recs.size());
  const double wait = last_push - pushed / n;
  json row = {
      {"round", round},       {"selected", selected},     {"participants", trained},   {"dropped", dropped},
      {"unusable", unusable}, {"clipped", clipped},       {"samples", samples},        {"bytes_up", up},
      {"bytes_down", down},   {"compute_s", compute / n}, {"client_eval_s", eval / n}, {"straggler_wait_s", wait},
      {"late", late},         {"simulated_s", simulated}};
  row["client_bytes_up"] = client_up;
  row["refused"] = refused;
  row["real_clients"] = real;
  row["mean_staleness"] = trained > 0 ? static_cast<double>(staleness) / static_cast<double>(trained) : 0.0;
  row["wall_s"] = closed ? json(end - start) : json(nullptr);
  row["comm_s"] = closed ? json(std::max(0.0, span / n - (compute + eval) / n - wait)) : json(nullptr);
  std::sort(clients.begin(), clients.end());
  row["clients"] = clients;
  double mean = 0;
  for (float a : acc) mean += a;
  row["client_accuracy_mean"] = acc.empty() ? json(nullptr) : json(mean / static_cast<double>(acc.size()));
  row["client_accuracy_p10"] = acc.empty() ? json(nullptr) : json(P10(acc));
  return row;
}

}  // namespace

json RoundTable(const std::vector<std::vector<stats::RoundStats>>& executors, const json& scores, int64_t last_round) {
  auto get = [&](const char* key) { return scores.is_object() && scores.contains(key) ? scores[key] : json(); };
  std::map<int64_t, std::vector<const stats::RoundStats*>> by_round;
  for (const auto& records : executors)
    for (const stats::RoundStats& r : records) by_round[int64_t{r.round()} + 1].push_back(&r);
  json table = json::array();
  for (const auto& [round, recs] : by_round) {
    json row = Row(round, recs);
    row["test_accuracy"] = AtRound(get("accuracy_curve"), get("test_accuracy"), round, last_round);
    row["test_loss"] = AtRound(get("loss_curve"), get("test_loss"), round, last_round);
    table.push_back(std::move(row));
  }
  return table;
}

json RoundTotals(const json& table) {
  double wall = 0, compute = 0, eval = 0, wait = 0, comm = 0, simulated = 0, longest = 0;
  int64_t closed = 0;
  for (const auto& row : table) {
    simulated += row["simulated_s"].get<double>();
    longest = std::max(longest, row["simulated_s"].get<double>());
    if (!row["wall_s"].is_number()) continue;
    ++closed;
    wall += row["wall_s"].get<double>();
    compute += row["compute_s"].get<double>(), eval += row["client_eval_s"].get<double>();
    wait += row["straggler_wait_s"].get<double>(), comm += row["comm_s"].get<double>();
  }
  const double mean_round = compute + eval + wait + comm;
  auto share = [&](double x) { return mean_round > 0 ? x / mean_round : 0.0; };
  return {{"rounds", table.size()},
          {"mean_wall_s", closed > 0 ? wall / static_cast<double>(closed) : 0.0},
          {"simulated_s", simulated},
          {"longest_simulated_round_s", longest},
          {"share",
           {{"compute", share(compute)},
            {"client_eval", share(eval)},
            {"straggler_wait", share(wait)},
            {"comm", share(comm)}}}};
}

std::string RoundsCsv(const json& table) {
  std::string out;
  for (const char* c : kColumns) out += std::string(out.empty() ? "" : ",") + c;
  out += "\n";
  for (const auto& row : table) {
    bool first = true;
    for (const char* c : kColumns) {
      if (!first) out += ",";
      first = false;
      const json& v = row.value(c, json());
      if (v.is_number_integer())
        out += std::to_string(v.get<int64_t>());
      else if (v.is_number())
        out += StrFormat("%.10g", v.get<double>());
    }
    out += "\n";
  }
  return out;
}

}  // namespace geodesic::deploy
