// ClientGateway: a federated executor's door for real clients
// (`geodesic client`, worker/real_client.h; docs/federated.md "Real
// clients"). It binds a ROUTER (a CURVE server with the worker's keypair in
// secured jobs), and speaks the four messages of proto/geodesic.proto:
// ClientHello attaches a client id to the connection it came on, ClientBye
// detaches it, Ask sends a ClientTask with the round's global model, and
// Await takes that client's ClientUpdate for the round, checked
// (CheckClientUpdate) before the caller may add it to the round.
//
// Which ids a connection may claim: executor e serves the clients k with
// k mod E == e, in [0, clients). In secured jobs every CURVE client
// completes the handshake (ZeroMQ never retries one ZAP refused), but a
// hello counts only from a key the coordinator lists for this worker
// (Authorize, from heartbeat replies: keys of clients whose `client` token
// it checked; others are answered REFUSAL_UNAUTHORIZED, and the client
// retries), for the id that key's token names. One connection serves one
// client id for its life, and so does one CURVE key (a token minted for any
// id serves the first id its key claims).
//
// What a client may cost the executor: a message at most one update long
// (num_params floats plus a header's room: ZMQ_MAXMSGSIZE, larger ones
// close the connection unread), a few queued messages (the socket's
// high-water mark), at most RefusalLimits' answers per connection and
// window (later refusals are counted, not answered), and one
// federated.gateway_timeout_s wait per job: a client that once missed a
// round's deadline is never waited for again (Await).
//
// Threading: Authorize may run on any thread (the heartbeat thread); every
// other method belongs to the thread that called Start (the training
// thread). Nothing blocks longer than Await's deadline.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/throttle.h"
#include "proto/geodesic.pb.h"
#include "proto/stats.pb.h"
#include "transport/connection_guard.h"
#include "transport/message.h"
#include "transport/refusal_limiter.h"
#include "transport/security.h"

namespace geodesic::federated {

// Room for a message's header frame beside its payload (as wire.max_message_bytes keeps).
inline constexpr int64_t kHeaderRoom = 64 << 10;
// Messages a gateway queues per connection, each way: a client has a hello,
// an update and a bye in flight at most, and is sent one task a round.
inline constexpr int kGatewayHighWaterMark = 16;

// The largest magnitude a value of a client's update may have: half of the
// shards' kMaxValueMagnitude over the executors. An executor pushes
// -(E / W) Σ w_i Δ_i with Σ of its w_i at most W, so each pushed value is
// at most E times the largest |Δ_ij| it took; with every |Δ_ij| at most
// this, the push stays within half of what a shard accepts (the other half
// covers rounding in the double sums and the float conversion).
float MaxUpdateValue(int executors);

struct GatewayOptions {
  std::string job;
  int executor = 0;
  int executors = 1;
  int64_t clients = 0;  // the population
  int64_t num_params = 0;
  std::string partition_digest;
  std::string bind = "tcp://127.0.0.1:*";
  transport::CurveKeyPair keys;  // secured jobs: the worker's keypair; empty: plaintext
  transport::RefusalLimits refusals = {};
};

// A real client's update as it arrived and passed CheckClientUpdate.
struct RealUpdate {
  std::vector<float> delta;  // num_params values (empty when the payload was of another size)
  wire::ClientUpdate info;
  size_t payload_bytes = 0;  // as it came
  size_t frames = 1;         // payload frames it came in
};

// What a client update must satisfy to join a round.
struct UpdateLimits {
  int64_t num_params = 0;
  int64_t max_samples = 0;  // what the client's round trains on: its largest FedAvg weight
  double max_norm = 0;      // federated.max_update_norm (0: no bound)
  float max_value = 0;      // MaxUpdateValue(E)
};

// Why an update may not join a round, or OK, in this order: its payload is
// not num_params floats, a value is NaN or infinite (InvalidArgument), a
// value's magnitude is over `max_value` (OutOfRange: the gateway answers
// REFUSAL_VALUE_TOO_LARGE), its L2 norm is over `max_norm` (> 0), or it
// claims fewer than 1 or more than `max_samples` samples (InvalidArgument:
// REFUSAL_BAD_UPDATE).
Status CheckClientUpdate(const wire::ClientUpdate& update, const float* values, size_t payload_bytes,
                         const UpdateLimits& limits);
// The refusal a failed CheckClientUpdate is answered with.
wire::Refusal UpdateRefusal(const Status& why);

class ClientGateway {
 public:
  ClientGateway(zmq::context_t& ctx, GatewayOptions options, transport::TrafficCounters* counters, const Clock* clock);
  // Says ClientBye to every attached client (the executor is done).
  ~ClientGateway();
  ClientGateway(const ClientGateway&) = delete;
  ClientGateway& operator=(const ClientGateway&) = delete;

  // Binds (and in secured jobs starts the ZAP handler, which admits no one
  // until Authorize).
  Status Start();
  const std::string& endpoint() const { return socket_.endpoint(); }
  // The largest message the socket takes (ZMQ_MAXMSGSIZE as set on it).
  int64_t max_message_bytes() { return socket_.raw().get(zmq::sockopt::maxmsgsize); }

  // Secured jobs: the coordinator's list of admitted client keys and ids.
  void Authorize(const wire::HeartbeatReply& reply);

  // Reads every waiting message: hellos attach, byes detach, updates for an
  // outstanding task are kept for Await.
  void Poll();
  bool Attached(int64_t client) const { return attached_.count(client) > 0; }
  size_t attached() const { return attached_.size(); }
  // Updates that arrived for an outstanding task and wait for Await.
  size_t updates_waiting() const { return arrived_.size(); }

  // Sends `client` its task for `round` (the global model, num_params
  // values). False if it could not be queued; the client is detached then.
  bool Ask(int64_t client, int64_t round, const float* global);
  // The update `client` sends for `round`, checked against `limits`:
  // - Unavailable if it left, or sends none by `deadline` (it is detached
  //   then, and never waited for again in this job);
  // - DeadlineExceeded at once, without waiting, if it missed a deadline
  //   before and its update is not here yet (the caller trains it as a
  //   virtual client);
  // - InvalidArgument or OutOfRange with CheckClientUpdate's reason (the
  //   client is told: UpdateRefusal).
  StatusOr<RealUpdate> Await(int64_t client, int64_t round, TimePoint deadline, const UpdateLimits& limits);

  // Counts for the executor's stats file and /metrics.
  stats::GatewayStats Stats() const;
  const transport::RefusalLimiter& refusals() const { return limiter_; }

 private:
  struct Peer {
    std::string routing_id;
    std::string name;    // for logs: transport::PeerName of its hello
    int64_t asked = -1;  // the round of its outstanding task, -1: none
  };
  void Handle(transport::Message& m);
  void Hello(transport::Message& m);
  void Update(transport::Message& m);
  void Bye(const transport::Message& m);
  // Whether a connection with `key` may claim `client`, or why not.
  Status MayClaim(const std::string& key, int64_t client) const;
  // One connection, and one CURVE key, serve one client id.
  Status OneIdEach(const std::string& routing_id, const std::string& key, int64_t client);
  StatusOr<RealUpdate> Take(int64_t client, RealUpdate r, const UpdateLimits& limits);
  void Drop(const transport::Message& m, const std::string& why);
  void Refuse(const std::string& routing_id, const std::string& peer_name, const wire::Header& request,
              wire::Refusal reason, const Status& why);

  GatewayOptions options_;
  const Clock* clock_;
  zmq::context_t& ctx_;
  std::unique_ptr<transport::ZapHandler> zap_;
  transport::ConnectionGuard guard_{ctx_};
  transport::Socket socket_;
  std::unordered_map<int64_t, Peer> attached_;
  std::map<int64_t, RealUpdate> arrived_;                     // updates for the outstanding task, by client
  std::unordered_map<std::string, int64_t> ids_;              // the client id each connection attached, for its life
  std::unordered_map<std::string, int64_t> key_ids_claimed_;  // secured: the client id each key attached
  std::set<int64_t> missed_;                                  // clients that missed a round's deadline
  transport::RefusalLimiter limiter_;
  uint64_t updates_dropped_ = 0, timeouts_ = 0, not_waited_ = 0;
  Throttle drop_log_{std::chrono::seconds(1)};
  mutable Mutex mu_;
  std::map<std::string, int> key_ids_ GD_GUARDED_BY(mu_);  // admitted key -> client id (-1: any)
};

}  // namespace geodesic::federated
