#include "cluster/status_probe.h"

#include "common/files.h"
#include "common/log.h"

namespace geodesic::cluster {

StatusOr<std::pair<transport::CurveSocket, std::string>> ProbeSecurity(const JobSpec& job, const std::string& secret,
                                                                       const std::string& key_file, int64_t ttl_s) {
  if (job.security.mode != SecurityMode::kCurve) return std::pair<transport::CurveSocket, std::string>{};
  transport::CurveSocket curve;
  GD_ASSIGN_OR_RETURN(curve.keys, transport::GenerateCurveKeyPair());
  GD_ASSIGN_OR_RETURN(curve.server_key, ReadFile(key_file));
  GD_ASSIGN_OR_RETURN(std::string token,
                      transport::MintToken(secret, {.job = job.name,
                                                    .role = "client",
                                                    .id = -1,
                                                    .expiry_unix = transport::UnixNow() +
                                                                   (ttl_s > 0 ? ttl_s : job.security.token_ttl_s)}));
  return std::pair{curve, token};
}

StatusProbe::StatusProbe(zmq::context_t& ctx, const JobSpec& job, const std::string& endpoint,
                         const transport::CurveSocket& curve, std::string token)
    : socket_(ctx, zmq::socket_type::dealer,
              transport::SocketOptions{.job = job.name,
                                       .role = wire::CLIENT,
                                       .id = 0,
                                       .max_message_bytes = job.wire.max_message_bytes,
                                       .curve = curve},
              &counters_),
      token_(std::move(token)) {
  Status s = socket_.Connect(endpoint);
  if (!s.ok()) GD_LOG(WARNING) << "status probe: " << s;
}

std::optional<wire::StatusReply> StatusProbe::Poll() {
  std::optional<wire::StatusReply> latest;
  while (auto in = socket_.Receive()) {
    if (in->status.ok() && in->message.header.has_status_reply()) {
      latest = in->message.header.status_reply();
      outstanding_ = false;
    } else if (in->status.ok() && in->message.header.has_error_reply()) {
      refusal_ = in->message.header.error_reply();
      outstanding_ = false;
    }
  }
  auto now = std::chrono::steady_clock::now();
  // One request every half second at most; a lost one is re-asked after 1 s.
  if ((!outstanding_ && now - sent_ > std::chrono::milliseconds(500)) || now - sent_ > std::chrono::seconds(1)) {
    wire::Header h;
    h.mutable_status_request()->set_token(token_);
    if (socket_.Send(h, {}).ok()) {
      outstanding_ = true;
      sent_ = now;
    }
  }
  return latest;
}

}  // namespace geodesic::cluster
