// PsRequests: a PsClient's requests in flight, and which answers they still
// miss. Pulls are kept by their clock (a final pull under kFinalPull): one
// request per shard, whose chunk list shrinks as replies arrive and which
// is asked again when the pull as a whole makes no progress for the retry
// interval. Pushes and initial values are kept message by message in
// Outboxes (transport/outbox.h) under their request ids until a shard
// acknowledges them, and are due again after the same interval. Request
// ids count up from 1 and never repeat, so a late answer to a forgotten
// request is recognized and ignored.
//
// It keeps and matches only; the PsClient sends. Time is passed in (a
// FakeClock in tests). Not synchronized: the PsClient's thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "cluster/chunking.h"
#include "common/clock.h"
#include "common/status.h"
#include "proto/geodesic.pb.h"
#include "transport/outbox.h"

namespace geodesic::worker {

inline constexpr int64_t kFinalPull = -1;  // the key (and wire clock) of a final pull

struct PendingPull {
  int64_t clock = 0;        // the key: the pull's clock, or kFinalPull
  int64_t asked_clock = 0;  // the clock the caller named (for messages)
  bool after_own_push = false;
  bool full = false;
  std::vector<uint32_t> resync;  // chunks whose change did not fit our copy: ask again, full
  double max_hold_s = -1;
  float* dest = nullptr;  // set by WaitPull: decode on arrival
  bool borrow = false;    // set by WaitPull for a zero-copy read: check on arrival
  TimePoint requested{};
  std::vector<uint64_t> request_ids;  // per shard
  std::vector<uint64_t> reply_bytes;  // per shard, received so far
  size_t remaining = 0;
  std::vector<bool> got;                                         // per chunk id
  std::vector<std::pair<wire::ChunkData, zmq::message_t>> data;  // arrived before WaitPull
  uint64_t max_held_us = 0;
  uint64_t max_hold_us = 0;
  TimePoint last_reply{};
  int64_t min_clock = -1;
  TimePoint last_progress{};
  Status error;

  bool final() const { return clock == kFinalPull; }
  // Whether any of `chunks` is still missing.
  bool Misses(const std::vector<uint32_t>& chunks) const;
};

class PsRequests {
 public:
  explicit PsRequests(transport::RetryPolicy retry);

  uint64_t NextId() { return next_id_++; }
  const transport::RetryPolicy& retry() const { return pushes_.policy(); }

  // A new pull under `key` (replacing any), every chunk missing but those
  // outside `only`; the caller sends its requests.
  PendingPull& StartPull(int64_t key, int64_t asked_clock, const cluster::ChunkLayout& layout, size_t shards,
                         const std::optional<cluster::ChunkRange>& only, TimePoint now);
  PendingPull* FindPull(int64_t key);
  // Removes pull `key` and returns it.
  PendingPull TakePull(int64_t key);
  // Forgets every pull (their late replies are then ignored).
  void DropPulls() { pulls_.clear(); }
  std::map<int64_t, PendingPull>& pulls() { return pulls_; }
  // The pulls with chunks missing and no progress for the retry interval,
  // stamped as retried now.
  std::vector<PendingPull*> StalePulls(TimePoint now);
  // Fails every pull that request `id` belongs to with `error`.
  void FailPullsOf(uint64_t id, const Status& error);

  transport::Outbox<uint64_t>& pushes() { return pushes_; }
  transport::Outbox<uint64_t>& inits() { return inits_; }
  const transport::Outbox<uint64_t>& pushes() const { return pushes_; }
  // Distinct clocks with a push not yet acknowledged.
  size_t UnackedClocks() const;
  // The oldest clock with a push not yet acknowledged (INT64_MAX when none).
  int64_t OldestUnackedClock() const;
  // Pushes not acknowledged by shard index -> count.
  std::map<size_t, int> UnackedByShard() const;

 private:
  std::map<int64_t, PendingPull> pulls_;
  transport::Outbox<uint64_t> pushes_, inits_;  // an entry's dest: the shard's index
  uint64_t next_id_ = 1;
};

}  // namespace geodesic::worker
