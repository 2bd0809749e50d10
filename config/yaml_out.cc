// JobSpec -> YAML that ParseJob reads back to the same spec: one function
// per section of the job file.
#include <yaml-cpp/yaml.h>

#include "config/job.h"

namespace geodesic {
namespace {

template <typename T>
void Put(YAML::Emitter& out, const char* key, const T& value) {
  out << YAML::Key << key << YAML::Value << value;
}

template <JobEnum E>
void Put(YAML::Emitter& out, const char* key, const E& value) {
  out << YAML::Key << key << YAML::Value << ToString(value);
}

template <typename T>
void PutFlow(YAML::Emitter& out, const char* key, const std::vector<T>& list) {
  out << YAML::Key << key << YAML::Value << YAML::Flow << list;
}

void BeginSection(YAML::Emitter& out, const char* key) { out << YAML::Key << key << YAML::Value << YAML::BeginMap; }

void EmitRegions(YAML::Emitter& out, const std::vector<RegionSpec>& regions) {
  BeginSection(out, "regions");
  for (const auto& r : regions) {
    BeginSection(out, r.name.c_str());
    Put(out, "host", r.host);
    Put(out, "servers", r.servers);
    Put(out, "workers", r.workers);
    if (r.max_workers != r.workers) Put(out, "max_workers", r.max_workers);
    if (r.aggregator_auto)
      Put(out, "aggregator", std::string("auto"));
    else if (r.aggregator)
      Put(out, "aggregator", true);
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
}

void EmitModel(YAML::Emitter& out, const ModelSpec& m) {
  BeginSection(out, "model");
  Put(out, "name", m.name);
  PutFlow(out, "mlp_hidden", m.mlp_hidden);
  Put(out, "synthetic_params", m.synthetic_params);
  if (!m.path.empty()) Put(out, "path", m.path);
  out << YAML::EndMap;
}

void EmitData(YAML::Emitter& out, const DataSpec& d) {
  BeginSection(out, "data");
  Put(out, "dataset", d.dataset);
  Put(out, "path", d.path);
  Put(out, "partition", ToString(d.partition));
  Put(out, "batch_size", d.batch_size);
  if (d.train_samples > 0) Put(out, "train_samples", d.train_samples);
  if (d.dataset == DatasetKind::kTokens) {
    Put(out, "context", d.context);
    Put(out, "token_bytes", d.token_bytes);
    Put(out, "vocab", d.vocab);
  }
  if (!d.mean.empty()) {
    PutFlow(out, "mean", d.mean);
    PutFlow(out, "std", d.std);
  }
  out << YAML::Key << "augment" << YAML::Value << YAML::Flow << YAML::BeginMap;
  Put(out, "crop", d.augment.crop);
  Put(out, "flip", d.augment.flip);
  out << YAML::EndMap;
  out << YAML::EndMap;
}

void EmitOptimizer(YAML::Emitter& out, const OptimizerSpec& o) {
  BeginSection(out, "optimizer");
  Put(out, "name", o.name);
  Put(out, "lr", o.lr);
  Put(out, "momentum", o.momentum);
  Put(out, "nesterov", o.nesterov);
  Put(out, "weight_decay", o.weight_decay);
  Put(out, "beta1", o.beta1);
  Put(out, "beta2", o.beta2);
  Put(out, "eps", o.eps);
  Put(out, "schedule", o.schedule);
  Put(out, "warmup", o.warmup);
  if (!o.milestones.empty()) PutFlow(out, "milestones", o.milestones);
  Put(out, "gamma", o.gamma);
  Put(out, "clip_norm", o.clip_norm);
  out << YAML::EndMap;
}

void EmitTraining(YAML::Emitter& out, const TrainingSpec& t) {
  BeginSection(out, "training");
  Put(out, "epochs", t.epochs);
  Put(out, "steps", t.steps);
  Put(out, "staleness_bound", t.staleness_bound);
  Put(out, "staleness_scaling", t.staleness_scaling);
  Put(out, "device", t.device);
  Put(out, "threads", t.threads);
  Put(out, "shard_threads", t.shard_threads);
  Put(out, "prefetch", t.prefetch);
  Put(out, "pipeline_depth", t.pipeline_depth);
  Put(out, "local_steps", t.local_steps);
  Put(out, "overlap_rounds", t.overlap_rounds);
  Put(out, "overlap_steps", t.overlap_steps);
  Put(out, "fragments", t.fragments);
  Put(out, "outer_lr", t.outer_lr);
  Put(out, "outer_momentum", t.outer_momentum);
  Put(out, "outer_nesterov", t.outer_nesterov);
  out << YAML::EndMap;
}

void EmitWire(YAML::Emitter& out, const WireSpec& w) {
  BeginSection(out, "wire");
  Put(out, "chunk_bytes", w.chunk_bytes);
  Put(out, "message_bytes", w.message_bytes);
  Put(out, "max_message_bytes", w.max_message_bytes);
  out << YAML::EndMap;
}

void EmitMembership(YAML::Emitter& out, const MembershipSpec& m) {
  BeginSection(out, "membership");
  Put(out, "heartbeat_ms", m.heartbeat_ms);
  Put(out, "lease_ms", m.lease_ms);
  Put(out, "rendezvous_timeout_s", m.rendezvous_timeout_s);
  Put(out, "rpc_timeout_s", m.rpc_timeout_s);
  Put(out, "report_after_s", m.report_after_s);
  if (m.elastic) {
    Put(out, "elastic", m.elastic);
    Put(out, "units_ahead", m.units_ahead);
  }
  out << YAML::EndMap;
}

void EmitCompression(YAML::Emitter& out, const CompressionSpec& c) {
  BeginSection(out, "compression");
  Put(out, "push", c.push);
  Put(out, "pull", c.pull);
  Put(out, "error_feedback", c.error_feedback);
  Put(out, "momentum_correction", c.momentum_correction);
  Put(out, "sparsity_warmup_steps", c.sparsity_warmup_steps);
  out << YAML::Key << "links" << YAML::Value << YAML::BeginSeq;
  for (const auto& l : c.links) {
    out << YAML::BeginMap;
    PutFlow(out, "regions", std::vector<std::string>{l.region_a, l.region_b});
    if (!l.push.empty()) Put(out, "push", l.push);
    if (!l.pull.empty()) Put(out, "pull", l.pull);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
}

void EmitWanLinks(YAML::Emitter& out, const std::vector<LinkSpec>& links) {
  out << YAML::Key << "links" << YAML::Value << YAML::BeginSeq;
  for (const auto& l : links) {
    out << YAML::BeginMap;
    Put(out, "from", l.from);
    Put(out, "to", l.to);
    Put(out, "delay_ms", l.delay_ms);
    Put(out, "jitter_ms", l.jitter_ms);
    Put(out, "bandwidth_mbit", l.bandwidth_mbit);
    Put(out, "loss", l.loss);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

void EmitWan(YAML::Emitter& out, const WanSpec& w) {
  BeginSection(out, "wan");
  Put(out, "emulation", w.emulation);
  Put(out, "probe", w.probe);
  Put(out, "planner", w.planner);
  Put(out, "compute_ms", w.compute_ms);
  Put(out, "replan_drift", w.replan_drift);
  Put(out, "congestion_control", w.congestion_control);
  Put(out, "replan", w.replan);
  Put(out, "replan_every_s", w.replan_every_s);
  Put(out, "replan_min_samples", w.replan_min_samples);
  Put(out, "replan_at_clock", w.replan_at_clock);
  Put(out, "replan_from", w.replan_from);
  Put(out, "replan_to", w.replan_to);
  Put(out, "replan_mbit", w.replan_mbit);
  PutFlow(out, "planner_codecs", w.planner_codecs);
  EmitWanLinks(out, w.links);
  out << YAML::EndMap;
}

void EmitCheckpoint(YAML::Emitter& out, const CheckpointSpec& c) {
  BeginSection(out, "checkpoint");
  Put(out, "every_clocks", c.every_clocks);
  Put(out, "keep", c.keep);
  Put(out, "on_stop", c.on_stop);
  out << YAML::EndMap;
}

void EmitReplication(YAML::Emitter& out, const ReplicationSpec& r) {
  BeginSection(out, "replication");
  Put(out, "backups", r.backups);
  out << YAML::EndMap;
}

void EmitSecurity(YAML::Emitter& out, const SecuritySpec& s) {
  BeginSection(out, "security");
  Put(out, "mode", s.mode);
  Put(out, "secret_file", s.secret_file);
  Put(out, "token_ttl_s", s.token_ttl_s);
  out << YAML::EndMap;
}

void EmitEval(YAML::Emitter& out, const EvalSpec& e) {
  BeginSection(out, "eval");
  Put(out, "snapshot_every_s", e.snapshot_every_s);
  Put(out, "target_accuracy", e.target_accuracy);
  if (e.target_loss > 0) Put(out, "target_loss", e.target_loss);
  Put(out, "test_samples", e.test_samples);
  Put(out, "curve_points", e.curve_points);
  Put(out, "buffer_samples", e.buffer_samples);
  Put(out, "batch", e.batch);
  out << YAML::EndMap;
}

}  // namespace

void EmitFederated(YAML::Emitter& out, const FederatedSpec& f) {
  BeginSection(out, "federated");
  Put(out, "clients", f.clients);
  Put(out, "per_round", f.per_round);
  Put(out, "weighted_selection", f.weighted_selection);
  Put(out, "rounds", f.rounds);
  Put(out, "local_epochs", f.local_epochs);
  Put(out, "local_steps", f.local_steps);
  Put(out, "local_lr", f.local_lr);
  Put(out, "local_momentum", f.local_momentum);
  Put(out, "prox_mu", f.prox_mu);
  Put(out, "availability", f.availability);
  Put(out, "dropout", f.dropout);
  Put(out, "over_selection", f.over_selection);
  Put(out, "deadline_s", f.deadline_s);
  Put(out, "device_step_s", f.device_step_s);
  Put(out, "device_compute_sigma", f.device_compute_sigma);
  Put(out, "device_slow_fraction", f.device_slow_fraction);
  Put(out, "device_slow_factor", f.device_slow_factor);
  Put(out, "device_uplink_mbit", f.device_uplink_mbit);
  Put(out, "device_uplink_sigma", f.device_uplink_sigma);
  Put(out, "device_downlink_mbit", f.device_downlink_mbit);
  Put(out, "device_downlink_sigma", f.device_downlink_sigma);
  Put(out, "device_latency_ms", f.device_latency_ms);
  Put(out, "device_latency_sigma", f.device_latency_sigma);
  Put(out, "strategy", f.strategy);
  Put(out, "beta1", f.beta1);
  Put(out, "beta2", f.beta2);
  Put(out, "tau", f.tau);
  Put(out, "concurrency", f.concurrency);
  Put(out, "max_staleness", f.max_staleness);
  Put(out, "uplink_codec", f.uplink_codec);
  Put(out, "slow_uplink_codec", f.slow_uplink_codec);
  Put(out, "slow_uplink_mbit", f.slow_uplink_mbit);
  Put(out, "uplink_error_feedback", f.uplink_error_feedback);
  Put(out, "max_update_norm", f.max_update_norm);
  Put(out, "gateway", f.gateway);
  Put(out, "gateway_timeout_s", f.gateway_timeout_s);
  Put(out, "dp_clip_norm", f.dp_clip_norm);
  Put(out, "dp_noise_multiplier", f.dp_noise_multiplier);
  Put(out, "dp_delta", f.dp_delta);
  Put(out, "eval_every", f.eval_every);
  Put(out, "client_eval_samples", f.client_eval_samples);
  out << YAML::EndMap;
}

std::string JobToYaml(const JobSpec& job) {
  YAML::Emitter out;
  // Doubles round-trip exactly (only sections from optimizer on hold any).
  out.SetDoublePrecision(17);
  out << YAML::BeginMap;
  Put(out, "name", job.name);
  Put(out, "seed", job.seed);
  Put(out, "coordinator_region", job.coordinator_region);
  EmitRegions(out, job.regions);
  EmitModel(out, job.model);
  EmitData(out, job.data);
  EmitOptimizer(out, job.optimizer);
  EmitTraining(out, job.training);
  EmitWire(out, job.wire);
  EmitMembership(out, job.membership);
  EmitCompression(out, job.compression);
  EmitWan(out, job.wan);
  EmitCheckpoint(out, job.checkpoint);
  EmitReplication(out, job.replication);
  EmitSecurity(out, job.security);
  EmitEval(out, job.eval);
  EmitFederated(out, job.federated);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace geodesic
