#include "transport/links.h"

namespace geodesic::transport {
namespace {

class DealerLink final : public PeerLink {
 public:
  explicit DealerLink(std::unique_ptr<Socket> socket) : socket_(std::move(socket)) {}
  Status Send(const wire::Header& header, const std::vector<Payload>& payloads) override {
    return socket_->Send(header, payloads);
  }
  std::optional<Incoming> Receive() override { return socket_->Receive(); }
  zmq::socket_t* pollable() override { return &socket_->raw(); }

 private:
  std::unique_ptr<Socket> socket_;
};

}  // namespace

PeerConnector DealerConnector(zmq::context_t& ctx, SocketOptions options, TrafficCounters* counters) {
  return [&ctx, options, counters](const std::string& endpoint,
                                   const std::string& server_key) -> StatusOr<std::unique_ptr<PeerLink>> {
    SocketOptions o = options;
    o.curve.server_key = server_key;
    auto socket = std::make_unique<Socket>(ctx, zmq::socket_type::dealer, o, counters);
    GD_RETURN_IF_ERROR(socket->Connect(endpoint));
    return std::unique_ptr<PeerLink>(std::make_unique<DealerLink>(std::move(socket)));
  };
}

}  // namespace geodesic::transport
