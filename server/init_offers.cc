#include "server/init_offers.h"

namespace geodesic::server {

void InitOffers::Answer(const ShardState& shard, int worker, const wire::InitRequest& req, TimePoint now,
                        wire::InitAck* ack) {
  for (int i = 0; i < req.chunks_size(); ++i) {
    const uint32_t c = req.chunks(i).chunk_id();
    if (shard.IsInitialized(c)) {
      reserved_.erase(c);
      if (shard.HoldsInitial(c, req.digests(i)))
        ack->add_held_chunks(c);
      else
        ack->set_ignored_chunks(ack->ignored_chunks() + 1);
      continue;
    }
    auto it = reserved_.find(c);
    if (it != reserved_.end() && it->second.worker != worker && now < it->second.until) {
      ack->add_wait_chunks(c);
      continue;
    }
    reserved_[c] = Reservation{worker, now + kHold};
    ack->add_send_chunks(c);
  }
}

}  // namespace geodesic::server
