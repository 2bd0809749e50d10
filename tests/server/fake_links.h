// In-process stand-ins for the shard's send seams (transport/links.h):
// they record what is sent, hand in what a peer would answer, and fail a
// send when told to. No sockets, no threads: tests drive the parts' calls
// and a FakeClock.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transport/links.h"

namespace geodesic::testing {

struct SentMessage {
  std::string peer;  // replies: the routing id it went to; links: empty
  wire::Header header;
  std::vector<std::string> payloads;  // the bytes, copied at send time
};

inline std::vector<std::string> CopyPayloads(const std::vector<transport::Payload>& payloads) {
  std::vector<std::string> out;
  for (const auto& p : payloads) out.emplace_back(static_cast<const char*>(p.data), p.size);
  return out;
}

class FakeReplies final : public transport::ReplySink {
 public:
  Status Send(wire::Header header, const std::vector<transport::Payload>& payloads, const std::string& peer) override {
    if (full) return Unavailable("the peer's queue is full (fake)");
    sent.push_back(SentMessage{peer, std::move(header), CopyPayloads(payloads)});
    return Status::Ok();
  }
  void CountDropped() override { ++dropped; }

  std::vector<SentMessage> sent;
  int dropped = 0;
  bool full = false;  // every send fails while set
};

class FakeLink final : public transport::PeerLink {
 public:
  Status Send(const wire::Header& header, const std::vector<transport::Payload>& payloads) override {
    if (full) return Unavailable("the link's queue is full (fake)");
    sent.push_back(SentMessage{"", header, CopyPayloads(payloads)});
    return Status::Ok();
  }
  std::optional<transport::Incoming> Receive() override {
    if (inbox.empty()) return std::nullopt;
    transport::Incoming in;
    in.message.header = std::move(inbox.front());
    inbox.pop_front();
    return in;
  }

  std::vector<SentMessage> sent;
  std::deque<wire::Header> inbox;  // what the peer answers, in order
  bool full = false;
};

// Opens FakeLinks and keeps a pointer to each (the part that opened one
// owns it), by endpoint; `refuse` names endpoints that fail to connect.
class FakeConnector {
 public:
  transport::PeerConnector Get() {
    return
        [this](const std::string& endpoint, const std::string& key) -> StatusOr<std::unique_ptr<transport::PeerLink>> {
          ++connects[endpoint];
          keys[endpoint] = key;
          if (refuse.count(endpoint)) return InvalidArgument("cannot connect to " + endpoint + " (fake)");
          auto link = std::make_unique<FakeLink>();
          links[endpoint] = link.get();
          return std::unique_ptr<transport::PeerLink>(std::move(link));
        };
  }

  std::map<std::string, FakeLink*> links;
  std::map<std::string, int> connects;
  std::map<std::string, std::string> keys;
  std::map<std::string, bool> refuse;
};

}  // namespace geodesic::testing
