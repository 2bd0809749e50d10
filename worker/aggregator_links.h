// AggregatorLinks: a worker's links (worker/shard_links.h) when its region
// has an aggregator (regions.NAME.aggregator; docs/wan.md "Regional
// aggregation"). Every shard index has two links, one to the shard and one
// to the region's aggregator, and a message goes where it is served:
//
//   - a push with gradients and a pull of a training clock: the aggregator,
//     which sums the region's pushes into one and serves the region's pulls
//     from one pull of its own;
//   - initial values (and their offers) and a final pull: the shard;
//   - a skipped push (no usable gradient): both. The shard records the
//     clock and answers; the aggregator only learns not to wait for this
//     worker's gradient, and does not answer. The chunks outside a clock's
//     fragment (training.fragments), skipped: the shard only.
//
// When `gone` says the aggregator died (the coordinator's
// HeartbeatReply.aggregators_down), everything goes to the shards from
// then on, and TakeRerouted tells the client to send again what is
// unanswered: a push the aggregator held is taken by the shards as the
// worker's own, one it had forwarded is answered DUPLICATE, and a BSP
// round sums the region's pushes as the aggregator would have, so the
// result is the same to the bit.
//
// The PsClient above sees one link per shard either way. traffic(si) is
// both links' bytes together: what this worker exchanged for shard si's
// chunks. Not synchronized, like every ShardLinks.
#pragma once

#include <memory>
#include <vector>

#include "worker/shard_links.h"

namespace geodesic::worker {

class AggregatorLinks final : public ShardLinks {
 public:
  // Whether the aggregator is gone for good; polled on every send and poll
  // (cheap: it may look only when a heartbeat reply came in).
  using GoneFn = std::function<bool()>;

  // `direct` reaches the shards, `via` the aggregator at `aggregator` (every
  // one of its links connects there). Without `gone` it is never given up.
  AggregatorLinks(std::unique_ptr<ShardLinks> direct, std::unique_ptr<ShardLinks> via, ShardAddress aggregator,
                  GoneFn gone = {});

  Status Connect(size_t si, const ShardAddress& address) override;
  Status Send(size_t si, const wire::Header& header, const std::vector<transport::Payload>& payloads) override;
  void Poll(int timeout_ms, const std::function<void(size_t si, transport::Message& m)>& deliver) override;
  const transport::TrafficCounters& traffic(size_t si) const override;
  bool TakeRerouted() override;
  bool fallen_back() const { return fallen_back_; }

  // Where `header` goes: to the aggregator, the shard, or both.
  enum class Route { kShard, kAggregator, kBoth };
  static Route RouteOf(const wire::Header& header);

 private:
  // Falls back once `gone_` says so.
  void CheckGone();

  std::unique_ptr<ShardLinks> direct_, via_;
  ShardAddress aggregator_;
  GoneFn gone_;
  bool fallen_back_ = false, rerouted_ = false;
  mutable std::vector<std::unique_ptr<transport::TrafficCounters>> sums_;  // by shard index, refreshed by traffic()
};

}  // namespace geodesic::worker
