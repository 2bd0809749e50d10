// PullService: a shard's pulls. A validated pull is answered at once when
// the staleness bound (and, for a worker waiting for its own push, that
// push) allows it; otherwise it is held until a push, a membership change or
// its hold time lets it go. Replies are cut into wire-sized messages by
// cluster::BatchChunks, each chunk encoded with its puller's codec
// (PullCompressor: a worker's link codec, exact values for the evaluator
// and tools). A resent pull replaces the one held for the same clock.
//
// A peer that does not read its replies gets no more than it reads: the
// bytes of pull replies handed to ZeroMQ and not yet written to the peer's
// connection (ZeroMQ frees a frame once written, or dropped) are counted per
// peer, and while a peer's exceed unread_limit() its pulls are dropped
// unanswered (counted in the socket's sends_dropped, as a reply to a full
// queue is), before any reply is built. The replies share the shard's
// parameter buffers, so what a peer that never reads can pin is bounded
// too. A worker reads every reply (one pull at a time), so it stays far
// below the limit.
//
// Owns the held pulls, the per-worker codecs and the compressor's copies.
// Reads the ShardState and ClockTable it is given (the server owns them)
// and answers through a transport::ReplySink (the server's ROUTER; a fake
// in tests/server/pull_service_test.cc). Not synchronized: the server
// loop's thread owns it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/throttle.h"
#include "compression/codec.h"
#include "compression/pull_compressor.h"
#include "config/job.h"
#include "server/consistency.h"
#include "server/shard.h"
#include "transport/links.h"
#include "transport/message.h"

namespace geodesic::server {

class PullService {
 public:
  PullService(const JobSpec& job, int server_id, const Clock* clock, transport::ReplySink* replies);

  // The pull codec of every worker's link to this shard; refuses a bad
  // codec name (a server started by hand checks it at start-up too).
  Status LoadCodecs();
  // Once the shard exists: what to read and the compressor's seed.
  void Start(const ShardState* shard, const ClockTable* clocks, uint64_t seed);

  // A pull that passed ValidatePull, for `chunks`.
  void Take(const transport::Message& m, std::vector<uint32_t> chunks);
  // Answers every held pull that may go now (chunk by chunk for a worker
  // waiting for its own push).
  void ServeHeld();
  // Logs the oldest held pull and why it waits, every report_after_s.
  void ReportHeld();
  // How long the loop may wait (at most `max_ms`) before an own-push hold
  // expires.
  int WaitMs(int max_ms) const;
  // Worker `worker` holds `chunk`'s current values without having pulled
  // them (InitAck.held_chunks): its pulls send changes from those.
  void AssumeHeld(int worker, uint32_t chunk);
  // Every puller's copy of `chunk` starts over (it moved to or from here).
  void ForgetChunk(uint32_t chunk) {
    compressor_.ForgetChunk(chunk);
    SetUnreadLimit();
  }
  // The workers that are not in `live` left or died: their
  // pull copies go (compression::PullCompressor::ForgetWorkersBut).
  void ForgetDeparted(const std::vector<int>& live) { compressor_.ForgetWorkersBut(live); }
  size_t held() const { return held_.size(); }
  // Unwritten reply bytes a peer may have before its pulls are dropped:
  // four times the shard's parameters, at least 16 MiB.
  uint64_t unread_limit() const { return unread_limit_; }
  // Pulls dropped so far because their peer did not read (count).
  uint64_t withheld() const { return withheld_; }

 private:
  struct HeldPull {
    std::string peer;
    uint64_t request_id = 0;
    int sender_id = 0;
    wire::Role role = wire::WORKER;
    int64_t clock = 0;
    std::vector<uint32_t> chunks;
    TimePoint since{};
    bool wait_for_own_push = false;
    bool full = false;                   // exact values, and the puller's copy starts over
    TimePoint hold_until{};              // give up waiting for the own push then
    std::optional<TimePoint> bound_met;  // when the staleness bound first allowed it
  };

  // Whether the bound and initialization allow the read at all.
  bool BoundAllows(const HeldPull& p) const;
  bool CanServe(HeldPull& p);
  // Sends `chunks` of pull `p` (all of them if null).
  void Serve(const HeldPull& p, const std::vector<uint32_t>* chunks = nullptr);
  // One reply message of `p` with `batch`; false if a chunk would not encode.
  bool FillReply(const HeldPull& p, const std::vector<uint32_t>& batch, wire::Header* reply,
                 std::vector<transport::Payload>* payloads);
  const compression::CodecSpec& CodecFor(int worker) const;
  // The pull codec of the puller of `p`: a worker's or an aggregator's
  // link's; exact values for the evaluator and tools.
  const compression::CodecSpec& CodecOf(const HeldPull& p) const;
  // Bytes of replies to `peer` not yet written (shared with the frames'
  // release, on ZeroMQ's I/O thread).
  using Unread = std::shared_ptr<std::atomic<int64_t>>;
  const Unread& UnreadOf(const std::string& peer);
  // Whether `p`'s peer reads its replies (under unread_limit()); counts
  // and logs the pull dropped if not.
  bool Reading(const HeldPull& p);
  void SetUnreadLimit();

  const JobSpec& job_;
  const int server_id_;
  const Clock* clock_;
  transport::ReplySink* replies_;
  Throttle failed_reply_log_{std::chrono::seconds(1)};
  const ShardState* shard_ = nullptr;
  const ClockTable* clocks_ = nullptr;
  std::vector<HeldPull> held_;
  std::map<int, compression::CodecSpec> codecs_;             // by worker
  std::map<int, compression::CodecSpec> aggregator_codecs_;  // by region index
  compression::CodecSpec fp32_;
  compression::PullCompressor compressor_;
  TimePoint next_report_{};
  std::unordered_map<std::string, Unread> unread_;  // by peer (routing id)
  uint64_t unread_limit_ = 16 << 20;
  uint64_t withheld_ = 0;
  Throttle withheld_log_{std::chrono::seconds(1)};
};

}  // namespace geodesic::server
