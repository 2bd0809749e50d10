#include "worker/process_options.h"

#include <algorithm>
#include <memory>

#include "common/draws.h"

namespace geodesic::worker {

cluster::MemberOptions MemberOptionsFor(const JobSpec& job, wire::Role role, int id, const std::string& coordinator,
                                        const wire::ModelSignature& sig,
                                        const transport::MemberCredentials& credentials) {
  cluster::MemberOptions mo;
  mo.job = job.name;
  mo.role = role;
  mo.id = id;
  mo.coordinator = coordinator;
  mo.region = role == wire::WORKER ? job.RegionOfWorker(id).name : job.CoordinatorRegion().name;
  mo.model = ShardSignature(job, sig);
  mo.timing = job.membership;
  mo.max_message_bytes = job.wire.max_message_bytes;
  if (credentials.enabled()) {
    mo.curve = transport::CurveSocket{.keys = credentials.keys, .server_key = credentials.coordinator_key};
    mo.token = credentials.token;
  }
  return mo;
}

wire::ModelSignature ShardSignature(const JobSpec& job, const wire::ModelSignature& model) {
  wire::ModelSignature sig = model;
  sig.set_num_params(static_cast<uint64_t>(job.ShardValues(static_cast<int64_t>(model.num_params()))));
  // Another layout: a SCAFFOLD job's shards are not a plain model's.
  if (sig.num_params() != model.num_params()) sig.set_layout_digest(Mix64(model.layout_digest() ^ 0x5343414646ull));
  return sig;
}

PsClientOptions PsOptionsFor(const JobSpec& job, wire::Role role, int id) {
  PsClientOptions po;
  // A worker pushes with its link's codec; a worker whose region has an
  // aggregator pushes exact values to it over the region's own network, and
  // the aggregator encodes the region's sum with the codec of its link to
  // each shard's region, keeping the error feedback (docs/wan.md).
  if (role == wire::WORKER || role == wire::AGGREGATOR) {
    const RegionSpec& mine = role == wire::WORKER ? job.RegionOfWorker(id) : job.regions[static_cast<size_t>(id)];
    const bool via_aggregator = role == wire::WORKER && mine.aggregator;
    for (const auto& r : job.regions)
      po.push_codecs[r.name] = via_aggregator ? "fp32" : job.PushCodec(mine.name, r.name);
  }
  po.error_feedback = job.compression.error_feedback;
  if (job.compression.momentum_correction) po.local_momentum = job.optimizer.momentum;
  po.sparsity_warmup_steps = job.compression.sparsity_warmup_steps;
  po.seed = job.seed;
  po.job = job.name;
  po.role = role;
  po.id = id;
  po.wire = job.wire;
  po.timing = job.membership;
  // A shard silent for a lease has probably been restarted (its requests
  // in flight died with it): ask again then.
  po.retry_after_s = std::max(1.0, job.membership.lease_ms / 1000.0);
  return po;
}

std::function<uint64_t(uint64_t, std::vector<wire::ServerInfo>*)> ServersView(const cluster::MemberClient& member) {
  return [&member](uint64_t seen, std::vector<wire::ServerInfo>* out) {
    if (member.servers_epoch() <= seen) return seen;
    cluster::MembershipView v = member.view();
    *out = std::move(v.servers);
    return v.servers_epoch;
  };
}

std::function<bool()> AggregatorGone(const cluster::MemberClient& member, int region) {
  auto seen = std::make_shared<uint64_t>(0);
  return [&member, region, seen] {
    const uint64_t replies = member.replies();
    if (replies == *seen) return false;
    *seen = replies;
    const std::vector<int> down = member.view().aggregators_down;
    return std::find(down.begin(), down.end(), region) != down.end();
  };
}

}  // namespace geodesic::worker
