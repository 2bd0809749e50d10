// Send seams for the parts of a process that answer on a bound socket or
// keep connections of their own (the shard's PullService, Replicator and
// Migration): ReplySink answers the peers of a ROUTER, PeerLink is one
// outgoing connection, and a PeerConnector opens PeerLinks. The ZeroMQ ones
// are below; unit tests put fakes behind the interfaces that record what is
// sent and hand in what a peer would answer, and move a FakeClock between
// calls (tests/server/*_test.cc).
//
// Ownership and threading: whoever holds a sink or link calls it from one
// thread; the implementations here add no lock.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/status.h"
#include "proto/geodesic.pb.h"
#include "transport/message.h"

namespace geodesic::transport {

// Replies to the peers (routing ids) of a bound socket.
class ReplySink {
 public:
  virtual ~ReplySink() = default;
  // Sends `header` and `payloads` to `peer`; Unavailable if the peer is
  // gone or its queue is full. Payloads with an owner are kept alive until
  // sent.
  virtual Status Send(wire::Header header, const std::vector<Payload>& payloads, const std::string& peer) = 0;
  // Counts a reply dropped before it was sent (in the stats' sends_dropped).
  virtual void CountDropped() = 0;
};

// One outgoing connection to another process.
class PeerLink {
 public:
  virtual ~PeerLink() = default;
  // Sends one message; Unavailable if it cannot be queued now.
  virtual Status Send(const wire::Header& header, const std::vector<Payload>& payloads) = 0;
  // Takes one arrived message without waiting; nullopt when none waits.
  virtual std::optional<Incoming> Receive() = 0;
  // The ZeroMQ socket to wait on with others (zmq_poll); null where there
  // is none to wait on (a fake: arrivals are there when Receive is called).
  virtual zmq::socket_t* pollable() { return nullptr; }
};

// Opens a link to `endpoint`; `server_key`: the peer's CURVE public key
// (empty: plaintext). An error if the endpoint is malformed.
using PeerConnector =
    std::function<StatusOr<std::unique_ptr<PeerLink>>(const std::string& endpoint, const std::string& server_key)>;

// A ROUTER socket's replies.
class RouterReplies final : public ReplySink {
 public:
  explicit RouterReplies(Socket* router) : router_(router) {}
  Status Send(wire::Header header, const std::vector<Payload>& payloads, const std::string& peer) override {
    return router_->Send(std::move(header), payloads, peer);
  }
  void CountDropped() override { router_->counters()->sends_dropped++; }

 private:
  Socket* router_;
};

// DEALER sockets with `options` (the CURVE keys in options.curve.keys; the
// peer's key per link), their traffic counted in `counters`.
PeerConnector DealerConnector(zmq::context_t& ctx, SocketOptions options, TrafficCounters* counters);

}  // namespace geodesic::transport
