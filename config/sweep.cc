#include "config/sweep.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "common/files.h"
#include "config/job.h"
#include "config/reader.h"

namespace geodesic {
namespace {

using config_internal::MapReader;
using SweepErrors = std::vector<std::string>;

// A value as --set takes it: a scalar as written, anything else as flow YAML.
std::string ValueText(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter out;
  out.SetMapFormat(YAML::Flow);
  out.SetSeqFormat(YAML::Flow);
  out << n;
  return out.c_str();
}

std::string Resolve(const std::string& base_dir, const std::string& path) {
  if (path.empty() || path.front() == '/' || base_dir.empty()) return path;
  return (std::filesystem::path(base_dir) / path).lexically_normal().string();
}

// A key: dotted names of letters, digits, '_' and '-'.
bool ValidKey(const std::string& k) {
  if (k.empty() || k.front() == '.' || k.back() == '.' || k.find("..") != std::string::npos) return false;
  for (char c : k)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  return true;
}

void ParseSet(const YAML::Node& n, SweepSpec* spec, SweepErrors* errors) {
  if (!n || n.IsNull()) return;
  if (!n.IsMap()) return errors->push_back("set: must be a mapping of dotted job keys to values");
  for (const auto& kv : n) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    if (!ValidKey(key) || key == "job") {
      errors->push_back("set: '" + key + "' is not a dotted job key");
      continue;
    }
    spec->overrides.push_back(key + "=" + ValueText(kv.second));
  }
}

// Whether `key` (of axis `where`) is also under set:, which would mix two
// sources for one key.
void CheckNotInSet(const SweepSpec& spec, const std::string& key, const std::string& where, SweepErrors* errors) {
  for (const std::string& o : spec.overrides)
    if (o.starts_with(key + "=")) errors->push_back(where + ": also under set:, which would hide it");
}

// An axis of named recipes: name -> mapping of dotted job keys (or empty).
void ParseRecipes(const YAML::Node& n, const std::string& where, const SweepSpec& spec, SweepAxis* axis,
                  SweepErrors* errors) {
  if (axis->key.find('.') != std::string::npos || axis->key == "job" || axis->key == "seed")
    errors->push_back(where + ": a recipe axis needs a label that is not a job key (recipe, say)");
  for (const auto& kv : n) {
    const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "";
    const std::string at = where + "." + name;
    if (!config_internal::ValidName(name))
      errors->push_back(at + ": a recipe's name is 1-63 letters, digits, '-' or '_'");
    if (!kv.second.IsNull() && !kv.second.IsMap()) {
      errors->push_back(at + ": expected a mapping of dotted job keys to values ({} for the base job)");
      continue;
    }
    std::vector<std::string> overrides;
    for (const auto& e : kv.second) {
      const std::string key = e.first.IsScalar() ? e.first.Scalar() : "";
      if (!ValidKey(key) || key == "job") {
        errors->push_back(at + ": '" + key + "' is not a dotted job key");
        continue;
      }
      CheckNotInSet(spec, key, at + "." + key, errors);
      overrides.push_back(key + "=" + ValueText(e.second));
    }
    if (std::find(axis->values.begin(), axis->values.end(), name) != axis->values.end())
      errors->push_back(at + ": named twice");
    axis->values.push_back(name);
    axis->recipes.push_back(std::move(overrides));
  }
  if (axis->values.empty()) errors->push_back(where + ": expected at least one recipe");
}

void ParseAxes(const YAML::Node& n, const std::string& base_dir, SweepSpec* spec, SweepErrors* errors) {
  if (!n || n.IsNull()) return;
  if (!n.IsMap()) return errors->push_back("axes: must be a mapping of job keys to lists of values");
  std::set<std::string> seen;
  for (const auto& kv : n) {
    SweepAxis axis;
    axis.key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    const std::string where = "axes." + axis.key;
    if (!ValidKey(axis.key)) {
      errors->push_back("axes: '" + axis.key + "' is not a dotted job key");
      continue;
    }
    if (!seen.insert(axis.key).second) errors->push_back(where + ": named twice");
    if (kv.second.IsMap()) {
      ParseRecipes(kv.second, where, *spec, &axis, errors);
      spec->axes.push_back(std::move(axis));
      continue;
    }
    CheckNotInSet(*spec, axis.key, where, errors);
    if (!kv.second.IsSequence() || kv.second.size() == 0) {
      errors->push_back(where + ": expected a non-empty list of values, or a mapping of named recipes");
      continue;
    }
    for (const auto& v : kv.second)
      axis.values.push_back(axis.key == "job" ? Resolve(base_dir, ValueText(v)) : ValueText(v));
    spec->axes.push_back(std::move(axis));
  }
}

void ParseTop(const YAML::Node& root, const std::string& base_dir, SweepSpec* spec, SweepErrors* errors) {
  MapReader top(root, "", errors);
  top.Get("name", &spec->name);
  top.Get("job", &spec->job_file);
  top.Get("limit_s", &spec->limit_s);
  ParseSet(top.child("set"), spec, errors);
  ParseAxes(top.child("axes"), base_dir, spec, errors);
  top.Finish();
  bool job_axis = false;
  for (const SweepAxis& a : spec->axes) job_axis |= a.key == "job";
  if (spec->job_file.empty() && !job_axis) errors->push_back("job: missing (the base job file)");
  spec->job_file = Resolve(base_dir, spec->job_file);
  if (!(spec->limit_s > 0 && spec->limit_s <= 7 * 86400)) errors->push_back("limit_s: must be in (0, 604800]");
  double runs = 1;
  for (const SweepAxis& a : spec->axes) runs *= static_cast<double>(a.values.size());
  if (runs > kMaxSweepRuns)
    errors->push_back("axes: " + std::to_string(static_cast<int64_t>(runs)) + " runs; at most " +
                      std::to_string(kMaxSweepRuns));
  if (!spec->name.empty() && !config_internal::ValidName(spec->name))
    errors->push_back("name: 1-63 letters, digits, '-' or '_'");
}

// A value or key reduced to what a folder name may hold.
std::string SlugPart(const std::string& s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') out += c;
  return out.empty() ? "x" : out;
}

}  // namespace

std::vector<std::string> SweepPoint::Overrides(const SweepSpec& spec) const {
  std::vector<std::string> out = spec.overrides;
  for (size_t i = 0; i < values.size(); ++i) {
    const auto& [key, value] = values[i];
    const SweepAxis* axis = i < spec.axes.size() && spec.axes[i].key == key ? &spec.axes[i] : nullptr;
    if (axis != nullptr && axis->is_recipes()) {
      const size_t at = std::find(axis->values.begin(), axis->values.end(), value) - axis->values.begin();
      if (at < axis->recipes.size()) out.insert(out.end(), axis->recipes[at].begin(), axis->recipes[at].end());
    } else if (key != "job") {
      out.push_back(key + "=" + value);
    }
  }
  return out;
}

std::string SweepPoint::Slug() const {
  char index_text[16];
  std::snprintf(index_text, sizeof(index_text), "%03d", index);
  std::string slug = index_text;
  for (const auto& [key, value] : values) {
    const std::string last = key.substr(key.rfind('.') + 1);
    const std::string v = key == "job" ? std::filesystem::path(value).stem().string() : value;
    slug += (slug.size() == 3 ? "-" : ".") + SlugPart(last) + "-" + SlugPart(v);
  }
  return slug.size() > 100 ? slug.substr(0, 100) : slug;
}

std::string SweepPoint::Describe() const {
  std::string out;
  for (const auto& [key, value] : values) out += (out.empty() ? "" : ", ") + key + "=" + value;
  return out.empty() ? "the base job" : out;
}

StatusOr<SweepSpec> ParseSweep(const std::string& yaml_text, const std::string& source_name,
                               const std::string& base_dir) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(source_name + ": not valid YAML: " + e.what());
  }
  if (!root.IsMap()) return InvalidArgument(source_name + ": the sweep file must be a YAML mapping");
  SweepSpec spec;
  SweepErrors errors;
  ParseTop(root, base_dir, &spec, &errors);
  if (!errors.empty()) {
    std::string msg = source_name + ": " + std::to_string(errors.size()) + " problem(s) in the sweep file:";
    for (const auto& e : errors) msg += "\n  " + e;
    return InvalidArgument(msg);
  }
  if (spec.name.empty()) spec.name = SlugPart(std::filesystem::path(source_name).stem().string());
  return spec;
}

StatusOr<SweepSpec> LoadSweepFile(const std::string& path) {
  GD_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseSweep(text, path, std::filesystem::path(path).parent_path().string());
}

std::vector<SweepPoint> SweepPoints(const SweepSpec& spec) {
  std::vector<SweepPoint> points(1);
  for (const SweepAxis& axis : spec.axes) {
    std::vector<SweepPoint> next;
    for (const SweepPoint& p : points)
      for (const std::string& v : axis.values) {
        SweepPoint q = p;
        q.values.emplace_back(axis.key, v);
        next.push_back(std::move(q));
      }
    points = std::move(next);
  }
  for (size_t i = 0; i < points.size(); ++i) {
    points[i].index = static_cast<int>(i);
    points[i].job_file = spec.job_file;
    for (const auto& [key, value] : points[i].values)
      if (key == "job") points[i].job_file = value;
  }
  return points;
}

Status CheckSweepJobs(const SweepSpec& spec, const std::vector<SweepPoint>& points) {
  for (const SweepPoint& p : points) {
    auto job = LoadJobFile(p.job_file, p.Overrides(spec));
    if (!job.ok()) return InvalidArgument("run " + p.Slug() + " (" + p.Describe() + "): " + job.status().message());
  }
  return Status::Ok();
}

}  // namespace geodesic
