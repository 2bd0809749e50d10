#include "worker/zmq_shard_links.h"

#include "common/log.h"
#include "worker/aggregator_links.h"

namespace geodesic::worker {

ZmqShardLinks::ZmqShardLinks(zmq::context_t& ctx, transport::SocketOptions base, transport::TrafficCounters* counters)
    : ctx_(ctx), base_(std::move(base)), counters_(counters) {}

Status ZmqShardLinks::Connect(size_t si, const ShardAddress& address) {
  if (si >= links_.size()) links_.resize(si + 1);
  Link& link = links_[si];
  link.id = address.id;
  transport::SocketOptions so = base_;
  so.curve.server_key = address.curve_key;
  so.also_count = link.wire.get();
  link.socket = std::make_unique<transport::Socket>(ctx_, zmq::socket_type::dealer, so, counters_);
  return link.socket->Connect(address.endpoint);
}

Status ZmqShardLinks::Send(size_t si, const wire::Header& header, const std::vector<transport::Payload>& payloads) {
  return links_[si].socket->Send(header, payloads);
}

void ZmqShardLinks::Poll(int timeout_ms, const std::function<void(size_t si, transport::Message& m)>& deliver) {
  std::vector<zmq::pollitem_t> items;
  for (auto& link : links_) items.push_back({link.socket->raw().handle(), 0, ZMQ_POLLIN, 0});
  try {
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(timeout_ms));
  } catch (const zmq::error_t&) {
    return;  // interrupted by a signal; callers re-check their stop flag
  }
  for (size_t i = 0; i < links_.size(); ++i) {
    if (!(items[i].revents & ZMQ_POLLIN)) continue;
    for (int k = 0; k < 256; ++k) {
      auto in = links_[i].socket->Receive();
      if (!in) break;
      if (!in->status.ok()) {
        GD_LOG(WARNING) << "server " << links_[i].id << " sent a message we refuse: " << in->status;
        continue;
      }
      deliver(i, in->message);
    }
  }
}

std::unique_ptr<PsClient> MakePsClient(zmq::context_t& ctx, PsClientOptions options,
                                       const wire::RegisterReply& assignment, const transport::CurveKeyPair& keys,
                                       transport::TrafficCounters* counters, const Clock* clock,
                                       const std::optional<ShardAddress>& aggregator,
                                       std::function<bool()> aggregator_gone) {
  transport::SocketOptions base{.job = options.job,
                                .role = options.role,
                                .id = options.id,
                                .max_message_bytes = options.wire.max_message_bytes,
                                .curve = {.keys = keys}};
  std::unique_ptr<ShardLinks> links = std::make_unique<ZmqShardLinks>(ctx, base, counters);
  if (aggregator)
    links = std::make_unique<AggregatorLinks>(std::move(links), std::make_unique<ZmqShardLinks>(ctx, base, counters),
                                              *aggregator, std::move(aggregator_gone));
  return std::make_unique<PsClient>(std::move(links), std::move(options), assignment, clock);
}

}  // namespace geodesic::worker
