#include "config/job.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace geodesic {
namespace {

constexpr int64_t kInfiniteStaleness = int64_t{1} << 40;

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

  bool present(const char* key) const { return valid_ && node_ && node_.IsMap() && node_[key]; }
  YAML::Node child(const char* key) {
    seen_.insert(key);
    return present(key) ? node_[key] : YAML::Node();
  }
  std::string ChildPath(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  template <typename T>
  void Get(const char* key, T* out) {
    seen_.insert(key);
    if (!present(key)) return;
    const YAML::Node& n = node_[key];
    try {
      constexpr bool kList = std::is_same_v<T, std::vector<int>> || std::is_same_v<T, std::vector<std::string>>;
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
      size_t d = EditDistance(k, s);
      if (d < best_d) best_d = d, best = s;
    }
    return best;
  }

  YAML::Node node_;
  std::string path_;
  std::vector<std::string>* errors_;
  std::set<std::string> seen_;
  bool valid_ = true;
};

Status ApplyOverride(YAML::Node& root, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) return InvalidArgument("override '" + assignment + "' is not key.path=value");
  std::string path = assignment.substr(0, eq);
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    return InvalidArgument("override '" + assignment + "': " + e.what());
  }
  std::vector<std::string> keys;
  std::stringstream ss(path);
  for (std::string k; std::getline(ss, k, '.');) {
    if (k.empty()) return InvalidArgument("override '" + assignment + "' has an empty key");
    keys.push_back(k);
  }
  // yaml-cpp nodes are handles: walk with reset() so we never assign through.
  YAML::Node cur;
  cur.reset(root);
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    if (!cur.IsMap() && !cur.IsNull())
      return InvalidArgument("override '" + assignment + "': '" + keys[i] + "' is inside a non-map");
    YAML::Node next = cur[keys[i]];
    if (!next) {
      cur[keys[i]] = YAML::Node(YAML::NodeType::Map);
      next = cur[keys[i]];
    }
    cur.reset(next);
  }
  if (!cur.IsMap() && !cur.IsNull())
    return InvalidArgument("override '" + assignment + "': parent of '" + keys.back() + "' is not a map");
  cur[keys.back()] = value;
  return Status::Ok();
}

bool ValidName(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return false;
  return true;
}

void Check(bool ok, std::vector<std::string>* errors, const std::string& where, const std::string& what) {
  if (!ok) errors->push_back(where + ": " + what);
}

bool Finite(double x) { return std::isfinite(x); }

void ParseStaleness(MapReader& r, int64_t* out, std::vector<std::string>* errors) {
  YAML::Node n = r.child("staleness_bound");
  if (!n || n.IsNull()) return;
  std::string where = r.ChildPath("staleness_bound");
  if (!n.IsScalar()) {
    errors->push_back(where + ": expected an integer or 'inf'");
    return;
  }
  std::string s = n.Scalar();
  if (s == "inf" || s == "async") {
    *out = kInfiniteStaleness;
    return;
  }
  try {
    *out = n.as<int64_t>();
  } catch (const YAML::Exception&) {
    errors->push_back(where + ": expected an integer or 'inf', got '" + s + "'");
    return;
  }
  Check(*out >= 0, errors, where, "must be >= 0 (0 is BSP)");
  if (*out > kInfiniteStaleness) *out = kInfiniteStaleness;
}

}  // namespace

int JobSpec::NumServers() const {
  int n = 0;
  for (const auto& r : regions) n += r.servers;
  return n;
}

int JobSpec::NumWorkers() const {
  int n = 0;
  for (const auto& r : regions) n += r.workers;
  return n;
}

const RegionSpec& JobSpec::RegionOfServer(int id) const {
  for (const auto& r : regions) {
    if (id < r.servers) return r;
    id -= r.servers;
  }
  return regions.back();
}

const RegionSpec& JobSpec::RegionOfBackup(int id) const {
  const RegionSpec& primary = RegionOfServer(id);
  for (size_t i = 0; i < regions.size(); ++i)
    if (&regions[i] == &primary) return regions[(i + 1) % regions.size()];
  return primary;
}

const RegionSpec& JobSpec::RegionOfWorker(int id) const {
  for (const auto& r : regions) {
    if (id < r.workers) return r;
    id -= r.workers;
  }
  return regions.back();
}

namespace {

const CompressionLinkSpec* LinkFor(const CompressionSpec& c, const std::string& a, const std::string& b) {
  for (const auto& l : c.links)
    if ((l.region_a == a && l.region_b == b) || (l.region_a == b && l.region_b == a)) return &l;
  return nullptr;
}

}  // namespace

const std::string& JobSpec::PushCodec(const std::string& worker_region, const std::string& server_region) const {
  const CompressionLinkSpec* l = LinkFor(compression, worker_region, server_region);
  return l && !l->push.empty() ? l->push : compression.push;
}

const std::string& JobSpec::PullCodec(const std::string& worker_region, const std::string& server_region) const {
  const CompressionLinkSpec* l = LinkFor(compression, worker_region, server_region);
  return l && !l->pull.empty() ? l->pull : compression.pull;
}

int64_t JobSpec::StepsPerWorker() const {
  if (training.steps > 0) return training.steps;
  double total = training.epochs * static_cast<double>(kFashionTrainSamples);
  double per_step = static_cast<double>(std::max(1, NumWorkers())) * data.batch_size;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(total / per_step)));
}

int64_t JobSpec::ClocksPerWorker() const {
  const int64_t h = std::max(1, training.local_steps);
  return (StepsPerWorker() + h - 1) / h;
}

OptimizerSpec JobSpec::ShardOptimizer() const {
  OptimizerSpec o = optimizer;
  if (compression.momentum_correction) o.momentum = 0;
  if (training.local_steps > 1) {
    o = OptimizerSpec{};
    o.name = "sgd";
    o.lr = training.outer_lr;
    o.momentum = training.outer_momentum;
    o.weight_decay = 0;
  }
  return o;
}

double LearningRateFactor(const OptimizerSpec& spec, int64_t clock, int64_t clocks) {
  if (spec.schedule != "cosine" || clocks <= 0) return 1.0;
  double t = std::clamp(static_cast<double>(clock) / static_cast<double>(clocks), 0.0, 1.0);
  return 0.5 * (1.0 + std::cos(M_PI * t));
}

const LinkSpec* JobSpec::Link(const std::string& from, const std::string& to) const {
  for (const auto& l : wan.links)
    if (l.from == from && l.to == to) return &l;
  return nullptr;
}

const RegionSpec* JobSpec::FindRegion(const std::string& name) const {
  for (const auto& r : regions)
    if (r.name == name) return &r;
  return nullptr;
}

const RegionSpec& JobSpec::CoordinatorRegion() const {
  const RegionSpec* r = FindRegion(coordinator_region);
  return r ? *r : regions.front();
}

StatusOr<JobSpec> ParseJob(const std::string& yaml_text, const std::string& source_name,
                           const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(source_name + ": not valid YAML: " + e.what());
  }
  if (!root || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) return InvalidArgument(source_name + ": the job file must be a YAML mapping");
  for (const auto& o : overrides) {
    Status s = ApplyOverride(root, o);
    if (!s.ok()) return s.Annotate(source_name);
  }

  JobSpec job;
  std::vector<std::string> errors;
  MapReader top(root, "", &errors);
  top.Get("name", &job.name);
  top.Get("seed", &job.seed);
  top.Get("coordinator_region", &job.coordinator_region);

  YAML::Node regions = top.child("regions");
  if (!regions || !regions.IsMap() || regions.size() == 0) {
    errors.push_back("regions: required, a mapping from region name to {servers, workers, host}");
  } else {
    for (const auto& kv : regions) {
      RegionSpec region;
      region.name = kv.first.IsScalar() ? kv.first.Scalar() : std::string("<not a name>");
      std::string where = "regions." + region.name;
      Check(ValidName(region.name), &errors, where, "region names use letters, digits, '-' and '_'");
      MapReader r(kv.second, where, &errors);
      r.Get("host", &region.host);
      r.Get("servers", &region.servers);
      r.Get("workers", &region.workers);
      r.Finish();
      Check(region.servers >= 0 && region.servers <= 256, &errors, where + ".servers", "must be in [0, 256]");
      Check(region.workers >= 0 && region.workers <= 4096, &errors, where + ".workers", "must be in [0, 4096]");
      Check(!region.host.empty(), &errors, where + ".host", "must not be empty");
      job.regions.push_back(region);
    }
  }

  {
    MapReader r(top.child("model"), "model", &errors);
    r.Get("name", &job.model.name);
    r.Get("mlp_hidden", &job.model.mlp_hidden);
    r.Get("synthetic_params", &job.model.synthetic_params);
    r.Finish();
    Check(job.model.name == "cnn" || job.model.name == "mlp" || job.model.name == "synthetic", &errors, "model.name",
          "'" + job.model.name + "' is not a model; use cnn, mlp or synthetic");
    for (int h : job.model.mlp_hidden)
      Check(h > 0 && h <= 65536, &errors, "model.mlp_hidden", "widths must be in [1, 65536]");
    Check(job.model.synthetic_params > 0 && job.model.synthetic_params <= (int64_t{1} << 31), &errors,
          "model.synthetic_params", "must be in [1, 2^31]");
  }
  {
    MapReader r(top.child("data"), "data", &errors);
    r.Get("dataset", &job.data.dataset);
    r.Get("path", &job.data.path);
    r.Get("partition", &job.data.partition);
    r.Get("batch_size", &job.data.batch_size);
    r.Finish();
    Check(job.data.dataset == "fashion-mnist", &errors, "data.dataset",
          "'" + job.data.dataset + "' is not supported; use fashion-mnist");
    Check(job.data.partition == "iid", &errors, "data.partition",
          "'" + job.data.partition + "' is not supported; use iid");
    Check(job.data.batch_size >= 1 && job.data.batch_size <= 65536, &errors, "data.batch_size",
          "must be in [1, 65536]");
  }
  {
    MapReader r(top.child("optimizer"), "optimizer", &errors);
    auto& o = job.optimizer;
    r.Get("name", &o.name);
    r.Get("lr", &o.lr);
    r.Get("momentum", &o.momentum);
    r.Get("weight_decay", &o.weight_decay);
    r.Get("beta1", &o.beta1);
    r.Get("beta2", &o.beta2);
    r.Get("eps", &o.eps);
    r.Get("schedule", &o.schedule);
    r.Finish();
    Check(o.schedule == "constant" || o.schedule == "cosine", &errors, "optimizer.schedule",
          "'" + o.schedule + "' is not a schedule; use constant or cosine");
    Check(o.name == "sgd" || o.name == "adam", &errors, "optimizer.name",
          "'" + o.name + "' is not an optimizer; use sgd or adam");
    Check(Finite(o.lr) && o.lr > 0 && o.lr < 1e3, &errors, "optimizer.lr", "must be in (0, 1000)");
    Check(Finite(o.momentum) && o.momentum >= 0 && o.momentum < 1, &errors, "optimizer.momentum", "must be in [0, 1)");
    Check(Finite(o.weight_decay) && o.weight_decay >= 0, &errors, "optimizer.weight_decay", "must be >= 0");
    Check(Finite(o.beta1) && o.beta1 >= 0 && o.beta1 < 1, &errors, "optimizer.beta1", "must be in [0, 1)");
    Check(Finite(o.beta2) && o.beta2 >= 0 && o.beta2 < 1, &errors, "optimizer.beta2", "must be in [0, 1)");
    Check(Finite(o.eps) && o.eps > 0, &errors, "optimizer.eps", "must be > 0");
  }
  {
    MapReader r(top.child("training"), "training", &errors);
    auto& t = job.training;
    r.Get("epochs", &t.epochs);
    r.Get("steps", &t.steps);
    ParseStaleness(r, &t.staleness_bound, &errors);
    r.Get("staleness_scaling", &t.staleness_scaling);
    r.Get("device", &t.device);
    r.Get("threads", &t.threads);
    r.Get("prefetch", &t.prefetch);
    r.Get("pipeline_depth", &t.pipeline_depth);
    r.Get("local_steps", &t.local_steps);
    r.Get("overlap_rounds", &t.overlap_rounds);
    r.Get("outer_lr", &t.outer_lr);
    r.Get("outer_momentum", &t.outer_momentum);
    r.Finish();
    Check(t.steps >= 0, &errors, "training.steps", "must be >= 0");
    Check(t.steps > 0 || (Finite(t.epochs) && t.epochs > 0 && t.epochs <= 10000), &errors, "training.epochs",
          "must be in (0, 10000] unless training.steps is set");
    Check(t.device == "cpu" || t.device == "cuda" || t.device == "auto", &errors, "training.device",
          "use cpu, cuda or auto");
    Check(t.threads >= 1 && t.threads <= 256, &errors, "training.threads", "must be in [1, 256]");
  }
  {
    MapReader r(top.child("wire"), "wire", &errors);
    auto& w = job.wire;
    r.Get("chunk_bytes", &w.chunk_bytes);
    r.Get("message_bytes", &w.message_bytes);
    r.Get("max_message_bytes", &w.max_message_bytes);
    r.Finish();
    Check(w.chunk_bytes >= 1024 && w.chunk_bytes <= (64 << 20) && w.chunk_bytes % 4 == 0, &errors, "wire.chunk_bytes",
          "must be a multiple of 4 in [1 KiB, 64 MiB]");
    Check(w.message_bytes >= 1024 && w.message_bytes <= (256 << 20), &errors, "wire.message_bytes",
          "must be in [1 KiB, 256 MiB]");
    Check(w.max_message_bytes >= w.message_bytes && w.max_message_bytes >= w.chunk_bytes + 65536, &errors,
          "wire.max_message_bytes", "must exceed message_bytes and chunk_bytes by a header's room (64 KiB)");
  }
  {
    MapReader r(top.child("membership"), "membership", &errors);
    auto& m = job.membership;
    r.Get("heartbeat_ms", &m.heartbeat_ms);
    r.Get("lease_ms", &m.lease_ms);
    r.Get("rendezvous_timeout_s", &m.rendezvous_timeout_s);
    r.Get("rpc_timeout_s", &m.rpc_timeout_s);
    r.Get("report_after_s", &m.report_after_s);
    r.Finish();
    Check(m.heartbeat_ms >= 10 && m.heartbeat_ms <= 60000, &errors, "membership.heartbeat_ms",
          "must be in [10, 60000]");
    Check(m.lease_ms >= 2 * m.heartbeat_ms, &errors, "membership.lease_ms", "must be at least twice heartbeat_ms");
    Check(m.rendezvous_timeout_s > 0, &errors, "membership.rendezvous_timeout_s", "must be > 0");
    Check(m.rpc_timeout_s > 0, &errors, "membership.rpc_timeout_s", "must be > 0");
    Check(m.report_after_s > 0, &errors, "membership.report_after_s", "must be > 0");
  }
  {
    MapReader r(top.child("security"), "security", &errors);
    auto& s = job.security;
    r.Get("mode", &s.mode);
    r.Get("secret_file", &s.secret_file);
    r.Get("token_ttl_s", &s.token_ttl_s);
    r.Finish();
    Check(s.mode == "none" || s.mode == "curve", &errors, "security.mode", "use none or curve");
    Check(s.token_ttl_s >= 10 && s.token_ttl_s <= 366LL * 86400, &errors, "security.token_ttl_s",
          "must be in [10, 31622400] seconds");
    Check(s.secret_file.empty() || s.mode == "curve", &errors, "security.secret_file", "needs security.mode: curve");
  }
  {
    MapReader r(top.child("eval"), "eval", &errors);
    auto& e = job.eval;
    r.Get("snapshot_every_s", &e.snapshot_every_s);
    r.Get("target_accuracy", &e.target_accuracy);
    r.Get("test_samples", &e.test_samples);
    r.Finish();
    Check(Finite(e.snapshot_every_s) && e.snapshot_every_s > 0, &errors, "eval.snapshot_every_s", "must be > 0");
    Check(Finite(e.target_accuracy) && e.target_accuracy > 0 && e.target_accuracy <= 1, &errors, "eval.target_accuracy",
          "must be in (0, 1]");
    Check(e.test_samples >= 0, &errors, "eval.test_samples", "must be >= 0");
  }
  {
    MapReader r(top.child("checkpoint"), "checkpoint", &errors);
    auto& c = job.checkpoint;
    r.Get("every_clocks", &c.every_clocks);
    r.Get("keep", &c.keep);
    r.Get("on_stop", &c.on_stop);
    r.Finish();
    Check(c.every_clocks >= 0, &errors, "checkpoint.every_clocks", "must be >= 0 (0: no periodic checkpoints)");
    Check(c.keep >= 2 && c.keep <= 1000, &errors, "checkpoint.keep",
          "must be in [2, 1000] (the previous checkpoint is the fallback for a corrupt newest one)");
  }
  {
    MapReader r(top.child("replication"), "replication", &errors);
    r.Get("backups", &job.replication.backups);
    r.Finish();
    Check(job.replication.backups == 0 || job.replication.backups == 1, &errors, "replication.backups",
          "must be 0 (no replication) or 1 (one backup per shard)");
  }
  {
    MapReader r(top.child("compression"), "compression", &errors);
    auto& c = job.compression;
    r.Get("push", &c.push);
    r.Get("pull", &c.pull);
    r.Get("error_feedback", &c.error_feedback);
    r.Get("momentum_correction", &c.momentum_correction);
    r.Get("sparsity_warmup_steps", &c.sparsity_warmup_steps);
    Check(c.sparsity_warmup_steps >= 0, &errors, "compression.sparsity_warmup_steps", "must be >= 0");
    YAML::Node links = r.child("links");
    if (links && !links.IsNull()) {
      if (!links.IsSequence()) {
        errors.push_back("compression.links: must be a list of {regions: [a, b], push, pull}");
      } else {
        for (size_t i = 0; i < links.size(); ++i) {
          std::string where = "compression.links[" + std::to_string(i) + "]";
          MapReader lr(links[i], where, &errors);
          CompressionLinkSpec l;
          std::vector<std::string> pair;
          lr.Get("regions", &pair);
          lr.Get("push", &l.push);
          lr.Get("pull", &l.pull);
          lr.Finish();
          if (pair.size() != 2) {
            errors.push_back(where + ".regions: must name two regions (the same one twice for within a region)");
            continue;
          }
          l.region_a = pair[0];
          l.region_b = pair[1];
          c.links.push_back(l);
        }
      }
    }
    r.Finish();
  }
  {
    MapReader r(top.child("wan"), "wan", &errors);
    auto& w = job.wan;
    r.Get("emulation", &w.emulation);
    r.Get("probe", &w.probe);
    r.Get("planner", &w.planner);
    r.Get("compute_ms", &w.compute_ms);
    Check(Finite(w.compute_ms) && w.compute_ms >= 0, &errors, "wan.compute_ms", "must be >= 0");
    r.Get("replan_drift", &w.replan_drift);
    r.Get("congestion_control", &w.congestion_control);
    r.Get("replan", &w.replan);
    r.Get("replan_every_s", &w.replan_every_s);
    r.Get("replan_min_samples", &w.replan_min_samples);
    r.Get("replan_at_clock", &w.replan_at_clock);
    r.Get("replan_from", &w.replan_from);
    r.Get("replan_to", &w.replan_to);
    r.Get("replan_mbit", &w.replan_mbit);
    Check(Finite(w.replan_every_s) && w.replan_every_s >= 0, &errors, "wan.replan_every_s", "must be >= 0");
    Check(w.replan_min_samples >= 1, &errors, "wan.replan_min_samples", "must be >= 1");
    Check(w.replan_at_clock >= -1, &errors, "wan.replan_at_clock", "must be >= 0, or -1 (off)");
    Check(Finite(w.replan_mbit) && w.replan_mbit >= 0, &errors, "wan.replan_mbit", "must be >= 0");
    r.Get("planner_codecs", &w.planner_codecs);
    Check(w.emulation == "none" || w.emulation == "proxy" || w.emulation == "netns", &errors, "wan.emulation",
          "must be none, proxy or netns, not '" + w.emulation + "'");
    Check(Finite(w.replan_drift) && w.replan_drift > 0, &errors, "wan.replan_drift", "must be > 0");
    Check(w.congestion_control == "auto" || w.congestion_control == "bbr" || w.congestion_control == "cubic" ||
              w.congestion_control == "reno",
          &errors, "wan.congestion_control", "'" + w.congestion_control + "': use auto, bbr, cubic or reno");
    YAML::Node links = r.child("links");
    if (links && !links.IsNull()) {
      if (!links.IsSequence()) {
        errors.push_back("wan.links: must be a list of {regions: [a, b] | from: a, to: b, rtt_ms | delay_ms, ...}");
      } else {
        for (size_t i = 0; i < links.size(); ++i) {
          std::string where = "wan.links[" + std::to_string(i) + "]";
          MapReader lr(links[i], where, &errors);
          LinkSpec l;
          std::vector<std::string> pair;
          double rtt_ms = std::nan("");
          lr.Get("regions", &pair);
          lr.Get("from", &l.from);
          lr.Get("to", &l.to);
          lr.Get("rtt_ms", &rtt_ms);
          lr.Get("delay_ms", &l.delay_ms);
          lr.Get("jitter_ms", &l.jitter_ms);
          lr.Get("bandwidth_mbit", &l.bandwidth_mbit);
          lr.Get("loss", &l.loss);
          lr.Finish();
          if (!std::isnan(rtt_ms)) l.delay_ms = rtt_ms >= 0 ? rtt_ms / 2 : -1;
          Check(Finite(l.delay_ms) && l.delay_ms >= 0 && l.delay_ms <= 60000, &errors, where + ".rtt_ms",
                "delays must be in [0, 60 s]");
          Check(Finite(l.jitter_ms) && l.jitter_ms >= 0 && l.jitter_ms <= 60000, &errors, where + ".jitter_ms",
                "must be in [0, 60000]");
          Check(Finite(l.bandwidth_mbit) && l.bandwidth_mbit >= 0, &errors, where + ".bandwidth_mbit",
                "must be >= 0 (0: unlimited)");
          Check(Finite(l.loss) && l.loss >= 0 && l.loss < 1, &errors, where + ".loss", "must be in [0, 1)");
          if (!pair.empty()) {
            if (pair.size() != 2 || !l.from.empty() || !l.to.empty()) {
              errors.push_back(where + ": give either regions: [a, b] (both directions) or from and to");
              continue;
            }
            l.from = pair[0];
            l.to = pair[1];
            w.links.push_back(l);
            if (pair[0] != pair[1]) {
              std::swap(l.from, l.to);
              w.links.push_back(l);
            }
          } else if (l.from.empty() || l.to.empty()) {
            errors.push_back(where + ": needs regions: [a, b] or from and to");
          } else {
            w.links.push_back(l);
          }
        }
      }
    }
    r.Finish();
  }
  top.Finish();

  Check(job.training.pipeline_depth >= 1 && job.training.pipeline_depth <= 16, &errors, "training.pipeline_depth",
        "must be in [1, 16]");
  Check(job.training.pipeline_depth <= 1 || job.training.pipeline_depth - 1 <= job.training.staleness_bound, &errors,
        "training.pipeline_depth", "must be at most training.staleness_bound + 1 (a deeper pipeline reads staler)");
  Check(job.training.pipeline_depth <= 1 || job.training.prefetch, &errors, "training.pipeline_depth",
        "needs training.prefetch");
  {
    const TrainingSpec& t = job.training;
    Check(t.local_steps >= 1 && t.local_steps <= 1000, &errors, "training.local_steps", "must be in [1, 1000]");
    Check(Finite(t.outer_lr) && t.outer_lr > 0 && t.outer_lr <= 10, &errors, "training.outer_lr", "must be in (0, 10]");
    Check(Finite(t.outer_momentum) && t.outer_momentum >= 0 && t.outer_momentum < 1, &errors, "training.outer_momentum",
          "must be in [0, 1)");
    if (t.local_steps > 1) {
      Check(t.staleness_bound == 0, &errors, "training.local_steps",
            "needs training.staleness_bound: 0 (rounds are averaged synchronously; overlap_rounds hides the round "
            "trip instead)");
      Check(t.pipeline_depth == 1, &errors, "training.local_steps", "cannot be combined with training.pipeline_depth");
      Check(job.optimizer.name == "sgd", &errors, "training.local_steps", "needs optimizer.name: sgd");
      Check(!job.compression.momentum_correction, &errors, "training.local_steps",
            "cannot be combined with compression.momentum_correction (the workers already keep the momentum)");
    }
  }
  Check(!job.compression.momentum_correction || job.optimizer.name == "sgd", &errors, "compression.momentum_correction",
        "needs optimizer.name: sgd (it moves SGD's momentum to the workers)");
  for (size_t i = 0; i < job.compression.links.size(); ++i)
    for (const std::string* region : {&job.compression.links[i].region_a, &job.compression.links[i].region_b})
      Check(job.FindRegion(*region), &errors, "compression.links[" + std::to_string(i) + "].regions",
            "'" + *region + "' is not a region of this job");

  for (size_t i = 0; i < job.wan.links.size(); ++i) {
    const LinkSpec& l = job.wan.links[i];
    for (const std::string* region : {&l.from, &l.to})
      Check(job.FindRegion(*region), &errors, "wan.links", "'" + *region + "' is not a region of this job");
    for (size_t j = 0; j < i; ++j)
      Check(job.wan.links[j].from != l.from || job.wan.links[j].to != l.to, &errors, "wan.links",
            "the link " + l.from + " -> " + l.to + " is declared twice");
  }

  if (job.wan.replan) {
    Check(!job.wan.links.empty(), &errors, "wan.replan",
          "needs declared wan.links (the planner re-plans against them)");
    Check(job.wan.planner, &errors, "wan.replan", "needs wan.planner: true");
    // A migration hands a chunk's state from one shard process to another;
    // a backup would have to follow it (not built), so refuse rather than
    // lose the replica's guarantee silently.
    Check(job.replication.backups == 0, &errors, "wan.replan",
          "cannot be combined with replication.backups > 0 (moving a replicated chunk is not supported)");
    Check(job.security.mode != "curve", &errors, "wan.replan",
          "cannot be combined with security.mode: curve (shard-to-shard chunk transfers are not authenticated yet)");
    // A periodic checkpoint written during a migration could miss the chunk
    // in flight, and a resume would then refuse the set.
    Check(job.checkpoint.every_clocks == 0, &errors, "wan.replan",
          "needs checkpoint.every_clocks: 0 (periodic checkpoints during a migration are not supported)");
    // An overlapped round keeps a pull in flight across the barrier, which
    // the migration's floor does not account for yet; and the barrier's
    // last clock is taken from WorkerProgress.target_steps, which counts
    // minibatches, not rounds.
    Check(job.training.local_steps == 1, &errors, "wan.replan",
          "cannot be combined with training.local_steps > 1 (not supported yet)");
  }
  if (job.wan.replan_at_clock >= 0) {
    Check(job.wan.replan, &errors, "wan.replan_at_clock", "needs wan.replan: true");
    for (const std::string* region : {&job.wan.replan_from, &job.wan.replan_to})
      Check(job.FindRegion(*region), &errors, "wan.replan_from/replan_to",
            "'" + *region + "' is not a region of this job");
    Check(job.wan.replan_mbit > 0, &errors, "wan.replan_mbit", "must be > 0 with wan.replan_at_clock");
  }

  if (!job.regions.empty()) {
    Check(job.NumServers() >= 1, &errors, "regions", "the job needs at least one server");
    Check(job.NumWorkers() >= 1, &errors, "regions", "the job needs at least one worker");
    if (job.coordinator_region.empty()) job.coordinator_region = job.regions.front().name;
    Check(job.FindRegion(job.coordinator_region), &errors, "coordinator_region",
          "'" + job.coordinator_region + "' is not a region of this job");
  }
  Check(ValidName(job.name), &errors, "name", "job names use letters, digits, '-' and '_' (1-63 chars)");

  if (!errors.empty()) {
    std::string msg = source_name + ": " + std::to_string(errors.size()) + " problem(s) in the job file:";
    for (const auto& e : errors) msg += "\n  " + e;
    return InvalidArgument(msg);
  }
  return job;
}

StatusOr<JobSpec> LoadJobFile(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open job file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseJob(ss.str(), path, overrides);
}

std::string JobToYaml(const JobSpec& job) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << job.name;
  out << YAML::Key << "seed" << YAML::Value << job.seed;
  out << YAML::Key << "coordinator_region" << YAML::Value << job.coordinator_region;
  out << YAML::Key << "regions" << YAML::Value << YAML::BeginMap;
  for (const auto& r : job.regions) {
    out << YAML::Key << r.name << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "host" << YAML::Value << r.host;
    out << YAML::Key << "servers" << YAML::Value << r.servers;
    out << YAML::Key << "workers" << YAML::Value << r.workers;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  out << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << job.model.name;
  out << YAML::Key << "mlp_hidden" << YAML::Value << YAML::Flow << job.model.mlp_hidden;
  out << YAML::Key << "synthetic_params" << YAML::Value << job.model.synthetic_params;
  out << YAML::EndMap;
  out << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "dataset" << YAML::Value << job.data.dataset;
  out << YAML::Key << "path" << YAML::Value << job.data.path;
  out << YAML::Key << "partition" << YAML::Value << job.data.partition;
  out << YAML::Key << "batch_size" << YAML::Value << job.data.batch_size;
  out << YAML::EndMap;
  out.SetDoublePrecision(17);
  out << YAML::Key << "optimizer" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << job.optimizer.name;
  out << YAML::Key << "lr" << YAML::Value << job.optimizer.lr;
  out << YAML::Key << "momentum" << YAML::Value << job.optimizer.momentum;
  out << YAML::Key << "weight_decay" << YAML::Value << job.optimizer.weight_decay;
  out << YAML::Key << "beta1" << YAML::Value << job.optimizer.beta1;
  out << YAML::Key << "beta2" << YAML::Value << job.optimizer.beta2;
  out << YAML::Key << "eps" << YAML::Value << job.optimizer.eps;
  out << YAML::Key << "schedule" << YAML::Value << job.optimizer.schedule;
  out << YAML::EndMap;
  out << YAML::Key << "training" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "epochs" << YAML::Value << job.training.epochs;
  out << YAML::Key << "steps" << YAML::Value << job.training.steps;
  out << YAML::Key << "staleness_bound" << YAML::Value << job.training.staleness_bound;
  out << YAML::Key << "staleness_scaling" << YAML::Value << job.training.staleness_scaling;
  out << YAML::Key << "device" << YAML::Value << job.training.device;
  out << YAML::Key << "threads" << YAML::Value << job.training.threads;
  out << YAML::Key << "prefetch" << YAML::Value << job.training.prefetch;
  out << YAML::Key << "pipeline_depth" << YAML::Value << job.training.pipeline_depth;
  out << YAML::Key << "local_steps" << YAML::Value << job.training.local_steps;
  out << YAML::Key << "overlap_rounds" << YAML::Value << job.training.overlap_rounds;
  out << YAML::Key << "outer_lr" << YAML::Value << job.training.outer_lr;
  out << YAML::Key << "outer_momentum" << YAML::Value << job.training.outer_momentum;
  out << YAML::EndMap;
  out << YAML::Key << "wire" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "chunk_bytes" << YAML::Value << job.wire.chunk_bytes;
  out << YAML::Key << "message_bytes" << YAML::Value << job.wire.message_bytes;
  out << YAML::Key << "max_message_bytes" << YAML::Value << job.wire.max_message_bytes;
  out << YAML::EndMap;
  out << YAML::Key << "membership" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "heartbeat_ms" << YAML::Value << job.membership.heartbeat_ms;
  out << YAML::Key << "lease_ms" << YAML::Value << job.membership.lease_ms;
  out << YAML::Key << "rendezvous_timeout_s" << YAML::Value << job.membership.rendezvous_timeout_s;
  out << YAML::Key << "rpc_timeout_s" << YAML::Value << job.membership.rpc_timeout_s;
  out << YAML::Key << "report_after_s" << YAML::Value << job.membership.report_after_s;
  out << YAML::EndMap;
  out << YAML::Key << "compression" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "push" << YAML::Value << job.compression.push;
  out << YAML::Key << "pull" << YAML::Value << job.compression.pull;
  out << YAML::Key << "error_feedback" << YAML::Value << job.compression.error_feedback;
  out << YAML::Key << "momentum_correction" << YAML::Value << job.compression.momentum_correction;
  out << YAML::Key << "sparsity_warmup_steps" << YAML::Value << job.compression.sparsity_warmup_steps;
  out << YAML::Key << "links" << YAML::Value << YAML::BeginSeq;
  for (const auto& l : job.compression.links) {
    out << YAML::BeginMap;
    out << YAML::Key << "regions" << YAML::Value << YAML::Flow << std::vector<std::string>{l.region_a, l.region_b};
    if (!l.push.empty()) out << YAML::Key << "push" << YAML::Value << l.push;
    if (!l.pull.empty()) out << YAML::Key << "pull" << YAML::Value << l.pull;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
  out << YAML::Key << "wan" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "emulation" << YAML::Value << job.wan.emulation;
  out << YAML::Key << "probe" << YAML::Value << job.wan.probe;
  out << YAML::Key << "planner" << YAML::Value << job.wan.planner;
  out << YAML::Key << "compute_ms" << YAML::Value << job.wan.compute_ms;
  out << YAML::Key << "replan_drift" << YAML::Value << job.wan.replan_drift;
  out << YAML::Key << "congestion_control" << YAML::Value << job.wan.congestion_control;
  out << YAML::Key << "replan" << YAML::Value << job.wan.replan;
  out << YAML::Key << "replan_every_s" << YAML::Value << job.wan.replan_every_s;
  out << YAML::Key << "replan_min_samples" << YAML::Value << job.wan.replan_min_samples;
  out << YAML::Key << "replan_at_clock" << YAML::Value << job.wan.replan_at_clock;
  out << YAML::Key << "replan_from" << YAML::Value << job.wan.replan_from;
  out << YAML::Key << "replan_to" << YAML::Value << job.wan.replan_to;
  out << YAML::Key << "replan_mbit" << YAML::Value << job.wan.replan_mbit;
  out << YAML::Key << "planner_codecs" << YAML::Value << YAML::Flow << job.wan.planner_codecs;
  out << YAML::Key << "links" << YAML::Value << YAML::BeginSeq;
  for (const auto& l : job.wan.links) {
    out << YAML::BeginMap;
    out << YAML::Key << "from" << YAML::Value << l.from << YAML::Key << "to" << YAML::Value << l.to;
    out << YAML::Key << "delay_ms" << YAML::Value << l.delay_ms;
    out << YAML::Key << "jitter_ms" << YAML::Value << l.jitter_ms;
    out << YAML::Key << "bandwidth_mbit" << YAML::Value << l.bandwidth_mbit;
    out << YAML::Key << "loss" << YAML::Value << l.loss;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
  out << YAML::Key << "checkpoint" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "every_clocks" << YAML::Value << job.checkpoint.every_clocks;
  out << YAML::Key << "keep" << YAML::Value << job.checkpoint.keep;
  out << YAML::Key << "on_stop" << YAML::Value << job.checkpoint.on_stop;
  out << YAML::EndMap;
  out << YAML::Key << "replication" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "backups" << YAML::Value << job.replication.backups;
  out << YAML::EndMap;
  out << YAML::Key << "security" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "mode" << YAML::Value << job.security.mode;
  out << YAML::Key << "secret_file" << YAML::Value << job.security.secret_file;
  out << YAML::Key << "token_ttl_s" << YAML::Value << job.security.token_ttl_s;
  out << YAML::EndMap;
  out << YAML::Key << "eval" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "snapshot_every_s" << YAML::Value << job.eval.snapshot_every_s;
  out << YAML::Key << "target_accuracy" << YAML::Value << job.eval.target_accuracy;
  out << YAML::Key << "test_samples" << YAML::Value << job.eval.test_samples;
  out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace geodesic
