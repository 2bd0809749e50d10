// How a worker or evaluator process turns its job into the options of its
// membership client and its PsClient. Shared by worker.cc and evaluator.cc
// so both roles join and reach the shards the same way. Torch-free; plain
// functions, thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cluster/member_client.h"
#include "config/job.h"
#include "transport/security.h"
#include "worker/ps_client.h"

namespace geodesic::worker {

cluster::MemberOptions MemberOptionsFor(const JobSpec& job, wire::Role role, int id, const std::string& coordinator,
                                        const wire::ModelSignature& sig,
                                        const transport::MemberCredentials& credentials);

// What the shards hold for a job of this model (JobSpec::ShardValues):
// the model's signature, or under SCAFFOLD twice its values and another
// layout digest, so that the coordinator refuses a process of the other kind.
wire::ModelSignature ShardSignature(const JobSpec& job, const wire::ModelSignature& model);

PsClientOptions PsOptionsFor(const JobSpec& job, wire::Role role, int id);

// Whether region `region`'s aggregator is gone (the coordinator lists it in
// HeartbeatReply.aggregators_down); looks only when a heartbeat reply came
// in since the last call. `member` must outlive the returned function.
std::function<bool()> AggregatorGone(const cluster::MemberClient& member, int region);

// Replicated jobs: shard endpoints follow the coordinator's view. `member`
// must outlive the returned function.
std::function<uint64_t(uint64_t, std::vector<wire::ServerInfo>*)> ServersView(const cluster::MemberClient& member);

}  // namespace geodesic::worker
