// ShardLinks: how a PsClient (worker/ps_client.h) reaches its shards, the
// client's send seam. There is one link per shard, named by the shard's
// index in the client's shard list: a link connects (again, when the shard
// moved), sends one framed message, and hands over what arrived.
// ZmqShardLinks (worker/zmq_shard_links.h) is a DEALER socket per shard;
// tests put a fake behind this interface that records what is sent,
// answers as shards would and moves a FakeClock while the client polls.
//
// Ownership and threading: the PsClient owns its links and calls them from
// its own thread only, so an implementation needs no lock.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/geodesic.pb.h"
#include "transport/message.h"

namespace geodesic::worker {

// Where one shard is served now.
struct ShardAddress {
  int id = 0;  // the shard's server id
  std::string endpoint;
  std::string curve_key;  // the shard's CURVE public key (secured jobs); empty: plaintext
};

class ShardLinks {
 public:
  virtual ~ShardLinks() = default;

  // Connects link `si` to `address`, replacing the link it had (what the
  // old one still queued is lost; the client sends it again).
  virtual Status Connect(size_t si, const ShardAddress& address) = 0;
  // Sends one message on link `si`; Unavailable if it cannot be queued.
  // Payloads with an owner are sent zero-copy and kept alive until sent.
  virtual Status Send(size_t si, const wire::Header& header, const std::vector<transport::Payload>& payloads) = 0;
  // Waits up to `timeout_ms` for arrivals, then hands each arrived message
  // that passed the framing checks to `deliver` (a refused one is logged
  // and dropped). Returns early when a signal interrupts the wait.
  virtual void Poll(int timeout_ms, const std::function<void(size_t si, transport::Message& m)>& deliver) = 0;
  // What link `si` sent and received on the wire, across reconnects.
  virtual const transport::TrafficCounters& traffic(size_t si) const = 0;
  // True once after the links began sending elsewhere than before on their
  // own (AggregatorLinks falling back to the shards when the aggregator
  // died): the client sends again every request still unanswered.
  virtual bool TakeRerouted() { return false; }
};

}  // namespace geodesic::worker
