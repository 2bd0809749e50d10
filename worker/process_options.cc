#include "worker/process_options.h"

#include <algorithm>

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
  mo.model = sig;
  mo.timing = job.membership;
  mo.max_message_bytes = job.wire.max_message_bytes;
  if (credentials.enabled()) {
    mo.curve = transport::CurveSocket{.keys = credentials.keys, .server_key = credentials.coordinator_key};
    mo.token = credentials.token;
  }
  return mo;
}

PsClientOptions PsOptionsFor(const JobSpec& job, wire::Role role, int id) {
  PsClientOptions po;
  if (role == wire::WORKER) {
    const std::string& mine = job.RegionOfWorker(id).name;
    for (const auto& r : job.regions) po.push_codecs[r.name] = job.PushCodec(mine, r.name);
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

}  // namespace geodesic::worker
