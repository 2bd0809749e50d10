// Coordinator: the coordinator process, one per job. A thin shell around
// CoordinatorState (coordinator/state.h): it serves the state
// machine behind a ROUTER socket, expires leases and ticks the re-planner
// every loop, and keeps the state file (CoordinatorStore) and the stats
// file. Not synchronized: it runs on the thread that calls Run(); the only
// value another thread touches is the atomic replan_requests counter (the
// ZAP handler and the connection guard run threads of their own).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "common/throttle.h"
#include "common/wait.h"
#include "coordinator/state.h"
#include "coordinator/store.h"
#include "proto/stats.pb.h"
#include "transport/connection_guard.h"
#include "transport/http_endpoint.h"
#include "transport/message.h"
#include "transport/refusal_limiter.h"
#include "transport/security.h"

namespace geodesic::coordinator {

struct CoordinatorProcessOptions {
  CoordinatorOptions coordinator;
  std::string bind = "tcp://127.0.0.1:*";
  std::string endpoint_file;  // if set, the bound endpoint is written here (atomically)
  std::string stats_file;     // if set, stats JSON is written here periodically and at exit
  // The coordinator's state is kept here (rewritten when it changes); if the
  // file exists at start-up, a restarted coordinator continues from it.
  std::string state_file;
  // Secured jobs: the coordinator's CURVE keypair; its public key is written
  // to `key_file` (if set) next to the endpoint, for members to connect with.
  transport::CurveKeyPair keys;
  std::string key_file;
  // Bumped (e.g. by a SIGUSR2 handler, `geodesic wan replan RUN_DIR`) to ask
  // for a re-plan now (jobs with wan.replan).
  const std::atomic<uint64_t>* replan_requests = nullptr;
  transport::HttpOptions http;  // /metrics, /healthz, /readyz (ready: listening)
  std::string region;           // for the metrics' labels
};

class Coordinator {
 public:
  Coordinator(CoordinatorProcessOptions options, zmq::context_t& ctx, const Clock* clock);
  // Serves until `stop` is set or the job has finished and every server left.
  Status Run(const std::atomic<bool>* stop);

 private:
  // Start-up: the secured socket's handler, the bind, the endpoint file.
  Status Listen();
  void ReceiveAll();
  // The loop's work after receiving: leases, re-planning, the state file,
  // start-up reports.
  void Step(WaitReporter* rendezvous);
  // Whether the job finished and the servers had their chance to leave.
  bool Finished(TimePoint now);
  void Handle(transport::Message& m);
  void Reply(const transport::Message& request, wire::Header reply);
  bool NoteRefusal(const transport::Message& m, const wire::ErrorReply& e);
  stats::CoordinatorStats Stats() const;
  // Publishes the stats as metrics, and writes them to the stats file.
  void WriteStats() const;

  CoordinatorProcessOptions options_;
  uint64_t seen_replan_requests_ = 0;
  bool announced_start_ = false;
  std::optional<TimePoint> finished_since_;
  const Clock* clock_;
  zmq::context_t& ctx_;
  transport::TrafficCounters counters_;
  std::unique_ptr<transport::ZapHandler> zap_;  // secured jobs: admits any CURVE client; tokens decide
  transport::ConnectionGuard guard_;            // limits the ROUTER's connections (its own thread)
  mutable transport::FdReserve fds_{4};         // for the state and stats files, whatever connections hold
  transport::Socket socket_;
  transport::RefusalLimiter refusals_;  // answers and logs of refusals, per peer and reason
  Throttle failed_reply_log_{std::chrono::seconds(1)};
  Throttle idle_report_{std::chrono::seconds(10)};  // elastic jobs: no live worker, units left
  CoordinatorState state_;
  CoordinatorStore store_;
  mutable transport::ProcessMetrics metrics_;  // published by the loop, served by its own thread
};

}  // namespace geodesic::coordinator
