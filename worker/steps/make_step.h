// MakeStep: the one place that reads which kind of job a worker runs. It
// loads the worker's data (a missing dataset fails here, before the job is
// joined) and builds its model, then picks
//   the strategy (worker/step.h): FederatedStep for federated jobs,
//     LocalSgdStep for training.local_steps > 1, SgdStep otherwise;
//   its minibatches (worker/minibatches.h): the elastic gate's data units,
//     SyntheticGradients for the synthetic model, PartitionBatches otherwise;
//   the gate (worker/gate.h): ElasticUnits (membership.elastic),
//     MigrationGate (wan.replan) or OpenGate;
// and sets env.clocks and env.total_steps. Torch-free header.
#pragma once

#include <memory>
#include <string>
#include <zmq.hpp>

#include "common/status.h"
#include "transport/message.h"
#include "transport/security.h"
#include "worker/gate.h"
#include "worker/step.h"

namespace geodesic::worker {

// What the process lends a strategy: its ZeroMQ context and byte counters
// (both must outlive the strategy) and, for a federated.gateway, where it
// listens (empty: the worker's region host, any port) and its keypair.
struct StepPlace {
  zmq::context_t* ctx = nullptr;
  transport::TrafficCounters* traffic = nullptr;
  std::string gateway_bind;
  transport::CurveKeyPair keys;
};

struct StepParts {
  std::unique_ptr<StepStrategy> step;
  std::shared_ptr<StepGate> gate;  // shared: an elastic gate is also the strategy's minibatches
};

StatusOr<StepParts> MakeStep(StepEnv& env, const StepPlace& place);

}  // namespace geodesic::worker
