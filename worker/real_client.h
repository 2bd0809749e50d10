// A real federated client (`geodesic client`; docs/federated.md "Real
// clients"): one process that trains one client id of a federated job with
// federated.gateway. It asks the coordinator (with its `client` token in
// secured jobs, which admits its CURVE key) where executor k mod E's client
// gateway listens, says hello there, and answers each ClientTask with the
// update the executor would have computed for client k: the same partition
// (from the job file and the dataset), the same batch order and local
// optimizer (worker/client_executor.h). It leaves after `max_tasks` tasks
// or `leave_after_s` (saying ClientBye), when `stop` is set, or when the job
// has finished.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <zmq.hpp>

#include "common/status.h"
#include "config/job.h"
#include "transport/security.h"

namespace geodesic::worker {

struct RealClientOptions {
  JobSpec job;
  std::string coordinator;
  transport::MemberCredentials credentials;  // secured jobs: keypair, coordinator key, `client` token
  int64_t client = 0;
  int64_t max_tasks = 0;        // > 0: leave after this many tasks
  double leave_after_s = 0;     // > 0: leave after this long
  double join_timeout_s = 120;  // give up if no gateway is listed by then
  // Tests of the gateway's checks: send a bad update instead of the real
  // one: "shape" (one value short), "nan", "norm" (scaled far past any
  // bound), "samples" (claims ten times its round's samples), "huge" (every
  // value 1e30), "lowest" (every value -FLT_MAX); or "silent": attach and
  // never answer a task. Empty: honest.
  std::string misbehave;
};

// What the client did, for its exit line and tests.
struct RealClientReport {
  int64_t tasks = 0;          // updates sent
  int64_t refused = 0;        // of them, refused by the gateway
  bool job_finished = false;  // the coordinator said so, or the executor said bye (its rounds are done)
};

StatusOr<RealClientReport> RunRealClient(const RealClientOptions& options, zmq::context_t& ctx,
                                         const std::atomic<bool>* stop);

}  // namespace geodesic::worker
