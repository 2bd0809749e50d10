#include "bench/sweep_row.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "bench/run_job.h"
#include "common/files.h"

namespace geodesic::bench {
namespace {

using json = nlohmann::json;

json Get(const json& s, const char* key) { return s.is_object() && s.contains(key) ? s[key] : json(); }

// Shares of the workers' time in compute, communication and staleness
// wait, over all workers' seconds together.
void AddShares(const json& summary, json& row) {
  double compute = 0, comm = 0, wait = 0;
  const json b = Get(summary, "step_time_breakdown");
  if (b.is_object())
    for (const auto& [name, w] : b.items()) {
      const json sec = w.value("seconds", json::object());
      compute += sec.value("compute", 0.0), comm += sec.value("communication", 0.0),
          wait += sec.value("staleness_wait", 0.0);
    }
  const double total = compute + comm + wait;
  row["compute_share"] = total > 0 ? json(compute / total) : json();
  row["communication_share"] = total > 0 ? json(comm / total) : json();
  row["staleness_wait_share"] = total > 0 ? json(wait / total) : json();
  row["compute_utilization"] = MeanComputeUtilization(summary);
}

// The accuracy (or loss) curve with the bytes the workers had exchanged by each
// snapshot: the run's total in proportion to the snapshot's step (a
// worker's bytes per step are constant for a configuration).
json CurveWithBytes(const json& summary) {
  json out = json::array();
  // Models with their own loss have no accuracy curve: their loss curve.
  json curve = Get(summary, "accuracy_curve");
  if (!curve.is_array() || curve.empty()) curve = Get(summary, "loss_curve");
  const json exchanged = Get(summary, "bytes_exchanged");
  const int64_t steps = summary.is_object() && summary.contains("step_time_breakdown") ? StepsOf(summary) : 0;
  const double total = exchanged.is_object() ? exchanged.value("total", 0.0) : 0.0;
  if (!curve.is_array()) return out;
  for (const auto& p : curve) {
    const double step = p.at(1).get<double>();
    out.push_back({p.at(0), p.at(1), p.at(2), steps > 0 ? json(total * std::min(1.0, step / steps)) : json()});
  }
  return out;
}

json Links(const json& summary) {
  json out = json::object();
  const json links = Get(summary, "links");
  if (links.is_array())
    for (const auto& l : links)
      if (l.contains("bytes")) out[l.value("from", "?") + ">" + l.value("to", "?")] = l["bytes"];
  return out;
}

std::string Cell(const json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c == '\n' ? ' ' : c);
    return q + "\"";
  }
  return v.dump();
}

std::string NumberCell(const json& v, const char* fmt) {
  if (!v.is_number()) return "-";
  char b[64];
  std::snprintf(b, sizeof(b), fmt, v.get<double>());
  return b;
}

const char* kColumns[] = {"status",
                          "test_accuracy",
                          "last_accuracy",
                          "test_loss",
                          "test_perplexity",
                          "seconds_to_target",
                          "wall_seconds",
                          "samples",
                          "samples_per_second",
                          "bytes_per_sample",
                          "wan_bytes_per_sample",
                          "aggregators",
                          "bytes_per_token_push",
                          "bytes_per_token_pull",
                          "bytes_per_token_total",
                          "tokens_per_second",
                          "push_bytes_per_step",
                          "pull_bytes_per_step",
                          "staleness_mean",
                          "staleness_max",
                          "compute_share",
                          "communication_share",
                          "staleness_wait_share",
                          "compute_utilization"};

std::string Csv(const SweepSpec& spec, const std::vector<json>& rows) {
  std::set<std::string> links;
  for (const json& r : rows)
    if (!r.is_null())
      for (const auto& [name, bytes] : r["links"].items()) links.insert(name);
  std::ostringstream csv;
  csv << "index,run";
  for (const SweepAxis& a : spec.axes) csv << "," << Cell(a.key);
  for (const char* c : kColumns) csv << "," << c;
  for (const std::string& l : links) csv << ",bytes:" << l;
  csv << ",params_sha256,failure\n";
  for (const json& r : rows) {
    if (r.is_null()) continue;
    csv << r["index"] << "," << Cell(r["run"]);
    for (const SweepAxis& a : spec.axes) csv << "," << Cell(r["axes"].value(a.key, json()));
    for (const char* c : kColumns) csv << "," << Cell(r.value(c, json()));
    for (const std::string& l : links) csv << "," << Cell(r["links"].value(l, json()));
    csv << "," << Cell(r["params_sha256"]) << "," << Cell(r["failure"]) << "\n";
  }
  return csv.str();
}

// Token runs show validation loss (perplexity), tokens/s and bytes per
// token each way; the others test accuracy, samples/s and bytes per sample.
bool TokenRows(const std::vector<json>& rows) {
  for (const json& r : rows)
    if (!r.is_null() && r["bytes_per_token_total"].is_number()) return true;
  return false;
}

std::string MarkdownRuns(const SweepSpec& spec, const std::vector<json>& rows) {
  const bool tokens = TokenRows(rows);
  std::ostringstream md;
  md << "| run |";
  for (const SweepAxis& a : spec.axes) md << " " << a.key << " |";
  md << (tokens ? " status | validation loss (perplexity) | s to target | tokens/s | bytes/token push / pull |"
                : " status | test accuracy | s to target | samples/s | bytes/sample |")
     << " staleness mean / max | compute share | compute utilization |\n|---|";
  for (size_t i = 0; i < spec.axes.size(); ++i) md << "---|";
  md << "---|---|---|---|---|---|---|---|\n";
  for (const json& r : rows) {
    if (r.is_null()) continue;
    md << "| " << r["index"].get<int>() << " |";
    for (const SweepAxis& a : spec.axes) md << " " << r["axes"].value(a.key, std::string()) << " |";
    md << " " << r["status"].get<std::string>() << " | ";
    if (tokens)
      md << NumberCell(r["test_loss"], "%.4f") << " (" << NumberCell(r["test_perplexity"], "%.2f") << ") | "
         << NumberCell(r["seconds_to_target"], "%.1f") << " | " << NumberCell(r["tokens_per_second"], "%.0f") << " | "
         << NumberCell(r["bytes_per_token_push"], "%.2f") << " / " << NumberCell(r["bytes_per_token_pull"], "%.2f");
    else
      md << NumberCell(r["test_accuracy"], "%.4f") << " | " << NumberCell(r["seconds_to_target"], "%.1f") << " | "
         << NumberCell(r["samples_per_second"], "%.0f") << " | " << NumberCell(r["bytes_per_sample"], "%.0f");
    md << " | " << NumberCell(r["staleness_mean"], "%.2f") << " / " << NumberCell(r["staleness_max"], "%.0f") << " | "
       << NumberCell(r["compute_share"], "%.2f") << " | " << NumberCell(r["compute_utilization"], "%.2f") << " |\n";
  }
  return md.str();
}

// Means over the seed axis: one line per combination of the other axes.
std::string MarkdownBySeed(const SweepSpec& spec, const std::vector<json>& rows) {
  std::vector<std::string> others;
  bool has_seed = false;
  for (const SweepAxis& a : spec.axes) {
    const bool seed = a.key == "seed" || a.key.ends_with(".seed");
    has_seed |= seed;
    if (!seed) others.push_back(a.key);
  }
  if (!has_seed) return "";
  struct Group {
    int runs = 0, reached = 0;
    double acc_sum = 0, acc_min = 1e9, acc_max = -1e9, t_sum = 0, rate_sum = 0, bytes_sum = 0;
    int acc_n = 0;
  };
  std::map<std::vector<std::string>, Group> groups;
  std::vector<std::vector<std::string>> order;
  for (const json& r : rows) {
    if (r.is_null()) continue;
    std::vector<std::string> k;
    for (const std::string& o : others) k.push_back(r["axes"].value(o, std::string()));
    if (!groups.count(k)) order.push_back(k);
    Group& g = groups[k];
    ++g.runs;
    if (r["test_accuracy"].is_number()) {
      const double a = r["test_accuracy"];
      g.acc_sum += a, g.acc_min = std::min(g.acc_min, a), g.acc_max = std::max(g.acc_max, a), ++g.acc_n;
    }
    if (r["seconds_to_target"].is_number()) ++g.reached, g.t_sum += r["seconds_to_target"].get<double>();
    g.rate_sum += r.value("samples_per_second", json(0.0)).is_number() ? r["samples_per_second"].get<double>() : 0;
    g.bytes_sum += r["bytes_per_sample"].is_number() ? r["bytes_per_sample"].get<double>() : 0;
  }
  std::ostringstream md;
  md << "\nMeans over seeds:\n\n|";
  for (const std::string& o : others) md << " " << o << " |";
  md << " runs | test accuracy (min-max) | reached target | mean s to target | samples/s | bytes/sample |\n|";
  for (size_t i = 0; i < others.size(); ++i) md << "---|";
  md << "---|---|---|---|---|---|\n";
  for (const auto& k : order) {
    const Group& g = groups[k];
    md << "|";
    for (const std::string& v : k) md << " " << v << " |";
    char acc[96] = "-";
    if (g.acc_n > 0) std::snprintf(acc, sizeof(acc), "%.4f (%.4f-%.4f)", g.acc_sum / g.acc_n, g.acc_min, g.acc_max);
    md << " " << g.runs << " | " << acc << " | " << g.reached << "/" << g.runs << " | "
       << (g.reached > 0 ? NumberCell(g.t_sum / g.reached, "%.1f") : std::string("-")) << " | "
       << NumberCell(g.rate_sum / g.runs, "%.0f") << " | " << NumberCell(g.bytes_sum / g.runs, "%.0f") << " |\n";
  }
  return md.str();
}

// What crossed the emulated WAN per sample (every link between two
// regions; null without emulation), and the regions that had an aggregator
// (regions.NAME.aggregator): with one, a region's workers' bytes stay in the
// region, and bytes_per_sample no longer says what the WAN carried.
void AddWan(const json& summary, json& row) {
  double wan = 0;
  for (const auto& [link, bytes] : row["links"].items()) wan += bytes.is_number() ? bytes.get<double>() : 0;
  const json samples = Get(summary, "samples");
  row["wan_bytes_per_sample"] = !row["links"].empty() && samples.is_number() && samples.get<double>() > 0
                                    ? json(wan / samples.get<double>())
                                    : json();
  std::string regions;
  const json aggregators = Get(summary, "aggregators");
  if (aggregators.is_object())
    for (const auto& [region, stats] : aggregators.items()) regions += (regions.empty() ? "" : " ") + region;
  row["aggregators"] = regions;
}

// The row's numbers, from the run's summary (null where it has none).
void AddSummary(const json& summary, json& row) {
  for (const char* k :
       {"test_accuracy", "test_loss", "test_perplexity", "seconds_to_target", "target_accuracy", "target_loss",
        "wall_seconds", "samples", "samples_per_second", "bytes_per_sample", "staleness_mean", "staleness_max"})
    row[k] = Get(summary, k);
  const json curve = CurveWithBytes(summary);
  const json accuracy = Get(summary, "accuracy_curve");
  row["last_accuracy"] = accuracy.is_array() && !accuracy.empty() ? accuracy.back()[2] : json();
  const json per_step = Get(summary, "bytes_per_step");
  row["push_bytes_per_step"] = per_step.is_object() ? per_step.value("push", json()) : json();
  row["pull_bytes_per_step"] = per_step.is_object() ? per_step.value("pull", json()) : json();
  const json exchanged = Get(summary, "bytes_exchanged");
  row["bytes_exchanged"] = exchanged.is_object() ? exchanged.value("total", json()) : json();
  const json per_token = Get(summary, "bytes_per_token");  // token data
  for (const char* way : {"push", "pull", "total"})
    row[std::string("bytes_per_token_") + way] = per_token.is_object() ? per_token.value(way, json()) : json();
  row["tokens_per_second"] = Get(summary, "tokens_per_second");
  AddShares(summary, row);
  row["links"] = Links(summary);
  row["curve"] = curve;
  AddWan(summary, row);
}

}  // namespace

json SweepRow(const SweepSpec& spec, const SweepPoint& point, const std::string& run_dir, const std::string& status,
              const std::string& failure, const json& summary, const std::string& params_sha256) {
  json axes = json::object();
  for (const auto& [key, value] : point.values) axes[key] = value;
  json row = {{"index", point.index}, {"run", point.Slug()},        {"dir", run_dir},
              {"axes", axes},         {"job_file", point.job_file}, {"overrides", point.Overrides(spec)},
              {"status", status},     {"failure", failure}};
  row["params_sha256"] = params_sha256;
  try {
    AddSummary(summary, row);
  } catch (const json::exception& e) {
    // A summary of another shape (edited, or from another version): the
    // row keeps the verdict and says why the numbers are missing.
    AddSummary(json(), row);
    row["failure"] =
        row["failure"].get<std::string>() + (failure.empty() ? "" : "; ") + "summary.json unreadable: " + e.what();
  }
  return row;
}

Status WriteSweepTables(const SweepSpec& spec, const std::vector<json>& rows, const std::string& out) {
  json all = json::array();
  std::ostringstream curves;
  curves << "index,run,seconds,step,accuracy,bytes\n";
  for (const json& r : rows) {
    if (r.is_null()) continue;
    all.push_back(r);
    for (const auto& p : r["curve"])
      curves << r["index"] << "," << Cell(r["run"]) << "," << p[0] << "," << p[1] << "," << p[2] << "," << Cell(p[3])
             << "\n";
  }
  GD_RETURN_IF_ERROR(WriteFileAtomic(out + "/results.csv", Csv(spec, rows), /*durable=*/false));
  GD_RETURN_IF_ERROR(WriteFileAtomic(out + "/results.json", all.dump(1), /*durable=*/false));
  GD_RETURN_IF_ERROR(WriteFileAtomic(out + "/curves.csv", curves.str(), /*durable=*/false));
  const std::string md = "Sweep `" + spec.name + "` (" + std::to_string(all.size()) + " runs):\n\n" +
                         MarkdownRuns(spec, rows) + MarkdownBySeed(spec, rows);
  return WriteFileAtomic(out + "/results.md", md, /*durable=*/false);
}

std::string FileSha256(const std::string& path) {
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return "";
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes->data(), bytes->size(), digest, &len, EVP_sha256(), nullptr) != 1) return "";
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += std::string{kHex[digest[i] >> 4], kHex[digest[i] & 15]};
  return hex;
}

}  // namespace geodesic::bench
