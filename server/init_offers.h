// InitOffers: which worker sends a chunk's initial values. Workers offer
// their chunks by digest first (wire::InitRequest.offer); the first to
// offer a chunk that is not set yet is asked for its values and holds the
// chunk for kHold, and the others are told to offer again, so the model
// crosses the network once however many workers start together. A
// reservation whose worker never sent (it died) lapses after kHold, and
// the next offer takes it. Offers for set chunks are answered from the
// shard: held (same initial values) or not (the worker pulls them).
// Not synchronized; the server's loop thread owns it.
#pragma once

#include <cstdint>
#include <map>

#include "common/clock.h"
#include "proto/geodesic.pb.h"
#include "server/shard.h"

namespace geodesic::server {

class InitOffers {
 public:
  static constexpr Duration kHold = std::chrono::seconds(15);

  // Fills `ack` (held, send and wait chunks) for `worker`'s offer `req`,
  // already validated: one digest per chunk, every chunk owned here.
  void Answer(const ShardState& shard, int worker, const wire::InitRequest& req, TimePoint now, wire::InitAck* ack);
  size_t reserved() const { return reserved_.size(); }

 private:
  struct Reservation {
    int worker = 0;
    TimePoint until{};
  };
  std::map<uint32_t, Reservation> reserved_;
};

}  // namespace geodesic::server
