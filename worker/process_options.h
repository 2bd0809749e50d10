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

PsClientOptions PsOptionsFor(const JobSpec& job, wire::Role role, int id);

// Replicated jobs: shard endpoints follow the coordinator's view. `member`
// must outlive the returned function.
std::function<uint64_t(uint64_t, std::vector<wire::ServerInfo>*)> ServersView(const cluster::MemberClient& member);

}  // namespace geodesic::worker
