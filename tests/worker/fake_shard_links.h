// FakeShardLinks: the PsClient's send seam (worker/shard_links.h) played by
// a test, in one thread and without sockets. It records every connect and
// every message sent (header and payload bytes) per shard, answers through
// `respond` (called on each send, as a shard would on arrival) or replies
// queued by the test, and moves a FakeClock by each poll's timeout when
// nothing is waiting, so that retry intervals and deadlines pass in fake
// time. The test keeps a pointer to it after handing it to the PsClient.
#pragma once

#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "worker/shard_links.h"

namespace geodesic::worker {

class FakeShardLinks final : public ShardLinks {
 public:
  struct Sent {
    size_t si = 0;
    wire::Header header;
    std::vector<std::string> payloads;
  };

  explicit FakeShardLinks(FakeClock* clock) : clock_(clock) {}

  Status Connect(size_t si, const ShardAddress& address) override {
    while (traffic_.size() <= si) traffic_.push_back(std::make_unique<transport::TrafficCounters>());
    connects.emplace_back(si, address.endpoint);
    return Status::Ok();
  }
  Status Send(size_t si, const wire::Header& header, const std::vector<transport::Payload>& payloads) override {
    Sent s{.si = si, .header = header, .payloads = {}};
    for (const auto& p : payloads) s.payloads.emplace_back(static_cast<const char*>(p.data), p.size);
    sent.push_back(s);
    if (respond) respond(sent.back());
    return Status::Ok();
  }
  void Poll(int timeout_ms, const std::function<void(size_t si, transport::Message& m)>& deliver) override {
    ++polls;
    if (replies_.empty()) clock_->Advance(Millis(timeout_ms));
    while (!replies_.empty()) {
      auto [si, m] = std::move(replies_.front());
      replies_.pop_front();
      deliver(si, m);
    }
  }
  const transport::TrafficCounters& traffic(size_t si) const override { return *traffic_[si]; }
  bool TakeRerouted() override { return std::exchange(rerouted, false); }

  // Queues a message from shard `si` for the next poll; `frames` are its payloads.
  void Reply(size_t si, wire::Header header, const std::vector<std::string>& frames = {}) {
    transport::Message m;
    m.header = std::move(header);
    for (const auto& f : frames) m.frames.emplace_back(f.data(), f.size());
    replies_.emplace_back(si, std::move(m));
  }
  // The messages sent to `si` whose body is `body` (e.g. kPushRequest).
  std::vector<Sent> SentTo(size_t si, wire::Header::BodyCase body) const {
    std::vector<Sent> out;
    for (const auto& s : sent)
      if (s.si == si && s.header.body_case() == body) out.push_back(s);
    return out;
  }

  std::vector<Sent> sent;
  std::vector<std::pair<size_t, std::string>> connects;  // (shard, endpoint)
  bool rerouted = false;                                 // TakeRerouted's next answer
  std::function<void(const Sent&)> respond;
  int polls = 0;

 private:
  FakeClock* clock_;
  std::deque<std::pair<size_t, transport::Message>> replies_;
  std::vector<std::unique_ptr<transport::TrafficCounters>> traffic_;
};

}  // namespace geodesic::worker
