// The sweep file of `geodesic sweep SWEEP.yaml` (docs/experiments.md): a
// base job, overrides for every run, and axes whose cartesian product is the
// list of runs. Parsing and expansion only; bench/sweep.h runs them.
//
//   name: staleness-codecs         # default: the file's stem
//   job: three_regions_netns.yaml  # the base job, relative to this file
//   set:                           # dotted job keys applied to every run
//     training.epochs: 2
//   axes:                          # dotted job key (or `job`): values
//     training.staleness_bound: [0, 1, 2, 4, inf]
//     compression.push: [none, "topk:0.01+zstd"]
//     seed: [1, 2]
//   limit_s: 900                   # each run's wall-clock cap
//
// Runs are numbered in the product's order, the last axis varying fastest.
// A value that is not a scalar (a list of links, say) is passed as YAML in
// flow style. The axis `job` takes job files instead of a key's values.
//
// An axis given as a mapping instead of a list is an axis of named recipes:
// each name stands for several job keys set together (an empty one for the
// base job as it is), and the name is what the tables show.
//
//   axes:
//     recipe:
//       bsp-fp32: {}
//       local16-int4: {training.local_steps: 16, compression.push: "int4+zstd"}
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace geodesic {

struct SweepAxis {
  std::string key;                  // a dotted job key, "job", or a recipe axis's label
  std::vector<std::string> values;  // as --set takes them; a recipe axis: the recipes' names
  // A recipe axis: each value's overrides ("key=value"), parallel to values.
  std::vector<std::vector<std::string>> recipes;
  bool is_recipes() const { return !recipes.empty(); }
};

struct SweepSpec {
  std::string name;
  std::string job_file;                // resolved against the sweep file's folder
  std::vector<std::string> overrides;  // `set:` as "key=value", in file order
  std::vector<SweepAxis> axes;         // in file order
  double limit_s = 1800;
};

// One run of the sweep: the value of every axis.
struct SweepPoint {
  int index = 0;                                            // 0-based, in the product's order
  std::vector<std::pair<std::string, std::string>> values;  // (axis key, value), in axis order
  std::string job_file;                                     // the `job` axis's value, else the spec's

  // The spec's overrides, then this point's (all but `job`; a recipe's
  // keys), as --set takes them.
  std::vector<std::string> Overrides(const SweepSpec& spec) const;
  // "003-staleness_bound-2.push-topk0.01zstd.seed-1": a folder name.
  std::string Slug() const;
  // "training.staleness_bound=2, compression.push=topk:0.01+zstd, seed=1".
  std::string Describe() const;
};

// At most this many runs in one sweep (a typo in an axis should not queue a
// million jobs).
inline constexpr int kMaxSweepRuns = 10000;

StatusOr<SweepSpec> ParseSweep(const std::string& yaml_text, const std::string& source_name,
                               const std::string& base_dir);
StatusOr<SweepSpec> LoadSweepFile(const std::string& path);

// The product of the axes, in order (one point with no values when there are
// no axes).
std::vector<SweepPoint> SweepPoints(const SweepSpec& spec);

// Parses the job of every point (its file with its overrides), so that a bad
// key or value is one error naming the run before anything starts.
Status CheckSweepJobs(const SweepSpec& spec, const std::vector<SweepPoint>& points);

}  // namespace geodesic
