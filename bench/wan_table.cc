// The tables of `geodesic bench wan` (bench/wan_table.h).
#include "bench/wan_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "bench/stats.h"

namespace geodesic::bench {
namespace {

using json = nlohmann::json;

json Ratio(const json& a, const json& b) {
  return a.is_number() && b.is_number() && b.get<double>() > 0 ? json(a.get<double>() / b.get<double>()) : json();
}

std::string Num(const json& v, const char* fmt, const char* missing = "not reached") {
  if (!v.is_number()) return std::string(missing);
  char b[96];
  std::snprintf(b, sizeof(b), fmt, v.get<double>());
  return std::string(b);
}

}  // namespace

void AddRatios(json& rows) {
  auto seconds_of = [&](const std::string& name) -> json {
    for (const auto& r : rows)
      if (r["config"] == name) return r["seconds_to_target"];
    return json();
  };
  const json lan = seconds_of("lan");
  json best_lan;  // the fastest configuration without emulation, whichever it is
  for (const auto& r : rows)
    if (r["emulation"] == "none" && r["seconds_to_target"].is_number() &&
        (!best_lan.is_number() || r["seconds_to_target"].get<double>() < best_lan.get<double>()))
      best_lan = r["seconds_to_target"];
  json ddp_seconds, ddp_bound;  // DDP's time to the target, or the time it trained without reaching it
  for (const auto& r : rows)
    if (r["config"] == "ddp") {
      ddp_seconds = r["seconds_to_target"];
      if (!ddp_seconds.is_number()) ddp_bound = r["wall_seconds"];
    }
  for (auto& r : rows) {
    const json t = r["seconds_to_target"];
    r["vs_lan"] = Ratio(t, lan);
    r["vs_best_lan"] = Ratio(t, best_lan);
    r["vs_own_lan"] = r.value("own_lan", std::string()).empty() ? json() : Ratio(t, seconds_of(r["own_lan"]));
    if (r["config"] != "ddp") {
      r["ddp_over_this"] = Ratio(ddp_seconds, t);
      r["ddp_over_this_at_least"] = Ratio(ddp_bound, t);
    }
  }
}

// Every pass runs each configuration once (DDP only the first).
void AddRatiosPerPass(json& runs, int repeats) {
  for (int k = 1; k <= repeats; ++k) {
    json pass = json::array();
    for (const auto& r : runs)
      if (r["repeat"] == k) pass.push_back(r);
    AddRatios(pass);
    size_t i = 0;
    for (auto& r : runs)
      if (r["repeat"] == k) r = pass[i++];
  }
}

json Medians(const json& runs, const std::vector<std::string>& configs) {
  constexpr double kMissed = std::numeric_limits<double>::infinity();
  json rows = json::array();
  for (const std::string& name : configs) {
    std::vector<json> mine;
    for (const auto& r : runs)
      if (r["config"] == name) mine.push_back(r);
    if (mine.empty()) continue;
    json row = mine.front();
    row.erase("run");
    row.erase("repeat");
    row["runs"] = mine.size();
    row["seconds_to_target_each"] = json::array();
    for (const auto& r : mine) row["seconds_to_target_each"].push_back(r["seconds_to_target"]);
    for (const std::string key : {"seconds_to_target", "test_accuracy", "wall_seconds", "observed_step_ms",
                                  "predicted_step_ms", "bytes_per_sample", "compute_utilization"}) {
      std::vector<double> v;
      for (const auto& r : mine) {
        const json x = r.value(key, json());
        if (x.is_number())
          v.push_back(x.get<double>());
        else if (key == "seconds_to_target")
          v.push_back(kMissed);
      }
      const double m = v.empty() ? kMissed : Median(v);
      row[key] = std::isfinite(m) ? json(m) : json();
    }
    rows.push_back(row);
  }
  return rows;
}

void WriteTables(const json& rows, double target, const std::string& out, const std::string& stem) {
  std::ofstream md(out + "/" + stem + ".md"), csv(out + "/" + stem + ".csv");
  csv << "config,emulation,test_accuracy,seconds_to_target,vs_lan,vs_best_lan,vs_own_lan,ddp_over_this,"
         "ddp_over_this_at_least,wall_seconds,steps,observed_step_ms,predicted_step_ms,bytes_per_sample,"
         "compute_utilization\n";
  md << "| configuration | links | time to " << target << " (s) | vs LAN | vs best LAN | vs own LAN | DDP / this | "
     << "final accuracy | training (s) | steps | step (ms) | predicted step (ms) | predicted / observed | "
     << "bytes/sample | compute utilization |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    const json t = r["seconds_to_target"];
    const std::string name = r.value("run", r["config"].get<std::string>());
    const json pred = r.value("predicted_step_ms", json());
    std::string ddp_col = Num(r.value("ddp_over_this", json()), "%.1fx", "-");
    if (r.value("ddp_over_this_at_least", json()).is_number()) ddp_col = Num(r["ddp_over_this_at_least"], ">= %.1fx");
    csv << name << "," << r["emulation"].get<std::string>() << "," << r["test_accuracy"] << "," << t << ","
        << r["vs_lan"] << "," << r["vs_best_lan"] << "," << r["vs_own_lan"] << "," << r.value("ddp_over_this", json())
        << "," << r.value("ddp_over_this_at_least", json()) << "," << r["wall_seconds"] << "," << r["steps"] << ","
        << r["observed_step_ms"] << "," << pred << "," << r.value("bytes_per_sample", json()) << ","
        << r.value("compute_utilization", json()) << "\n";
    md << "| " << name << " (" << r["what"].get<std::string>() << ") | " << r["emulation"].get<std::string>() << " | "
       << (t.is_number() ? Num(t, "%.1f") : "> " + Num(r["wall_seconds"], "%.0f") + " (not reached)") << " | "
       << Num(r["vs_lan"], "%.2fx", "-") << " | " << Num(r["vs_best_lan"], "%.2fx", "-") << " | "
       << Num(r["vs_own_lan"], "%.2fx", "-") << " | " << ddp_col << " | " << Num(r["test_accuracy"], "%.4f") << " | "
       << Num(r["wall_seconds"], "%.1f") << " | " << r["steps"] << " | " << Num(r["observed_step_ms"], "%.0f") << " | "
       << Num(pred, "%.0f", "-") << " | " << Num(Ratio(pred, r["observed_step_ms"]), "%.2f", "-") << " | "
       << Num(r.value("bytes_per_sample", json()), "%.0f", "-") << " | "
       << Num(r.value("compute_utilization", json()), "%.2f", "-") << " |\n";
  }
}

}  // namespace geodesic::bench
