#include "cluster/client_gateway.h"

#include <algorithm>
#include <cmath>

#include "cluster/privacy.h"
#include "common/log.h"

namespace geodesic::cluster {

Status CheckClientUpdate(const wire::ClientUpdate& update, const float* values, size_t payload_bytes,
                         int64_t num_params, int64_t max_samples, double max_norm) {
  const auto want = static_cast<size_t>(num_params) * sizeof(float);
  if (payload_bytes != want)
    return InvalidArgument("an update of " + std::to_string(payload_bytes) + " bytes; the model has " +
                           std::to_string(num_params) + " parameters (" + std::to_string(want) + " bytes)");
  for (int64_t j = 0; j < num_params; ++j)
    if (!std::isfinite(values[j])) return InvalidArgument("value " + std::to_string(j) + " is not finite");
  const double norm = L2Norm(values, static_cast<size_t>(num_params));
  if (max_norm > 0 && norm > max_norm)
    return InvalidArgument("L2 norm " + std::to_string(norm) + " is over federated.max_update_norm " +
                           std::to_string(max_norm));
  if (update.samples() < 1 || update.samples() > max_samples)
    return InvalidArgument("claims " + std::to_string(update.samples()) + " samples; its round trains on " +
                           std::to_string(max_samples));
  return Status::Ok();
}

ClientGateway::ClientGateway(zmq::context_t& ctx, GatewayOptions options, transport::TrafficCounters* counters,
                             const Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      ctx_(ctx),
      socket_(ctx, zmq::socket_type::router,
              transport::SocketOptions{.job = options_.job,
                                       .role = wire::WORKER,
                                       .id = options_.executor,
                                       .max_message_bytes = options_.max_message_bytes,
                                       .send_timeout_ms = transport::kNeverBlock,
                                       .curve = transport::CurveSocket{.keys = options_.keys, .server_key = {}}},
              counters) {}

ClientGateway::~ClientGateway() {
  // Tells every attached client that this executor is done, so that it
  // leaves now rather than when the coordinator stops answering.
  socket_.raw().set(zmq::sockopt::linger, 500);
  for (const auto& [client, peer] : attached_) {
    wire::Header h;
    h.mutable_client_bye()->set_client(client);
    (void)socket_.Send(std::move(h), {}, peer.routing_id);
  }
  if (zap_) zap_->Stop();
}

Status ClientGateway::Start() {
  if (!options_.keys.secret_key.empty()) {
    // Every CURVE client completes the handshake (a key refused by ZAP is
    // never retried by ZeroMQ, and the coordinator may list a client's key
    // a heartbeat after the client connects); MayClaim then decides.
    zap_ = std::make_unique<transport::ZapHandler>(ctx_, /*admit_any=*/true);
    GD_RETURN_IF_ERROR(zap_->Start());
    GD_RETURN_IF_ERROR(zap_->Watch(socket_.raw()));
  }
  return socket_.Bind(options_.bind);
}

void ClientGateway::Authorize(const wire::HeartbeatReply& reply) {
  std::map<std::string, int> ids;
  for (int i = 0; i < reply.authorized_keys_size() && i < reply.authorized_ids_size(); ++i)
    ids[reply.authorized_keys(i)] = reply.authorized_ids(i);
  std::lock_guard<std::mutex> lock(mu_);
  key_ids_ = std::move(ids);
}

void ClientGateway::Poll() {
  for (int i = 0; i < 256; ++i) {  // bounded: a flood cannot hold the round
    auto in = socket_.Receive();
    if (!in) return;
    if (!in->status.ok()) {
      Refuse(in->message.peer, in->message.header, in->refusal, in->status);
      continue;
    }
    Handle(in->message);
  }
}

void ClientGateway::Handle(transport::Message& m) {
  switch (m.header.body_case()) {
    case wire::Header::kClientHello:
      return Hello(m);
    case wire::Header::kClientUpdate:
      return Update(m);
    case wire::Header::kClientBye: {
      auto it = attached_.find(m.header.client_bye().client());
      if (it != attached_.end() && it->second.routing_id == m.peer) attached_.erase(it);
      return;
    }
    default:
      Refuse(m.peer, m.header, wire::REFUSAL_UNSUPPORTED_TYPE,
             InvalidArgument("a client gateway does not serve " + transport::BodyName(m.header)));
  }
}

Status ClientGateway::MayClaim(const std::string& key, int64_t client) const {
  if (client < 0 || client >= options_.clients)
    return InvalidArgument("client " + std::to_string(client) + " is not in the population of " +
                           std::to_string(options_.clients));
  if (client % options_.executors != options_.executor)
    return InvalidArgument("client " + std::to_string(client) + " is served by executor " +
                           std::to_string(client % options_.executors) + ", this is executor " +
                           std::to_string(options_.executor));
  if (!zap_) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = key_ids_.find(key);
  if (it == key_ids_.end())
    return Unauthenticated(
        "this connection's CURVE key is not an admitted client's (yet: the coordinator lists a "
        "key a heartbeat after the client's status request)");
  if (it->second >= 0 && it->second != client)
    return PermissionDenied("this connection's token is for client " + std::to_string(it->second));
  return Status::Ok();
}

void ClientGateway::Hello(transport::Message& m) {
  const int64_t client = m.header.client_hello().client();
  if (Status s = MayClaim(m.peer_key, client); !s.ok()) {
    ++refused_hellos_;
    return Refuse(m.peer, m.header,
                  s.code() == Code::kUnauthenticated ? wire::REFUSAL_UNAUTHORIZED : wire::REFUSAL_NOT_YOUR_CLIENT, s);
  }
  Peer& p = attached_[client];
  if (p.routing_id != m.peer) p = Peer{.routing_id = m.peer};  // a new process for this id
}

void ClientGateway::Update(transport::Message& m) {
  const wire::ClientUpdate& u = m.header.client_update();
  auto it = attached_.find(u.client());
  // Only the connection the task went to, for the round it asked.
  if (it == attached_.end() || it->second.routing_id != m.peer || it->second.asked != u.round() || m.frames.size() != 1)
    return;
  RealUpdate r;
  r.info = u;
  r.payload_bytes = m.frames[0].size();
  if (r.payload_bytes == static_cast<size_t>(options_.num_params) * sizeof(float)) {  // else refused in Await
    r.delta.resize(static_cast<size_t>(options_.num_params));
    std::copy_n(static_cast<const char*>(m.frames[0].data()), r.payload_bytes, reinterpret_cast<char*>(r.delta.data()));
  }
  it->second.asked = -1;
  arrived_[u.client()] = std::move(r);
}

bool ClientGateway::Ask(int64_t client, int64_t round, const float* global) {
  auto it = attached_.find(client);
  if (it == attached_.end()) return false;
  arrived_.erase(client);
  wire::Header h;
  wire::ClientTask* t = h.mutable_client_task();
  t->set_client(client);
  t->set_round(round);
  t->set_num_params(static_cast<uint64_t>(options_.num_params));
  t->set_partition_digest(options_.partition_digest);
  h.set_payload_frames(1);
  const size_t bytes = static_cast<size_t>(options_.num_params) * sizeof(float);
  if (!socket_.Send(std::move(h), {transport::CopyPayload(global, bytes)}, it->second.routing_id).ok()) {
    attached_.erase(it);
    return false;
  }
  it->second.asked = round;
  return true;
}

StatusOr<RealUpdate> ClientGateway::Await(int64_t client, int64_t round, TimePoint deadline, int64_t max_samples,
                                          double max_norm) {
  for (;;) {
    Poll();
    if (auto got = arrived_.find(client); got != arrived_.end()) {
      RealUpdate r = std::move(got->second);
      arrived_.erase(got);
      Status s = CheckClientUpdate(r.info, r.delta.data(), r.payload_bytes, options_.num_params, max_samples, max_norm);
      if (!s.ok()) {
        if (auto it = attached_.find(client); it != attached_.end()) {
          wire::Header h;
          h.mutable_client_update()->CopyFrom(r.info);
          Refuse(it->second.routing_id, h, wire::REFUSAL_BAD_UPDATE, s);
        }
        return s;
      }
      return r;
    }
    auto it = attached_.find(client);
    if (it == attached_.end() || it->second.asked != round)
      return Unavailable("client " + std::to_string(client) + " left before its update for round " +
                         std::to_string(round));
    const TimePoint now = clock_->Now();
    if (now >= deadline) {
      attached_.erase(it);
      return Unavailable("client " + std::to_string(client) + " sent no update for round " + std::to_string(round) +
                         " by the deadline (federated.gateway_timeout_s); detached");
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    socket_.WaitReadable(static_cast<int>(std::clamp<int64_t>(left, 1, 50)));
  }
}

void ClientGateway::Refuse(const std::string& routing_id, const wire::Header& request, wire::Refusal reason,
                           const Status& why) {
  uint64_t skipped = 0;
  if (log_.Due(clock_->Now(), &skipped))
    GD_LOG(WARNING) << "client gateway refused " << transport::BodyName(request) << " ("
                    << transport::RefusalName(reason) << "): " << why.message()
                    << (skipped ? " (" + std::to_string(skipped) + " more not logged)" : "");
  if (routing_id.empty()) return;
  wire::Header reply;
  reply.set_request_id(request.request_id());
  reply.mutable_error_reply()->set_code(transport::ToWire(why.code()));
  reply.mutable_error_reply()->set_message(why.message());
  reply.mutable_error_reply()->set_reason(reason);
  (void)socket_.Send(std::move(reply), {}, routing_id);
}

}  // namespace geodesic::cluster
