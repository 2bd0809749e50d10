// `geodesic partition JOB.yaml`: how data.partition splits the job's
// training set, without training: per part its size and label histogram
// (token data: windows, and the histogram over the groups of train.groups),
// the digest the job summary will carry, and with --out a CSV, the indices
// of every part (one line each, for a reference implementation to train on
// the same split) and an SVG plot of the label mix per part.
#include <algorithm>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli/command.h"
#include "common/files.h"
#include "common/format.h"
#include "config/job.h"
#include "worker/dataset.h"
#include "worker/partition.h"
#include "worker/tokens.h"

namespace geodesic::cli {
namespace {

constexpr int kColourCount = 10;

struct PartitionFlags {
  std::string job_file, out_dir;
  std::vector<std::string> overrides;
  int parts = 0;  // 0: the job's workers
  bool json = false;
};

struct Split {
  JobSpec job;
  int parts = 0;
  worker::Partition partition;
  std::vector<std::vector<int64_t>> counts;  // [part][label]
  int classes = 10;
  std::string digest;
  std::string unit = "samples", label = "label";  // token data: windows, group
};

// Token data: windows per part, counted by the group of their document.
Status DrawTokenSplit(Split& s) {
  GD_ASSIGN_OR_RETURN(worker::TokenSet train, worker::LoadTokens(s.job.data, "train"));
  GD_ASSIGN_OR_RETURN(s.partition, worker::PartitionWindows(train, s.parts, s.job.data.partition, s.job.seed));
  s.unit = "windows";
  s.label = "group";
  s.classes = 1;
  for (uint32_t g : train.doc_groups) s.classes = std::max(s.classes, static_cast<int>(g) + 1);
  s.counts.assign(s.parts, std::vector<int64_t>(s.classes, 0));
  for (int p = 0; p < s.parts; ++p)
    for (int64_t w : s.partition[p])
      ++s.counts[p][train.doc_groups.empty() ? 0 : train.doc_groups[train.DocumentOf(w)]];
  s.digest = worker::PartitionDigest(s.partition);
  return Status::Ok();
}

StatusOr<Split> DrawSplit(const PartitionFlags& f) {
  Split s;
  GD_ASSIGN_OR_RETURN(s.job, LoadJobFile(f.job_file, f.overrides));
  s.parts = f.parts > 0                 ? f.parts
            : s.job.federated.enabled() ? static_cast<int>(s.job.federated.clients)
                                        : s.job.NumWorkers();
  if (s.job.data.dataset == DatasetKind::kTokens) {
    GD_RETURN_IF_ERROR(DrawTokenSplit(s));
    return s;
  }
  GD_ASSIGN_OR_RETURN(worker::ImageSet train, worker::LoadDataset(s.job.data, "train"));
  s.classes = train.classes;
  auto partition = worker::PartitionSamples(train.labels, s.classes, s.parts, s.job.data.partition, s.job.seed,
                                            s.job.data.batch_size);
  if (!partition.ok()) return InvalidArgument("data.partition: " + partition.status().message());
  s.partition = std::move(*partition);
  s.counts = worker::LabelCounts(s.partition, train.labels, s.classes);
  s.digest = worker::PartitionDigest(s.partition);
  return s;
}

std::string Header(const Split& s) {
  std::vector<size_t> sizes;
  for (const auto& p : s.partition) sizes.push_back(p.size());
  std::sort(sizes.begin(), sizes.end());
  return "partition " + ToString(s.job.data.partition) + ", seed " + std::to_string(s.job.seed) + ", " +
         std::to_string(s.parts) + " parts of " + std::to_string(sizes.front()) + "-" + std::to_string(sizes.back()) +
         " " + s.unit + " (median " + std::to_string(sizes[sizes.size() / 2]) + "), digest " + s.digest;
}

std::string Table(const Split& s) {
  std::string out = StrFormat("%6s %8s", "part", s.unit.c_str());
  for (int l = 0; l < s.classes; ++l) out += StrFormat(" %6s", (s.label.substr(0, 1) + std::to_string(l)).c_str());
  out += "  top-" + s.label + " share\n";
  for (int p = 0; p < s.parts; ++p) {
    const auto& c = s.counts[p];
    out += StrFormat("%6d %8zu", p, s.partition[p].size());
    for (int64_t n : c) out += StrFormat(" %6lld", static_cast<long long>(n));
    out += StrFormat("  %.2f\n", static_cast<double>(*std::max_element(c.begin(), c.end())) /
                                     static_cast<double>(s.partition[p].size()));
  }
  return out;
}

std::string Csv(const Split& s) {
  std::string out = "part," + s.unit;
  for (int l = 0; l < s.classes; ++l) out += "," + s.label + "_" + std::to_string(l);
  out += "\n";
  for (int p = 0; p < s.parts; ++p) {
    out += std::to_string(p) + "," + std::to_string(s.partition[p].size());
    for (int64_t n : s.counts[p]) out += "," + std::to_string(n);
    out += "\n";
  }
  return out;
}

std::string Indices(const Split& s) {
  std::string out;
  for (const auto& part : s.partition) {
    for (size_t i = 0; i < part.size(); ++i) out += (i ? " " : "") + std::to_string(part[i]);
    out += "\n";
  }
  return out;
}

// One stacked bar per part (height: samples), one colour per label.
std::string Svg(const Split& s) {
  static const char* kColours[kColourCount] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                               "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  size_t largest = 1;
  for (const auto& p : s.partition) largest = std::max(largest, p.size());
  const double bar = std::clamp(900.0 / s.parts, 1.0, 40.0), plot_h = 320, left = 60, top = 40;
  const double width = std::max(760.0, left + bar * s.parts + 120);
  std::string out =
      StrFormat(
          R"(<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">)",
          width, top + plot_h + 50) +
      "\n";
  out += StrFormat(R"(<text x="%.0f" y="20">%s</text>)", left, Header(s).c_str()) + "\n";
  for (int p = 0; p < s.parts; ++p) {
    double y = top + plot_h;
    for (int l = 0; l < s.classes; ++l) {
      const double h = plot_h * static_cast<double>(s.counts[p][l]) / static_cast<double>(largest);
      y -= h;
      if (h > 0)
        out += StrFormat(R"(<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"/>)", left + p * bar, y,
                         std::max(bar - (bar > 3 ? 1 : 0), 0.5), h, kColours[l % kColourCount]) +
               "\n";
    }
  }
  out += StrFormat(R"(<text x="%.0f" y="%.0f">part (0-%d)</text>)", left, top + plot_h + 20, s.parts - 1) + "\n";
  out += StrFormat(R"(<text x="5" y="%.0f">%zu</text><text x="5" y="%.0f">0</text>)", top + 10, largest, top + plot_h) +
         "\n";
  for (int l = 0; l < s.classes; ++l)
    out +=
        StrFormat(R"(<rect x="%.0f" y="%.0f" width="12" height="12" fill="%s"/><text x="%.0f" y="%.0f">%s %d</text>)",
                  width - 100, top + 18.0 * l, kColours[l % kColourCount], width - 82, top + 18.0 * l + 11,
                  s.label.c_str(), l) +
        "\n";
  return out + "</svg>\n";
}

nlohmann::json Json(const Split& s) {
  nlohmann::json parts = nlohmann::json::array();
  for (int p = 0; p < s.parts; ++p) parts.push_back({{s.unit, s.partition[p].size()}, {s.label + "s", s.counts[p]}});
  return {{"spec", ToString(s.job.data.partition)}, {"seed", s.job.seed}, {"digest", s.digest}, {"parts", parts}};
}

Status WriteOutputs(const Split& s, const std::string& dir) {
  GD_RETURN_IF_ERROR(MakeDirs(dir));
  GD_RETURN_IF_ERROR(WriteFileAtomic(dir + "/partition.csv", Csv(s), false));
  GD_RETURN_IF_ERROR(WriteFileAtomic(dir + "/partition.svg", Svg(s), false));
  GD_RETURN_IF_ERROR(WriteFileAtomic(dir + "/indices.txt", Indices(s), false));
  return WriteFileAtomic(dir + "/partition.json", Json(s).dump(2) + "\n", false);
}

int RunPartition(const PartitionFlags& f) {
  auto split = DrawSplit(f);
  if (!split.ok()) return Fail(split.status());
  if (f.json)
    std::cout << Json(*split).dump(2) << "\n";
  else
    std::cout << Header(*split) << "\n" << Table(*split);
  if (f.out_dir.empty()) return 0;
  Status written = WriteOutputs(*split, f.out_dir);
  if (!written.ok()) return Fail(written);
  std::cerr << "wrote " << f.out_dir << "/{partition.csv,partition.svg,partition.json,indices.txt}\n";
  return 0;
}

}  // namespace

Command AddPartition(CLI::App& app) {
  auto f = std::make_shared<PartitionFlags>();
  auto* cmd =
      app.add_subcommand("partition", "print how data.partition splits the training set (sizes, labels, digest)");
  cmd->add_option("job", f->job_file, "job file (YAML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", f->overrides, "override a job-file key, e.g. data.partition=dirichlet:0.3");
  cmd->add_option("--parts", f->parts, "split into this many parts (default: the job's workers, or federated.clients)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--out", f->out_dir, "also write partition.csv, partition.svg, partition.json and indices.txt here");
  cmd->add_flag("--json", f->json, "print JSON");
  return {cmd, [f] { return RunPartition(*f); }};
}

}  // namespace geodesic::cli
