// MapReader and the checks shared by the job parser (parse.cc) and the
// cross-section validation (validate.cc). Internal to config/; not part of
// the job schema's interface. Not synchronized.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "config/job.h"

namespace geodesic::config_internal {

// The job parser's errors, and (for JobFileKeys) every key path it looked
// up, present in the file or not.
struct ParseErrors : std::vector<std::string> {
  std::set<std::string>* keys_read = nullptr;
};

// Walks one YAML map, reading known keys and remembering which it saw, so
// that Finish() can name every unknown key (usually a typo).
class MapReader {
 public:
  MapReader(const YAML::Node& node, std::string path, std::vector<std::string>* errors)
      : node_(node), path_(std::move(path)), errors_(errors) {
    if (node_ && !node_.IsNull() && !node_.IsMap()) {
      Error(path_, "must be a mapping");
      valid_ = false;
    }
  }
  MapReader(const YAML::Node& node, std::string path, ParseErrors* errors)
      : MapReader(node, std::move(path), static_cast<std::vector<std::string>*>(errors)) {
    keys_read_ = errors->keys_read;
  }

  bool present(const char* key) const { return valid_ && node_ && node_.IsMap() && node_[key]; }
  YAML::Node child(const char* key) {
    Saw(key);
    return present(key) ? node_[key] : YAML::Node();
  }
  std::string ChildPath(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  template <typename T>
  void Get(const char* key, T* out) {
    Saw(key);
    if (!present(key)) return;
    const YAML::Node& n = node_[key];
    try {
      constexpr bool kList = std::is_same_v<T, std::vector<int>> || std::is_same_v<T, std::vector<double>> ||
                             std::is_same_v<T, std::vector<std::string>>;
      if (kList ? !n.IsSequence() : !n.IsScalar()) throw YAML::Exception(YAML::Mark(), "");
      *out = n.as<T>();
    } catch (const YAML::Exception&) {
      Error(ChildPath(key), std::string("expected ") + TypeName<T>());
    }
  }

  void Finish() {
    if (!valid_ || !node_ || !node_.IsMap()) return;
    for (const auto& kv : node_) {
      // YAML allows any node as a key (`? [a, b] : c`); only strings name ours.
      if (!kv.first.IsScalar()) {
        Error(path_, "a key that is not a plain name");
        continue;
      }
      std::string k = kv.first.Scalar();
      if (!seen_.count(k)) {
        std::string msg = "unknown key";
        std::string best = Closest(k);
        if (!best.empty()) msg += " (did you mean '" + best + "'?)";
        Error(ChildPath(k), msg);
      }
    }
  }

  void Error(const std::string& where, const std::string& what) {
    errors_->push_back((where.empty() ? "<top>" : where) + ": " + what);
  }

 private:
  void Saw(const char* key) {
    seen_.insert(key);
    if (keys_read_) keys_read_->insert(ChildPath(key));
  }

  template <typename T>
  static const char* TypeName() {
    if constexpr (std::is_same_v<T, bool>)
      return "true or false";
    else if constexpr (std::is_integral_v<T>)
      return "an integer";
    else if constexpr (std::is_floating_point_v<T>)
      return "a number";
    else if constexpr (std::is_same_v<T, std::string>)
      return "a string";
    else if constexpr (std::is_same_v<T, std::vector<std::string>>)
      return "a list of names";
    else if constexpr (std::is_same_v<T, std::vector<double>>)
      return "a list of numbers";
    else
      return "a list of integers";
  }

  static size_t EditDistance(const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  }

  std::string Closest(const std::string& k) const {
    std::string best;
    size_t best_d = 3;
    for (const auto& s : seen_) {
      // The distance is at least the difference in length: skip what cannot
      // be close (and never run the quadratic loop on a huge fuzzed key).
      if (k.size() >= s.size() + best_d || s.size() >= k.size() + best_d) continue;
      size_t d = EditDistance(k, s);
      if (d < best_d) best_d = d, best = s;
    }
    return best;
  }

  YAML::Node node_;
  std::string path_;
  std::vector<std::string>* errors_;
  std::set<std::string> seen_;
  std::set<std::string>* keys_read_ = nullptr;
  bool valid_ = true;
};

// Whether `s` is a region or job name: 1-63 letters, digits, '-' or '_'.
bool ValidName(const std::string& s);

inline void Check(bool ok, std::vector<std::string>* errors, const std::string& where, const std::string& what) {
  if (!ok) errors->push_back(where + ": " + what);
}

inline bool Finite(double x) { return std::isfinite(x); }

// Cross-section rules, after every section is parsed; fills in
// coordinator_region when it is empty.
void ValidateJob(JobSpec* job, std::vector<std::string>* errors);

}  // namespace geodesic::config_internal
