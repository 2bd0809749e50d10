#include "worker/aggregator_links.h"

#include <algorithm>
#include <utility>

#include "common/log.h"

namespace geodesic::worker {

AggregatorLinks::AggregatorLinks(std::unique_ptr<ShardLinks> direct, std::unique_ptr<ShardLinks> via,
                                 ShardAddress aggregator, GoneFn gone)
    : direct_(std::move(direct)), via_(std::move(via)), aggregator_(std::move(aggregator)), gone_(std::move(gone)) {}

void AggregatorLinks::CheckGone() {
  if (fallen_back_ || !gone_ || !gone_()) return;
  fallen_back_ = rerouted_ = true;
  GD_LOG(WARNING) << "the region's aggregator at " << aggregator_.endpoint
                  << " is gone: pushing to and pulling from the shards directly";
}

bool AggregatorLinks::TakeRerouted() {
  CheckGone();
  return std::exchange(rerouted_, false);
}

Status AggregatorLinks::Connect(size_t si, const ShardAddress& address) {
  GD_RETURN_IF_ERROR(direct_->Connect(si, address));
  ShardAddress via = aggregator_;
  via.id = address.id;
  return via_->Connect(si, via);
}

AggregatorLinks::Route AggregatorLinks::RouteOf(const wire::Header& h) {
  if (h.has_push_request()) {
    const auto& p = h.push_request();
    if (!p.skipped()) return Route::kAggregator;
    // A whole skipped clock goes to both; the chunks outside a clock's
    // fragment (training.fragments) only to the shards: the aggregator
    // waits only for the fragment's chunks.
    return p.chunks_size() == 0 ? Route::kBoth : Route::kShard;
  }
  if (h.has_pull_request() && !h.pull_request().final()) return Route::kAggregator;
  return Route::kShard;
}

Status AggregatorLinks::Send(size_t si, const wire::Header& header, const std::vector<transport::Payload>& payloads) {
  CheckGone();
  if (fallen_back_) return direct_->Send(si, header, payloads);
  switch (RouteOf(header)) {
    case Route::kAggregator:
      return via_->Send(si, header, payloads);
    case Route::kBoth:
      // The aggregator's copy is a note the shard's answer stands for; it
      // is lost only with the aggregator (which then waits for no one).
      (void)via_->Send(si, header, payloads);
      return direct_->Send(si, header, payloads);
    case Route::kShard:
      break;
  }
  return direct_->Send(si, header, payloads);
}

void AggregatorLinks::Poll(int timeout_ms, const std::function<void(size_t si, transport::Message& m)>& deliver) {
  // The shards answer rarely (initial values, skipped clocks, the final
  // pull): a look without waiting, then the wait on the aggregator's links,
  // short enough that a shard's answer waits at most that long.
  CheckGone();
  if (fallen_back_) return direct_->Poll(timeout_ms, deliver);
  direct_->Poll(0, deliver);
  via_->Poll(std::min(timeout_ms, 5), deliver);
}

const transport::TrafficCounters& AggregatorLinks::traffic(size_t si) const {
  if (sums_.size() <= si) sums_.resize(si + 1);
  if (!sums_[si]) sums_[si] = std::make_unique<transport::TrafficCounters>();
  const transport::TrafficCounters &a = direct_->traffic(si), &b = via_->traffic(si);
  transport::TrafficCounters& s = *sums_[si];
  s.bytes_sent = a.bytes_sent + b.bytes_sent;
  s.bytes_received = a.bytes_received + b.bytes_received;
  s.messages_sent = a.messages_sent + b.messages_sent;
  s.messages_received = a.messages_received + b.messages_received;
  s.messages_refused = a.messages_refused + b.messages_refused;
  s.send_failures = a.send_failures + b.send_failures;
  s.sends_dropped = a.sends_dropped + b.sends_dropped;
  return s;
}

}  // namespace geodesic::worker
