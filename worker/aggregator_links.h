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
//     worker's gradient, and does not answer.
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
  // `direct` reaches the shards, `via` the aggregator at `aggregator` (every
  // one of its links connects there).
  AggregatorLinks(std::unique_ptr<ShardLinks> direct, std::unique_ptr<ShardLinks> via, ShardAddress aggregator);

  Status Connect(size_t si, const ShardAddress& address) override;
  Status Send(size_t si, const wire::Header& header, const std::vector<transport::Payload>& payloads) override;
  void Poll(int timeout_ms, const std::function<void(size_t si, transport::Message& m)>& deliver) override;
  const transport::TrafficCounters& traffic(size_t si) const override;

  // Where `header` goes: to the aggregator, the shard, or both.
  enum class Route { kShard, kAggregator, kBoth };
  static Route RouteOf(const wire::Header& header);

 private:
  std::unique_ptr<ShardLinks> direct_, via_;
  ShardAddress aggregator_;
  mutable std::vector<std::unique_ptr<transport::TrafficCounters>> sums_;  // by shard index, refreshed by traffic()
};

}  // namespace geodesic::worker
