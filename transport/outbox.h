#pragma once

// Outbox: requests sent at least once. Every sender that needs an
// acknowledgement (a worker's pushes and initial values, a primary's
// replication ops, a shard's outgoing chunk transfers) keeps what it sent
// here until the receiver acknowledges it, and sends it again under one
// retry policy. Receivers treat a resend as a duplicate (push ids,
// replication sequence numbers, migration ids make them idempotent), so
// sending again is always safe.
//
// The policy: an entry unacknowledged for `retry_after` since it was last
// sent is due; Due() hands out the due entries, oldest key first, and
// stamps them sent. Resend() makes every entry due at once (the receiver
// said it misses some), at most once per `min_resend_gap`, so a storm of
// such complaints does not become a storm of resends.
//
// The Outbox only keeps and schedules; the caller sends (it owns the
// sockets). Keys are ordered (request ids, sequence numbers, chunk ids).
// Time is passed in, so tests use a FakeClock. Not synchronized: one thread
// owns it.

#include <map>
#include <vector>

#include "common/clock.h"
#include "proto/geodesic.pb.h"
#include "transport/message.h"

namespace geodesic::transport {

struct RetryPolicy {
  // How long an entry waits for its acknowledgement before it is sent again,
  // and again after each resend. Too short floods a slow peer with
  // duplicates; too long stalls the sender after a lost message.
  Duration retry_after = std::chrono::seconds(1);
  // The least time between two Resend() calls that take effect.
  Duration min_resend_gap = std::chrono::seconds(0);
};

struct OutboxEntry {
  int dest = 0;  // the caller's index of the receiver (a shard, a peer)
  wire::Header header;
  std::vector<Payload> payloads;
  TimePoint first_sent{};
  TimePoint sent{};  // last time it went out
  int resends = 0;
};

template <class Key>
class Outbox {
 public:
  explicit Outbox(RetryPolicy policy = {}) : policy_(policy) {}

  void set_policy(RetryPolicy policy) { policy_ = policy; }
  const RetryPolicy& policy() const { return policy_; }

  // Records a message just sent to `dest`. A key already present is replaced.
  OutboxEntry& Add(const Key& key, int dest, wire::Header header, std::vector<Payload> payloads, TimePoint now) {
    OutboxEntry& e = entries_[key];
    e = OutboxEntry{.dest = dest,
                    .header = std::move(header),
                    .payloads = std::move(payloads),
                    .first_sent = now,
                    .sent = now,
                    .resends = 0};
    return e;
  }

  // Removes an acknowledged entry; false for an unknown key (a duplicate or
  // late acknowledgement, which is expected and harmless).
  bool Ack(const Key& key) { return entries_.erase(key) > 0; }

  // Removes every entry with a key up to and including `key` (cumulative
  // acknowledgements, e.g. replication sequence numbers); returns how many.
  size_t AckThrough(const Key& key) {
    size_t n = 0;
    for (auto it = entries_.begin(); it != entries_.end() && !(key < it->first); it = entries_.erase(it)) ++n;
    return n;
  }

  // The entries due for a resend at `now`, oldest key first, each stamped as
  // sent now. The pointers stay valid until the next Add, Ack or Clear.
  std::vector<std::pair<Key, OutboxEntry*>> Due(TimePoint now) {
    std::vector<std::pair<Key, OutboxEntry*>> due;
    for (auto& [key, e] : entries_) {
      if (now - e.sent < policy_.retry_after) continue;
      e.sent = now;
      ++e.resends;
      due.emplace_back(key, &e);
    }
    return due;
  }

  // Makes every entry due now (see the policy above); false, and nothing
  // changes, within `min_resend_gap` of the last Resend that took effect.
  bool Resend(TimePoint now) {
    if (resent_once_ && now - last_resend_ < policy_.min_resend_gap) return false;
    resent_once_ = true;
    last_resend_ = now;
    for (auto& [key, e] : entries_) e.sent = now - policy_.retry_after;
    return true;
  }

  OutboxEntry* Find(const Key& key) {
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second;
  }
  void Clear() { entries_.clear(); }
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  auto begin() { return entries_.begin(); }
  auto end() { return entries_.end(); }
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }

 private:
  RetryPolicy policy_;
  std::map<Key, OutboxEntry> entries_;
  bool resent_once_ = false;
  TimePoint last_resend_{};
};

}  // namespace geodesic::transport
