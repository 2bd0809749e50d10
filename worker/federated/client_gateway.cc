#include "worker/federated/client_gateway.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/log.h"
#include "common/wire_limits.h"
#include "worker/federated/privacy.h"

namespace geodesic::federated {
namespace {

// Connections (and keys) whose client id a gateway remembers; past this,
// those no longer attached are forgotten.
constexpr size_t kMaxRemembered = 4096;

std::string Num(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

// The first value whose magnitude is over `max_value`, or -1.
int64_t FirstTooLarge(const float* values, int64_t n, float max_value) {
  for (int64_t j = 0; j < n; ++j)
    if (std::fabs(values[j]) > max_value) return j;
  return -1;
}

// Forgets the entries of `ids` whose connection or key is not `still`'s.
template <typename Still>
void Prune(std::unordered_map<std::string, int64_t>& ids, Still still) {
  if (ids.size() < kMaxRemembered) return;
  std::erase_if(ids, [&](const auto& e) { return !still(e.first, e.second); });
  if (ids.size() >= kMaxRemembered) ids.clear();  // every one still attached: forget rather than grow
}

}  // namespace

float MaxUpdateValue(int executors) { return kMaxValueMagnitude / (2.0f * static_cast<float>(std::max(1, executors))); }

Status CheckClientUpdate(const wire::ClientUpdate& update, const float* values, size_t payload_bytes,
                         const UpdateLimits& limits) {
  const int64_t n = limits.num_params;
  const auto want = static_cast<size_t>(n) * sizeof(float);
  if (payload_bytes != want)
    return InvalidArgument("an update of " + std::to_string(payload_bytes) + " bytes; the model has " +
                           std::to_string(n) + " parameters (" + std::to_string(want) + " bytes)");
  for (int64_t j = 0; j < n; ++j)
    if (!std::isfinite(values[j])) return InvalidArgument("value " + std::to_string(j) + " is not finite");
  if (const int64_t j = FirstTooLarge(values, n, limits.max_value); j >= 0)
    return OutOfRange("value " + std::to_string(j) + " is " + Num(values[j]) + ", beyond the " + Num(limits.max_value) +
                      " an update may carry (half the shards' limit over the executors; docs/federated.md)");
  const double norm = L2Norm(values, static_cast<size_t>(n));
  if (limits.max_norm > 0 && norm > limits.max_norm)
    return InvalidArgument("L2 norm " + std::to_string(norm) + " is over federated.max_update_norm " +
                           std::to_string(limits.max_norm));
  if (update.samples() < 1 || update.samples() > limits.max_samples)
    return InvalidArgument("claims " + std::to_string(update.samples()) + " samples; its round trains on " +
                           std::to_string(limits.max_samples));
  return Status::Ok();
}

wire::Refusal UpdateRefusal(const Status& why) {
  return why.code() == Code::kOutOfRange ? wire::REFUSAL_VALUE_TOO_LARGE : wire::REFUSAL_BAD_UPDATE;
}

ClientGateway::ClientGateway(zmq::context_t& ctx, GatewayOptions options, transport::TrafficCounters* counters,
                             const Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      ctx_(ctx),
      socket_(ctx, zmq::socket_type::router,
              transport::SocketOptions{
                  .job = options_.job,
                  .role = wire::WORKER,
                  .id = options_.executor,
                  // One update and its header: a larger message closes its connection unread.
                  .max_message_bytes = options_.num_params * static_cast<int64_t>(sizeof(float)) + kHeaderRoom,
                  .send_timeout_ms = transport::kNeverBlock,
                  .high_water_mark = kGatewayHighWaterMark,
                  .curve = transport::CurveSocket{.keys = options_.keys, .server_key = {}}},
              counters),
      limiter_(clock, options_.refusals) {}

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
  }
  // Connections and handshakes limited per address, as at the shards and
  // the coordinator (docs/security.md "Connections and handshakes"); the
  // guard also counts the handshakes ZeroMQ fails.
  GD_RETURN_IF_ERROR(guard_.Watch(socket_.raw()));
  return socket_.Bind(options_.bind);
}

void ClientGateway::Authorize(const wire::HeartbeatReply& reply) {
  std::map<std::string, int> ids;
  for (int i = 0; i < reply.authorized_keys_size() && i < reply.authorized_ids_size(); ++i)
    ids[reply.authorized_keys(i)] = reply.authorized_ids(i);
  MutexLock lock(mu_);
  key_ids_ = std::move(ids);
}

void ClientGateway::Poll() {
  for (int i = 0; i < 256; ++i) {  // bounded: a flood cannot hold the round
    auto in = socket_.Receive();
    if (!in) return;
    if (!in->status.ok()) {
      Refuse(in->message.peer, transport::PeerName(in->message), in->message.header, in->refusal, in->status);
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
    case wire::Header::kClientBye:
      return Bye(m);
    default:
      Refuse(m.peer, transport::PeerName(m), m.header, wire::REFUSAL_UNSUPPORTED_TYPE,
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
  MutexLock lock(mu_);
  auto it = key_ids_.find(key);
  if (it == key_ids_.end())
    return Unauthenticated(
        "this connection's CURVE key is not an admitted client's (yet: the coordinator lists a "
        "key a heartbeat after the client's status request)");
  if (it->second >= 0 && it->second != client)
    return PermissionDenied("this connection's token is for client " + std::to_string(it->second));
  return Status::Ok();
}

Status ClientGateway::OneIdEach(const std::string& routing_id, const std::string& key, int64_t client) {
  if (auto it = ids_.find(routing_id); it != ids_.end() && it->second != client)
    return PermissionDenied("this connection serves client " + std::to_string(it->second) +
                            "; one connection serves one client id");
  if (auto it = key_ids_claimed_.find(key); zap_ && it != key_ids_claimed_.end() && it->second != client)
    return PermissionDenied("this CURVE key served client " + std::to_string(it->second) +
                            "; one key serves one client id");
  Prune(ids_, [this](const std::string& conn, int64_t id) {
    auto a = attached_.find(id);
    return a != attached_.end() && a->second.routing_id == conn;
  });
  ids_[routing_id] = client;
  if (!zap_) return Status::Ok();
  Prune(key_ids_claimed_, [this](const std::string& k, int64_t) {
    MutexLock lock(mu_);
    return key_ids_.count(k) > 0;
  });
  key_ids_claimed_[key] = client;
  return Status::Ok();
}

void ClientGateway::Hello(transport::Message& m) {
  const int64_t client = m.header.client_hello().client();
  Status s = MayClaim(m.peer_key, client);
  if (s.ok()) s = OneIdEach(m.peer, m.peer_key, client);
  if (!s.ok())
    return Refuse(m.peer, transport::PeerName(m), m.header,
                  s.code() == Code::kUnauthenticated ? wire::REFUSAL_UNAUTHORIZED : wire::REFUSAL_NOT_YOUR_CLIENT, s);
  Peer& p = attached_[client];
  if (p.routing_id != m.peer) p = Peer{.routing_id = m.peer, .name = transport::PeerName(m)};  // a new process
}

void ClientGateway::Bye(const transport::Message& m) {
  auto it = attached_.find(m.header.client_bye().client());
  if (it != attached_.end() && it->second.routing_id == m.peer) attached_.erase(it);
}

void ClientGateway::Update(transport::Message& m) {
  const wire::ClientUpdate& u = m.header.client_update();
  auto it = attached_.find(u.client());
  // Only the connection the task went to, for the round it asked.
  if (it == attached_.end()) return Drop(m, "client " + std::to_string(u.client()) + " is not attached here");
  if (it->second.routing_id != m.peer) return Drop(m, "another connection serves that client");
  if (it->second.asked != u.round())
    return Drop(m, "round " + std::to_string(u.round()) + " is not the one it was asked for, or its wait ended");
  RealUpdate r;
  r.info = u;
  r.frames = m.frames.size();
  for (const auto& f : m.frames) r.payload_bytes += f.size();
  if (r.frames == 1 && r.payload_bytes == static_cast<size_t>(options_.num_params) * sizeof(float)) {
    r.delta.resize(static_cast<size_t>(options_.num_params));  // else refused in Take
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

StatusOr<RealUpdate> ClientGateway::Await(int64_t client, int64_t round, TimePoint deadline,
                                          const UpdateLimits& limits) {
  for (;;) {
    Poll();
    if (auto got = arrived_.find(client); got != arrived_.end()) {
      RealUpdate r = std::move(got->second);
      arrived_.erase(got);
      return Take(client, std::move(r), limits);
    }
    auto it = attached_.find(client);
    if (it == attached_.end() || it->second.asked != round)
      return Unavailable("client " + std::to_string(client) + " left before its update for round " +
                         std::to_string(round));
    if (missed_.count(client)) {  // never waited for again
      it->second.asked = -1;
      ++not_waited_;
      return DeadlineExceeded("client " + std::to_string(client) + " missed a round's deadline before and its update" +
                              " for round " + std::to_string(round) + " is not here yet; not waited for");
    }
    const TimePoint now = clock_->Now();
    if (now >= deadline) {
      attached_.erase(it);
      missed_.insert(client);
      ++timeouts_;
      return Unavailable("client " + std::to_string(client) + " sent no update for round " + std::to_string(round) +
                         " by the deadline (federated.gateway_timeout_s); detached, and not waited for again");
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    socket_.WaitReadable(static_cast<int>(std::clamp<int64_t>(left, 1, 50)));
  }
}

StatusOr<RealUpdate> ClientGateway::Take(int64_t client, RealUpdate r, const UpdateLimits& limits) {
  Status s = r.frames == 1 ? CheckClientUpdate(r.info, r.delta.data(), r.payload_bytes, limits)
                           : InvalidArgument("an update in " + std::to_string(r.frames) +
                                             " payload frames; it is one frame of num_params floats");
  if (s.ok()) return r;
  if (auto it = attached_.find(client); it != attached_.end()) {
    wire::Header h;
    h.mutable_client_update()->CopyFrom(r.info);
    Refuse(it->second.routing_id, it->second.name, h, UpdateRefusal(s), s);
  }
  return s;
}

void ClientGateway::Drop(const transport::Message& m, const std::string& why) {
  ++updates_dropped_;
  uint64_t skipped = 0;
  if (drop_log_.Due(clock_->Now(), &skipped))
    GD_LOG(WARNING) << "client gateway dropped an update from " << transport::PeerName(m) << ": " << why
                    << (skipped ? " (and " + std::to_string(skipped) + " more dropped since the last such line)" : "");
}

void ClientGateway::Refuse(const std::string& routing_id, const std::string& peer_name, const wire::Header& request,
                           wire::Refusal reason, const Status& why) {
  const transport::RefusalLimiter::Verdict v = limiter_.Note(routing_id, reason);
  if (v.log)
    GD_LOG(WARNING) << "client gateway refused " << transport::BodyName(request) << " from " << peer_name << " ("
                    << transport::RefusalName(reason) << "): " << why.message()
                    << transport::UnloggedNote(v.unlogged, reason);
  if (v.muted) GD_LOG(WARNING) << "client gateway: " << transport::MutedNote(peer_name, limiter_.limits());
  if (!v.answer || routing_id.empty()) return;
  wire::Header reply;
  reply.set_request_id(request.request_id());
  reply.mutable_error_reply()->set_code(transport::ToWire(why.code()));
  reply.mutable_error_reply()->set_message(why.message());
  reply.mutable_error_reply()->set_reason(reason);
  (void)socket_.Send(std::move(reply), {}, routing_id);
}

stats::GatewayStats ClientGateway::Stats() const {
  stats::GatewayStats s;
  for (const auto& [reason, n] : limiter_.by_reason())
    (*s.mutable_refused_by_reason())[transport::RefusalName(reason)] = static_cast<uint32_t>(n);
  s.set_refusals_unanswered(static_cast<uint32_t>(limiter_.unanswered()));
  s.set_updates_dropped(static_cast<uint32_t>(updates_dropped_));
  s.set_timeouts(static_cast<uint32_t>(timeouts_));
  s.set_not_waited(static_cast<uint32_t>(not_waited_));
  s.set_attached(static_cast<uint32_t>(attached_.size()));
  s.set_connections_limited(static_cast<uint32_t>(guard_.refused()));
  s.set_handshakes_failed(static_cast<uint32_t>(guard_.handshake_failures()));
  return s;
}

}  // namespace geodesic::federated
