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
// retries), for the id that key's token names (any, for a token without
// an id).
//
// Threading: Authorize may run on any thread (the heartbeat thread); every
// other method belongs to the thread that called Start (the training
// thread). Nothing blocks longer than Await's deadline.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "common/throttle.h"
#include "proto/geodesic.pb.h"
#include "transport/message.h"
#include "transport/security.h"

namespace geodesic::cluster {

struct GatewayOptions {
  std::string job;
  int executor = 0;
  int executors = 1;
  int64_t clients = 0;  // the population
  int64_t num_params = 0;
  std::string partition_digest;
  std::string bind = "tcp://127.0.0.1:*";
  transport::CurveKeyPair keys;  // secured jobs: the worker's keypair; empty: plaintext
  int64_t max_message_bytes = 256 << 20;
};

// A real client's update as it arrived and passed CheckClientUpdate.
struct RealUpdate {
  std::vector<float> delta;  // num_params values (empty when the payload was of another size)
  wire::ClientUpdate info;
  size_t payload_bytes = 0;  // as it came
};

// Why an update may not join a round, or OK: its payload is not
// num_params floats, a value is NaN or infinite, its L2 norm is over
// `max_norm` (> 0), or it claims fewer than 1 or more than `max_samples`
// samples (what the client's round trains on, its FedAvg weight).
Status CheckClientUpdate(const wire::ClientUpdate& update, const float* values, size_t payload_bytes,
                         int64_t num_params, int64_t max_samples, double max_norm);

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

  // Secured jobs: the coordinator's list of admitted client keys and ids.
  void Authorize(const wire::HeartbeatReply& reply);

  // Reads every waiting message: hellos attach, byes detach, updates for an
  // outstanding task are kept for Await.
  void Poll();
  bool Attached(int64_t client) const { return attached_.count(client) > 0; }
  size_t attached() const { return attached_.size(); }

  // Sends `client` its task for `round` (the global model, num_params
  // values). False if it could not be queued; the client is detached then.
  bool Ask(int64_t client, int64_t round, const float* global);
  // The update `client` sends for `round`, checked: Unavailable if it left
  // or does not answer by `deadline` (then it is detached), InvalidArgument
  // with CheckClientUpdate's reason (the client is told: REFUSAL_BAD_UPDATE).
  StatusOr<RealUpdate> Await(int64_t client, int64_t round, TimePoint deadline, int64_t max_samples, double max_norm);

  uint64_t refused_hellos() const { return refused_hellos_; }

 private:
  struct Peer {
    std::string routing_id;
    int64_t asked = -1;  // the round of its outstanding task, -1: none
  };
  void Handle(transport::Message& m);
  void Hello(transport::Message& m);
  void Update(transport::Message& m);
  // Whether a connection with `key` may claim `client`, or why not.
  Status MayClaim(const std::string& key, int64_t client) const;
  void Refuse(const std::string& routing_id, const wire::Header& request, wire::Refusal reason, const Status& why);

  GatewayOptions options_;
  const Clock* clock_;
  zmq::context_t& ctx_;
  std::unique_ptr<transport::ZapHandler> zap_;
  transport::Socket socket_;
  std::unordered_map<int64_t, Peer> attached_;
  std::map<int64_t, RealUpdate> arrived_;  // updates for the outstanding task, by client
  std::map<int64_t, Status> refused_;      // and the ones refused
  uint64_t refused_hellos_ = 0;
  Throttle log_{std::chrono::seconds(1)};
  mutable std::mutex mu_;
  std::map<std::string, int> key_ids_;  // guarded by mu_: admitted key -> client id (-1: any)
};

}  // namespace geodesic::cluster
