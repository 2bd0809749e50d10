// A client of the coordinator's status service: a DEALER that asks for
// StatusReply at most twice a second and hands back the newest answer. Used
// by the launcher's live view and by `geodesic status`. Secured jobs: it
// connects as a CURVE client and sends a `client` join token. Not
// thread-safe; one owner polls it.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <zmq.hpp>

#include "common/status.h"
#include "config/job.h"
#include "transport/message.h"
#include "transport/security.h"

namespace geodesic::cluster {

// A status client's CURVE settings and `client` token in a secured job
// (nothing in a plaintext one); the token lives `ttl_s` (0: the job's TTL).
StatusOr<std::pair<transport::CurveSocket, std::string>> ProbeSecurity(const JobSpec& job, const std::string& secret,
                                                                       const std::string& key_file, int64_t ttl_s = 0);

class StatusProbe {
 public:
  StatusProbe(zmq::context_t& ctx, const JobSpec& job, const std::string& endpoint,
              const transport::CurveSocket& curve = {}, std::string token = "");
  // Sends a request if none is outstanding and returns the newest reply, if any.
  std::optional<wire::StatusReply> Poll();
  // The coordinator's latest refusal of a request (a bad token), if any.
  const std::optional<wire::ErrorReply>& refusal() const { return refusal_; }
  bool Wait(int ms) { return socket_.WaitReadable(ms); }

 private:
  transport::TrafficCounters counters_;
  transport::Socket socket_;
  std::string token_;
  std::optional<wire::ErrorReply> refusal_;
  bool outstanding_ = false;
  std::chrono::steady_clock::time_point sent_{};
};

}  // namespace geodesic::cluster
