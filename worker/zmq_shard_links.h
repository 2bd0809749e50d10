// ZmqShardLinks: a PsClient's links (worker/shard_links.h) as one ZeroMQ
// DEALER socket per shard. Each link stamps the identity in `base` on what
// it sends, refuses larger inbound messages than base.max_message_bytes,
// and in secured jobs is a CURVE client with base.curve.keys and the
// shard's public key. A link's wire bytes are also counted per shard
// (traffic()), kept across reconnects; every link counts into `counters`
// too. Not synchronized: the sockets belong to the PsClient's thread.
//
// MakePsClient builds the PsClient of a process over them (and, for a
// worker whose region has an aggregator, over AggregatorLinks).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>
#include <zmq.hpp>

#include "common/clock.h"
#include "transport/message.h"
#include "transport/security.h"
#include "worker/ps_client.h"
#include "worker/shard_links.h"

namespace geodesic::worker {

class ZmqShardLinks final : public ShardLinks {
 public:
  // `ctx` and `counters` must outlive the links.
  ZmqShardLinks(zmq::context_t& ctx, transport::SocketOptions base, transport::TrafficCounters* counters);

  Status Connect(size_t si, const ShardAddress& address) override;
  Status Send(size_t si, const wire::Header& header, const std::vector<transport::Payload>& payloads) override;
  void Poll(int timeout_ms, const std::function<void(size_t si, transport::Message& m)>& deliver) override;
  const transport::TrafficCounters& traffic(size_t si) const override { return *links_[si].wire; }

 private:
  struct Link {
    int id = 0;  // the shard's server id, for logs
    std::unique_ptr<transport::Socket> socket;
    std::unique_ptr<transport::TrafficCounters> wire = std::make_unique<transport::TrafficCounters>();
  };

  zmq::context_t& ctx_;
  const transport::SocketOptions base_;
  transport::TrafficCounters* counters_;
  std::vector<Link> links_;  // by shard index; grows on Connect
};

// A PsClient over ZeroMQ links identified as `options` says (job, role,
// id, wire.max_message_bytes), CURVE clients with `keys` in secured jobs
// (empty: plaintext), counting into `counters`. `ctx` and `counters` must
// outlive it. With `aggregator`, pushes and training pulls go there
// (worker/aggregator_links.h) until `aggregator_gone` says it died.
std::unique_ptr<PsClient> MakePsClient(zmq::context_t& ctx, PsClientOptions options,
                                       const wire::RegisterReply& assignment, const transport::CurveKeyPair& keys,
                                       transport::TrafficCounters* counters, const Clock* clock,
                                       const std::optional<ShardAddress>& aggregator = std::nullopt,
                                       std::function<bool()> aggregator_gone = {});

}  // namespace geodesic::worker
