// YAML text -> JobSpec: one function per section of the job file, each
// reading its keys and checking the rules that involve only that section;
// rules across sections are in validate.cc.
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "config/job.h"
#include "config/reader.h"

namespace geodesic {
namespace {

using config_internal::Check;
using config_internal::Finite;
using config_internal::MapReader;
using Errors = config_internal::ParseErrors;

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

// Sets *out to the value `word` names, or reports `what` at `where`.
template <JobEnum E>
void ParseWord(const std::string& word, E* out, Errors* errors, const std::string& where, const std::string& what) {
  std::optional<E> value = FromString<E>(word);
  if (value)
    *out = *value;
  else
    errors->push_back(where + ": " + what);
}

void ParseStaleness(MapReader& r, int64_t* out, Errors* errors) {
  YAML::Node n = r.child("staleness_bound");
  if (!n || n.IsNull()) return;
  std::string where = r.ChildPath("staleness_bound");
  if (!n.IsScalar()) {
    errors->push_back(where + ": expected an integer or 'inf'");
    return;
  }
  std::string s = n.Scalar();
  if (s == "inf" || s == "async") {
    *out = kUnboundedStaleness;
    return;
  }
  try {
    *out = n.as<int64_t>();
  } catch (const YAML::Exception&) {
    errors->push_back(where + ": expected an integer or 'inf', got '" + s + "'");
    return;
  }
  Check(*out >= 0, errors, where, "must be >= 0 (0 is BSP)");
  if (*out > kUnboundedStaleness) *out = kUnboundedStaleness;
}

void ParseRegions(MapReader& top, std::vector<RegionSpec>* out, Errors* errors) {
  YAML::Node regions = top.child("regions");
  if (!regions || !regions.IsMap() || regions.size() == 0) {
    errors->push_back("regions: required, a mapping from region name to {servers, workers, host}");
    return;
  }
  for (const auto& kv : regions) {
    RegionSpec region;
    region.name = kv.first.IsScalar() ? kv.first.Scalar() : std::string("<not a name>");
    std::string where = "regions." + region.name;
    Check(config_internal::ValidName(region.name), errors, where, "region names use letters, digits, '-' and '_'");
    MapReader r(kv.second, where, errors);
    r.Get("host", &region.host);
    r.Get("servers", &region.servers);
    r.Get("workers", &region.workers);
    region.max_workers = region.workers;
    r.Get("max_workers", &region.max_workers);
    if (const YAML::Node a = r.child("aggregator"); r.present("aggregator")) {
      if (a.IsScalar() && a.Scalar() == "auto")
        region.aggregator_auto = true;
      else if (a.IsScalar() && (a.as<bool>(false) || !a.as<bool>(true)))
        region.aggregator = a.as<bool>();
      else
        Check(false, errors, where + ".aggregator", "expected true, false or auto");
    }
    r.Finish();
    Check(region.servers >= 0 && region.servers <= 256, errors, where + ".servers", "must be in [0, 256]");
    Check(region.workers >= 0 && region.workers <= 4096, errors, where + ".workers", "must be in [0, 4096]");
    Check(region.max_workers >= region.workers && region.max_workers <= 4096, errors, where + ".max_workers",
          "must be in [workers, 4096]");
    Check(!region.host.empty(), errors, where + ".host", "must not be empty");
    // It ends up in endpoints, command lines and rendered scripts.
    Check(region.host.size() <= 253 &&
              region.host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:") ==
                  std::string::npos,
          errors, where + ".host", "must be an address or a host name (letters, digits, '.', '-', '_', ':')");
    out->push_back(region);
  }
}

void ParseModel(MapReader& top, ModelSpec* m, Errors* errors) {
  MapReader r(top.child("model"), "model", errors);
  std::string name = ToString(m->name);
  r.Get("name", &name);
  r.Get("mlp_hidden", &m->mlp_hidden);
  r.Get("synthetic_params", &m->synthetic_params);
  r.Get("path", &m->path);
  r.Finish();
  ParseWord(name, &m->name, errors, "model.name",
            "'" + name + "' is not a model; use cnn, mlp, synthetic or torchscript");
  Check(m->name != ModelKind::kTorchScript || !m->path.empty(), errors, "model.path",
        "model torchscript needs the path of a module saved with torch.jit.save");
  Check(m->name == ModelKind::kTorchScript || m->path.empty(), errors, "model.path", "is only for model torchscript");
  for (int h : m->mlp_hidden) Check(h > 0 && h <= 65536, errors, "model.mlp_hidden", "widths must be in [1, 65536]");
  Check(m->synthetic_params > 0 && m->synthetic_params <= (int64_t{1} << 31), errors, "model.synthetic_params",
        "must be in [1, 2^31]");
}

void ParseData(MapReader& top, DataSpec* d, Errors* errors) {
  MapReader r(top.child("data"), "data", errors);
  std::string dataset = ToString(d->dataset), partition = ToString(d->partition);
  r.Get("dataset", &dataset);
  r.Get("path", &d->path);
  r.Get("partition", &partition);
  r.Get("batch_size", &d->batch_size);
  r.Get("train_samples", &d->train_samples);
  r.Get("context", &d->context);
  r.Get("token_bytes", &d->token_bytes);
  r.Get("vocab", &d->vocab);
  r.Get("mean", &d->mean);
  r.Get("std", &d->std);
  MapReader a(r.child("augment"), "data.augment", errors);
  a.Get("crop", &d->augment.crop);
  a.Get("flip", &d->augment.flip);
  a.Finish();
  r.Finish();
  ParseWord(dataset, &d->dataset, errors, "data.dataset",
            "'" + dataset + "' is not supported; use fashion-mnist, cifar10, safetensors or tokens");
  Check(d->context >= 1 && d->context <= 65536, errors, "data.context", "must be in [1, 65536] tokens");
  Check(d->token_bytes == 2 || d->token_bytes == 4, errors, "data.token_bytes", "must be 2 (uint16) or 4 (uint32)");
  Check(d->vocab >= 0 && d->vocab <= (int64_t{1} << 32), errors, "data.vocab", "must be in [0, 2^32] (0: the model's)");
  Check(d->mean.size() == d->std.size(), errors, "data.std", "needs one value per value of data.mean");
  Check(d->mean.size() <= 64, errors, "data.mean", "at most 64 channels");
  for (double m : d->mean) Check(Finite(m), errors, "data.mean", "values must be finite");
  for (double v : d->std) Check(Finite(v) && v > 0, errors, "data.std", "values must be finite and > 0");
  Check(d->train_samples >= 0, errors, "data.train_samples", "must be >= 0 (0: the dataset's standard size)");
  Check(d->augment.crop >= 0 && d->augment.crop <= 64, errors, "data.augment.crop", "must be in [0, 64] pixels");
  if (StatusOr<PartitionSpec> p = ParsePartition(partition); p.ok())
    d->partition = *p;
  else
    errors->push_back("data.partition: " + p.status().message());
  Check(d->batch_size >= 1 && d->batch_size <= 65536, errors, "data.batch_size", "must be in [1, 65536]");
}

void CheckSchedule(const OptimizerSpec& o, Errors* errors) {
  Check(Finite(o.warmup) && o.warmup >= 0 && o.warmup < 1, errors, "optimizer.warmup",
        "must be in [0, 1) (a share of the steps)");
  Check(Finite(o.gamma) && o.gamma > 0 && o.gamma <= 1, errors, "optimizer.gamma", "must be in (0, 1]");
  bool increasing = true;
  for (size_t i = 0; i < o.milestones.size(); ++i)
    increasing &= Finite(o.milestones[i]) && o.milestones[i] > 0 && o.milestones[i] < 1 &&
                  (i == 0 || o.milestones[i] > o.milestones[i - 1]);
  Check(increasing, errors, "optimizer.milestones", "must be increasing shares of the steps, each in (0, 1)");
  Check(o.schedule == LrSchedule::kStep || o.milestones.empty(), errors, "optimizer.milestones",
        "needs optimizer.schedule: step");
  Check(o.schedule != LrSchedule::kStep || !o.milestones.empty(), errors, "optimizer.schedule",
        "step needs optimizer.milestones (e.g. [0.5, 0.75])");
}

void ParseOptimizer(MapReader& top, OptimizerSpec* o, Errors* errors) {
  MapReader r(top.child("optimizer"), "optimizer", errors);
  std::string name = ToString(o->name), schedule = ToString(o->schedule);
  r.Get("name", &name);
  r.Get("lr", &o->lr);
  r.Get("momentum", &o->momentum);
  r.Get("nesterov", &o->nesterov);
  r.Get("weight_decay", &o->weight_decay);
  r.Get("beta1", &o->beta1);
  r.Get("beta2", &o->beta2);
  r.Get("eps", &o->eps);
  r.Get("schedule", &schedule);
  r.Get("warmup", &o->warmup);
  r.Get("milestones", &o->milestones);
  r.Get("gamma", &o->gamma);
  r.Get("clip_norm", &o->clip_norm);
  r.Finish();
  ParseWord(schedule, &o->schedule, errors, "optimizer.schedule",
            "'" + schedule + "' is not a schedule; use constant, cosine or step");
  ParseWord(name, &o->name, errors, "optimizer.name", "'" + name + "' is not an optimizer; use sgd, adam or adamw");
  Check(Finite(o->lr) && o->lr > 0 && o->lr < 1e3, errors, "optimizer.lr", "must be in (0, 1000)");
  Check(Finite(o->momentum) && o->momentum >= 0 && o->momentum < 1, errors, "optimizer.momentum", "must be in [0, 1)");
  Check(!o->nesterov || (o->name == OptimizerKind::kSgd && o->momentum > 0), errors, "optimizer.nesterov",
        "needs optimizer.name: sgd and optimizer.momentum > 0");
  Check(Finite(o->weight_decay) && o->weight_decay >= 0, errors, "optimizer.weight_decay", "must be >= 0");
  Check(Finite(o->beta1) && o->beta1 >= 0 && o->beta1 < 1, errors, "optimizer.beta1", "must be in [0, 1)");
  Check(Finite(o->beta2) && o->beta2 >= 0 && o->beta2 < 1, errors, "optimizer.beta2", "must be in [0, 1)");
  Check(Finite(o->eps) && o->eps > 0, errors, "optimizer.eps", "must be > 0");
  Check(Finite(o->clip_norm) && o->clip_norm >= 0, errors, "optimizer.clip_norm", "must be >= 0 (0: no clipping)");
  CheckSchedule(*o, errors);
}

void ParseTraining(MapReader& top, TrainingSpec* t, Errors* errors) {
  MapReader r(top.child("training"), "training", errors);
  std::string device = ToString(t->device);
  r.Get("epochs", &t->epochs);
  r.Get("steps", &t->steps);
  ParseStaleness(r, &t->staleness_bound, errors);
  r.Get("staleness_scaling", &t->staleness_scaling);
  r.Get("device", &device);
  r.Get("threads", &t->threads);
  r.Get("shard_threads", &t->shard_threads);
  r.Get("prefetch", &t->prefetch);
  r.Get("pipeline_depth", &t->pipeline_depth);
  r.Get("local_steps", &t->local_steps);
  r.Get("overlap_rounds", &t->overlap_rounds);
  r.Get("overlap_steps", &t->overlap_steps);
  r.Get("fragments", &t->fragments);
  r.Get("outer_lr", &t->outer_lr);
  r.Get("outer_momentum", &t->outer_momentum);
  r.Get("outer_nesterov", &t->outer_nesterov);
  r.Finish();
  Check(t->steps >= 0, errors, "training.steps", "must be >= 0");
  Check(t->steps > 0 || (Finite(t->epochs) && t->epochs > 0 && t->epochs <= 10000), errors, "training.epochs",
        "must be in (0, 10000] unless training.steps is set");
  ParseWord(device, &t->device, errors, "training.device", "use cpu, cuda or auto");
  Check(t->threads >= 1 && t->threads <= 256, errors, "training.threads", "must be in [1, 256]");
  Check(t->shard_threads >= 0 && t->shard_threads <= 256, errors, "training.shard_threads",
        "must be in [0, 256] (0: one per core)");
}

void ParseWire(MapReader& top, WireSpec* w, Errors* errors) {
  MapReader r(top.child("wire"), "wire", errors);
  r.Get("chunk_bytes", &w->chunk_bytes);
  r.Get("message_bytes", &w->message_bytes);
  r.Get("max_message_bytes", &w->max_message_bytes);
  r.Finish();
  Check(w->chunk_bytes >= 1024 && w->chunk_bytes <= (64 << 20) && w->chunk_bytes % 4 == 0, errors, "wire.chunk_bytes",
        "must be a multiple of 4 in [1 KiB, 64 MiB]");
  Check(w->message_bytes >= 1024 && w->message_bytes <= (256 << 20), errors, "wire.message_bytes",
        "must be in [1 KiB, 256 MiB]");
  Check(w->max_message_bytes >= w->message_bytes && w->max_message_bytes >= w->chunk_bytes + 65536, errors,
        "wire.max_message_bytes", "must exceed message_bytes and chunk_bytes by a header's room (64 KiB)");
}

void ParseMembership(MapReader& top, MembershipSpec* m, Errors* errors) {
  MapReader r(top.child("membership"), "membership", errors);
  r.Get("heartbeat_ms", &m->heartbeat_ms);
  r.Get("lease_ms", &m->lease_ms);
  r.Get("rendezvous_timeout_s", &m->rendezvous_timeout_s);
  r.Get("rpc_timeout_s", &m->rpc_timeout_s);
  r.Get("report_after_s", &m->report_after_s);
  r.Get("elastic", &m->elastic);
  r.Get("units_ahead", &m->units_ahead);
  r.Finish();
  Check(m->units_ahead >= 1 && m->units_ahead <= 64, errors, "membership.units_ahead", "must be in [1, 64]");
  Check(m->heartbeat_ms >= 10 && m->heartbeat_ms <= 60000, errors, "membership.heartbeat_ms", "must be in [10, 60000]");
  Check(m->lease_ms >= 2 * m->heartbeat_ms, errors, "membership.lease_ms", "must be at least twice heartbeat_ms");
  Check(m->rendezvous_timeout_s > 0, errors, "membership.rendezvous_timeout_s", "must be > 0");
  Check(m->rpc_timeout_s > 0, errors, "membership.rpc_timeout_s", "must be > 0");
  Check(m->report_after_s > 0, errors, "membership.report_after_s", "must be > 0");
}

void ParseSecurity(MapReader& top, SecuritySpec* s, Errors* errors) {
  MapReader r(top.child("security"), "security", errors);
  std::string mode = ToString(s->mode);
  r.Get("mode", &mode);
  r.Get("secret_file", &s->secret_file);
  r.Get("token_ttl_s", &s->token_ttl_s);
  r.Finish();
  ParseWord(mode, &s->mode, errors, "security.mode", "use none or curve");
  Check(s->token_ttl_s >= 10 && s->token_ttl_s <= 366LL * 86400, errors, "security.token_ttl_s",
        "must be in [10, 31622400] seconds");
  Check(s->secret_file.empty() || s->mode == SecurityMode::kCurve, errors, "security.secret_file",
        "needs security.mode: curve");
}

void ParseEval(MapReader& top, EvalSpec* e, Errors* errors) {
  MapReader r(top.child("eval"), "eval", errors);
  r.Get("snapshot_every_s", &e->snapshot_every_s);
  r.Get("target_accuracy", &e->target_accuracy);
  r.Get("target_loss", &e->target_loss);
  r.Get("test_samples", &e->test_samples);
  r.Get("curve_points", &e->curve_points);
  r.Get("buffer_samples", &e->buffer_samples);
  r.Get("batch", &e->batch);
  r.Finish();
  Check(e->buffer_samples >= 1, errors, "eval.buffer_samples", "must be >= 1");
  Check(Finite(e->snapshot_every_s) && e->snapshot_every_s > 0, errors, "eval.snapshot_every_s", "must be > 0");
  Check(Finite(e->target_accuracy) && e->target_accuracy > 0 && e->target_accuracy <= 1, errors, "eval.target_accuracy",
        "must be in (0, 1]");
  Check(Finite(e->target_loss) && e->target_loss >= 0, errors, "eval.target_loss", "must be >= 0 (0: none)");
  Check(e->test_samples >= 0, errors, "eval.test_samples", "must be >= 0");
  Check(e->batch >= 1 && e->batch <= 100000, errors, "eval.batch", "must be in [1, 100000]");
  Check(e->curve_points >= 0 && e->curve_points <= 1000000, errors, "eval.curve_points",
        "must be in [0, 1000000] (0: every snapshot)");
}

// federated's simulated time: over-selection, the deadline, device profiles.
void CheckDevices(const FederatedSpec& f, Errors* errors) {
  auto in = [&](double v, double lo, double hi, bool open_lo, const char* key, const char* range) {
    Check(Finite(v) && (open_lo ? v > lo : v >= lo) && v <= hi, errors, std::string("federated.") + key,
          std::string("must be in ") + range);
  };
  in(f.over_selection, 0, 10, false, "over_selection", "[0, 10]");
  in(f.deadline_s, 0, 1e6, false, "deadline_s", "[0, 1e6] (0: none)");
  in(f.device_step_s, 0, 1e3, true, "device_step_s", "(0, 1000]");
  in(f.device_slow_fraction, 0, 1, false, "device_slow_fraction", "[0, 1]");
  in(f.device_slow_factor, 1, 1e3, false, "device_slow_factor", "[1, 1000]");
  in(f.device_uplink_mbit, 0, 1e6, true, "device_uplink_mbit", "(0, 1e6]");
  in(f.device_downlink_mbit, 0, 1e6, true, "device_downlink_mbit", "(0, 1e6]");
  in(f.device_latency_ms, 0, 1e5, false, "device_latency_ms", "[0, 1e5]");
  for (auto [v, key] : {std::pair{f.device_compute_sigma, "device_compute_sigma"},
                        {f.device_uplink_sigma, "device_uplink_sigma"},
                        {f.device_downlink_sigma, "device_downlink_sigma"},
                        {f.device_latency_sigma, "device_latency_sigma"}})
    in(v, 0, 5, false, key, "[0, 5]");
}

void ReadDevices(MapReader& r, FederatedSpec* f) {
  r.Get("over_selection", &f->over_selection);
  r.Get("deadline_s", &f->deadline_s);
  r.Get("device_step_s", &f->device_step_s);
  r.Get("device_compute_sigma", &f->device_compute_sigma);
  r.Get("device_slow_fraction", &f->device_slow_fraction);
  r.Get("device_slow_factor", &f->device_slow_factor);
  r.Get("device_uplink_mbit", &f->device_uplink_mbit);
  r.Get("device_uplink_sigma", &f->device_uplink_sigma);
  r.Get("device_downlink_mbit", &f->device_downlink_mbit);
  r.Get("device_downlink_sigma", &f->device_downlink_sigma);
  r.Get("device_latency_ms", &f->device_latency_ms);
  r.Get("device_latency_sigma", &f->device_latency_sigma);
}

// DP-FedAvg's keys, and what the accountant assumes.
void CheckPrivacy(const FederatedSpec& f, Errors* errors) {
  Check(Finite(f.dp_clip_norm) && f.dp_clip_norm >= 0 && f.dp_clip_norm <= 1e6, errors, "federated.dp_clip_norm",
        "must be in [0, 1e6] (0: no DP)");
  Check(Finite(f.dp_noise_multiplier) && f.dp_noise_multiplier > 0 && f.dp_noise_multiplier <= 100, errors,
        "federated.dp_noise_multiplier", "must be in (0, 100]");
  Check(Finite(f.dp_delta) && f.dp_delta > 0 && f.dp_delta < 1, errors, "federated.dp_delta", "must be in (0, 1)");
  if (!f.dp()) return;
  Check((f.uplink_codec == "fp32" || f.uplink_codec.empty()) && f.slow_uplink_codec.empty(), errors,
        "federated.dp_clip_norm",
        "needs federated.uplink_codec: fp32 and no slow_uplink_codec (a compressed update, with its error feedback, "
        "is no longer within the clip norm the accountant assumes)");
  Check(f.over_selection == 0, errors, "federated.dp_clip_norm",
        "needs over_selection: 0 (the accountant's sampling rate is per_round / clients)");
  Check(!f.weighted_selection && f.availability == 1, errors, "federated.dp_clip_norm",
        "needs uniform selection of every client (weighted_selection: false, availability: 1): the accountant "
        "assumes a sampling rate of per_round / clients");
}

// The strategies' settings (the adaptive ones', FedBuff's) and the uplink codecs.
void ReadStrategy(MapReader& r, FederatedSpec* f) {
  r.Get("beta1", &f->beta1);
  r.Get("beta2", &f->beta2);
  r.Get("tau", &f->tau);
  r.Get("concurrency", &f->concurrency);
  r.Get("max_staleness", &f->max_staleness);
  r.Get("uplink_codec", &f->uplink_codec);
  r.Get("slow_uplink_codec", &f->slow_uplink_codec);
  r.Get("slow_uplink_mbit", &f->slow_uplink_mbit);
  r.Get("uplink_error_feedback", &f->uplink_error_feedback);
  r.Get("max_update_norm", &f->max_update_norm);
  r.Get("gateway", &f->gateway);
  r.Get("gateway_timeout_s", &f->gateway_timeout_s);
}

void CheckStrategy(const FederatedSpec& f, Errors* errors) {
  Check(Finite(f.beta1) && f.beta1 >= 0 && f.beta1 < 1, errors, "federated.beta1", "must be in [0, 1)");
  Check(Finite(f.beta2) && f.beta2 >= 0 && f.beta2 < 1, errors, "federated.beta2", "must be in [0, 1)");
  Check(Finite(f.tau) && f.tau > 0 && f.tau <= 10, errors, "federated.tau", "must be in (0, 10]");
  Check(f.concurrency >= 0 && f.concurrency <= f.clients, errors, "federated.concurrency",
        "must be in [0, clients] (0: per_round)");
  Check(f.max_staleness >= 0 && f.max_staleness <= 1000, errors, "federated.max_staleness", "must be in [0, 1000]");
  Check(Finite(f.slow_uplink_mbit) && f.slow_uplink_mbit >= 0, errors, "federated.slow_uplink_mbit",
        "must be >= 0 (0: no slow tier)");
  Check(!f.slow_uplink_codec.empty() || f.slow_uplink_mbit == 0, errors, "federated.slow_uplink_mbit",
        "needs federated.slow_uplink_codec");
  Check(Finite(f.max_update_norm) && f.max_update_norm >= 0, errors, "federated.max_update_norm",
        "must be >= 0 (0: no bound)");
  Check(Finite(f.gateway_timeout_s) && f.gateway_timeout_s > 0 && f.gateway_timeout_s <= 3600, errors,
        "federated.gateway_timeout_s", "must be in (0, 3600]");
  if (!f.gateway) return;
  Check(f.strategy != FederatedStrategy::kScaffold && f.strategy != FederatedStrategy::kFedBuff, errors,
        "federated.gateway",
        "works with the synchronous strategies without client state (fedavg, fedadam, fedyogi, fedadagrad), not "
        "with scaffold or fedbuff");
  Check(!f.dp(), errors, "federated.gateway", "does not work with DP-FedAvg (dp_clip_norm > 0) yet");
  Check((f.uplink_codec == "fp32" || f.uplink_codec.empty()) && f.slow_uplink_codec.empty(), errors,
        "federated.gateway", "needs federated.uplink_codec: fp32 and no slow_uplink_codec (real clients send fp32)");
}

void ParseFederated(MapReader& top, FederatedSpec* f, Errors* errors) {
  MapReader r(top.child("federated"), "federated", errors);
  r.Get("clients", &f->clients);
  r.Get("per_round", &f->per_round);
  r.Get("weighted_selection", &f->weighted_selection);
  r.Get("rounds", &f->rounds);
  r.Get("local_epochs", &f->local_epochs);
  r.Get("local_steps", &f->local_steps);
  r.Get("local_lr", &f->local_lr);
  r.Get("local_momentum", &f->local_momentum);
  r.Get("prox_mu", &f->prox_mu);
  r.Get("availability", &f->availability);
  r.Get("dropout", &f->dropout);
  ReadDevices(r, f);
  std::string strategy = ToString(f->strategy);
  r.Get("strategy", &strategy);
  ReadStrategy(r, f);
  r.Get("dp_clip_norm", &f->dp_clip_norm);
  r.Get("dp_noise_multiplier", &f->dp_noise_multiplier);
  r.Get("dp_delta", &f->dp_delta);
  r.Get("eval_every", &f->eval_every);
  r.Get("client_eval_samples", &f->client_eval_samples);
  r.Finish();
  ParseWord(strategy, &f->strategy, errors, "federated.strategy",
            "'" + strategy + "' is not a strategy; use fedavg, fedadam, fedyogi, fedadagrad, scaffold or fedbuff");
  Check(f->clients >= 0 && f->clients <= 1000000, errors, "federated.clients", "must be in [0, 1000000] (0: off)");
  if (!f->enabled()) return;
  Check(f->per_round >= 1 && f->per_round <= f->clients, errors, "federated.per_round", "must be in [1, clients]");
  Check(f->rounds >= 1 && f->rounds <= 1000000, errors, "federated.rounds", "must be in [1, 1000000]");
  Check(Finite(f->local_epochs) && f->local_epochs > 0 && f->local_epochs <= 1000, errors, "federated.local_epochs",
        "must be in (0, 1000]");
  Check(f->local_steps >= 0 && f->local_steps <= 1000000, errors, "federated.local_steps", "must be in [0, 1000000]");
  Check(Finite(f->local_lr) && f->local_lr > 0 && f->local_lr <= 10, errors, "federated.local_lr",
        "must be in (0, 10]");
  Check(Finite(f->local_momentum) && f->local_momentum >= 0 && f->local_momentum < 1, errors,
        "federated.local_momentum", "must be in [0, 1)");
  Check(Finite(f->prox_mu) && f->prox_mu >= 0 && f->prox_mu <= 1000, errors, "federated.prox_mu",
        "must be in [0, 1000]");
  Check(Finite(f->availability) && f->availability > 0 && f->availability <= 1, errors, "federated.availability",
        "must be in (0, 1]");
  Check(Finite(f->dropout) && f->dropout >= 0 && f->dropout < 1, errors, "federated.dropout", "must be in [0, 1)");
  CheckDevices(*f, errors);
  CheckStrategy(*f, errors);
  CheckPrivacy(*f, errors);
  Check(f->eval_every >= 0 && f->eval_every <= 1000000, errors, "federated.eval_every",
        "must be in [0, 1000000] (0: eval.snapshot_every_s instead)");
  Check(f->client_eval_samples >= 0 && f->client_eval_samples <= 60000, errors, "federated.client_eval_samples",
        "must be in [0, 60000]");
}

void ParseCheckpoint(MapReader& top, CheckpointSpec* c, Errors* errors) {
  MapReader r(top.child("checkpoint"), "checkpoint", errors);
  r.Get("every_clocks", &c->every_clocks);
  r.Get("keep", &c->keep);
  r.Get("on_stop", &c->on_stop);
  r.Finish();
  Check(c->every_clocks >= 0, errors, "checkpoint.every_clocks", "must be >= 0 (0: no periodic checkpoints)");
  Check(c->keep >= 2 && c->keep <= 1000, errors, "checkpoint.keep",
        "must be in [2, 1000] (the previous checkpoint is the fallback for a corrupt newest one)");
}

void ParseReplication(MapReader& top, ReplicationSpec* rep, Errors* errors) {
  MapReader r(top.child("replication"), "replication", errors);
  r.Get("backups", &rep->backups);
  r.Finish();
  Check(rep->backups == 0 || rep->backups == 1, errors, "replication.backups",
        "must be 0 (no replication) or 1 (one backup per shard)");
}

void ParseCompressionLinks(const YAML::Node& links, std::vector<CompressionLinkSpec>* out, Errors* errors) {
  if (!links || links.IsNull()) return;
  if (!links.IsSequence()) {
    errors->push_back("compression.links: must be a list of {regions: [a, b], push, pull}");
    return;
  }
  for (size_t i = 0; i < links.size(); ++i) {
    std::string where = "compression.links[" + std::to_string(i) + "]";
    MapReader lr(links[i], where, errors);
    CompressionLinkSpec l;
    std::vector<std::string> pair;
    lr.Get("regions", &pair);
    lr.Get("push", &l.push);
    lr.Get("pull", &l.pull);
    lr.Finish();
    if (pair.size() != 2) {
      errors->push_back(where + ".regions: must name two regions (the same one twice for within a region)");
      continue;
    }
    l.region_a = pair[0];
    l.region_b = pair[1];
    out->push_back(l);
  }
}

void ParseCompression(MapReader& top, CompressionSpec* c, Errors* errors) {
  MapReader r(top.child("compression"), "compression", errors);
  r.Get("push", &c->push);
  r.Get("pull", &c->pull);
  r.Get("error_feedback", &c->error_feedback);
  r.Get("momentum_correction", &c->momentum_correction);
  r.Get("sparsity_warmup_steps", &c->sparsity_warmup_steps);
  Check(c->sparsity_warmup_steps >= 0, errors, "compression.sparsity_warmup_steps", "must be >= 0");
  ParseCompressionLinks(r.child("links"), &c->links, errors);
  r.Finish();
}

// One wan.links entry: `regions: [a, b]` adds both directions.
void ParseWanLink(const YAML::Node& node, const std::string& where, std::vector<LinkSpec>* out, Errors* errors) {
  MapReader lr(node, where, errors);
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
  Check(Finite(l.delay_ms) && l.delay_ms >= 0 && l.delay_ms <= 60000, errors, where + ".rtt_ms",
        "delays must be in [0, 60 s]");
  Check(Finite(l.jitter_ms) && l.jitter_ms >= 0 && l.jitter_ms <= 60000, errors, where + ".jitter_ms",
        "must be in [0, 60000]");
  Check(Finite(l.bandwidth_mbit) && l.bandwidth_mbit >= 0, errors, where + ".bandwidth_mbit",
        "must be >= 0 (0: unlimited)");
  Check(Finite(l.loss) && l.loss >= 0 && l.loss < 1, errors, where + ".loss", "must be in [0, 1)");
  if (pair.empty()) {
    if (l.from.empty() || l.to.empty())
      errors->push_back(where + ": needs regions: [a, b] or from and to");
    else
      out->push_back(l);
    return;
  }
  if (pair.size() != 2 || !l.from.empty() || !l.to.empty()) {
    errors->push_back(where + ": give either regions: [a, b] (both directions) or from and to");
    return;
  }
  l.from = pair[0];
  l.to = pair[1];
  out->push_back(l);
  if (pair[0] != pair[1]) {
    std::swap(l.from, l.to);
    out->push_back(l);
  }
}

void ParseWanLinks(const YAML::Node& links, std::vector<LinkSpec>* out, Errors* errors) {
  if (!links || links.IsNull()) return;
  if (!links.IsSequence()) {
    errors->push_back("wan.links: must be a list of {regions: [a, b] | from: a, to: b, rtt_ms | delay_ms, ...}");
    return;
  }
  for (size_t i = 0; i < links.size(); ++i) ParseWanLink(links[i], "wan.links[" + std::to_string(i) + "]", out, errors);
}

void ParseWan(MapReader& top, WanSpec* w, Errors* errors) {
  MapReader r(top.child("wan"), "wan", errors);
  std::string emulation = ToString(w->emulation), congestion_control = ToString(w->congestion_control);
  r.Get("emulation", &emulation);
  r.Get("probe", &w->probe);
  r.Get("planner", &w->planner);
  r.Get("compute_ms", &w->compute_ms);
  Check(Finite(w->compute_ms) && w->compute_ms >= 0, errors, "wan.compute_ms", "must be >= 0");
  r.Get("replan_drift", &w->replan_drift);
  r.Get("congestion_control", &congestion_control);
  r.Get("replan", &w->replan);
  r.Get("replan_every_s", &w->replan_every_s);
  r.Get("replan_min_samples", &w->replan_min_samples);
  r.Get("replan_at_clock", &w->replan_at_clock);
  r.Get("replan_from", &w->replan_from);
  r.Get("replan_to", &w->replan_to);
  r.Get("replan_mbit", &w->replan_mbit);
  Check(Finite(w->replan_every_s) && w->replan_every_s >= 0, errors, "wan.replan_every_s", "must be >= 0");
  Check(w->replan_min_samples >= 1, errors, "wan.replan_min_samples", "must be >= 1");
  Check(w->replan_at_clock >= -1, errors, "wan.replan_at_clock", "must be >= 0, or -1 (off)");
  Check(Finite(w->replan_mbit) && w->replan_mbit >= 0, errors, "wan.replan_mbit", "must be >= 0");
  r.Get("planner_codecs", &w->planner_codecs);
  ParseWord(emulation, &w->emulation, errors, "wan.emulation", "must be none, proxy or netns, not '" + emulation + "'");
  Check(Finite(w->replan_drift) && w->replan_drift > 0, errors, "wan.replan_drift", "must be > 0");
  ParseWord(congestion_control, &w->congestion_control, errors, "wan.congestion_control",
            "'" + congestion_control + "': use auto, bbr, cubic or reno");
  ParseWanLinks(r.child("links"), &w->links, errors);
  r.Finish();
}

// The job file's root mapping with `overrides` applied.
StatusOr<YAML::Node> LoadRoot(const std::string& yaml_text, const std::string& source_name,
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
  return root;
}

void ParseSections(const YAML::Node& root, JobSpec* job, Errors* errors) {
  MapReader top(root, "", errors);
  top.Get("name", &job->name);
  top.Get("seed", &job->seed);
  top.Get("coordinator_region", &job->coordinator_region);
  ParseRegions(top, &job->regions, errors);
  ParseModel(top, &job->model, errors);
  ParseData(top, &job->data, errors);
  ParseOptimizer(top, &job->optimizer, errors);
  ParseTraining(top, &job->training, errors);
  ParseWire(top, &job->wire, errors);
  ParseMembership(top, &job->membership, errors);
  ParseSecurity(top, &job->security, errors);
  ParseEval(top, &job->eval, errors);
  ParseCheckpoint(top, &job->checkpoint, errors);
  ParseReplication(top, &job->replication, errors);
  ParseCompression(top, &job->compression, errors);
  ParseWan(top, &job->wan, errors);
  ParseFederated(top, &job->federated, errors);
  top.Finish();
}

}  // namespace

StatusOr<JobSpec> ParseJob(const std::string& yaml_text, const std::string& source_name,
                           const std::vector<std::string>& overrides) {
  GD_ASSIGN_OR_RETURN(YAML::Node root, LoadRoot(yaml_text, source_name, overrides));
  JobSpec job;
  Errors errors;
  ParseSections(root, &job, &errors);
  config_internal::ValidateJob(&job, &errors);
  if (!errors.empty()) {
    std::string msg = source_name + ": " + std::to_string(errors.size()) + " problem(s) in the job file:";
    for (const auto& e : errors) msg += "\n  " + e;
    return InvalidArgument(msg);
  }
  return job;
}

StatusOr<std::set<std::string>> JobFileKeys(const std::string& yaml_text) {
  GD_ASSIGN_OR_RETURN(YAML::Node root, LoadRoot(yaml_text, "job", {}));
  JobSpec job;
  std::set<std::string> keys;
  Errors errors;
  errors.keys_read = &keys;
  ParseSections(root, &job, &errors);
  return keys;
}

StatusOr<JobSpec> LoadJobFile(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open job file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  GD_ASSIGN_OR_RETURN(JobSpec job, ParseJob(ss.str(), path, overrides));
  std::error_code ec;
  if (!job.model.path.empty())
    job.model.path = std::filesystem::absolute(job.model.path, ec).lexically_normal().string();
  if (!job.data.path.empty()) job.data.path = std::filesystem::absolute(job.data.path, ec).lexically_normal().string();
  return job;
}

}  // namespace geodesic
