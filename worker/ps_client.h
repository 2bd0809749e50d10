// PsClient: a worker's (or the evaluator's) client of every server shard,
// in the spirit of ps-lite's KVWorker: Push and Pull send, and the caller
// waits by timestamp, a clock (WaitPull for the pull of a clock, WaitAcks
// for the acknowledgements of the pushes of the oldest clocks). It cuts the
// flat parameter vector into the shard map's chunks and each shard's
// chunks into messages of at most wire.message_bytes.
//
// Pulls are split in two so that they overlap compute: Pull(c) sends the
// requests and returns; WaitPull(c) later collects the replies (received
// meanwhile) into the caller's buffer, or hands the frames over
// (zero-copy). Pushes send gradient bytes zero-copy; `owner` keeps them
// alive until sent. Unanswered requests are sent again after a retry
// interval (shards treat duplicates idempotently), and every wait has a
// deadline and reports whom it waits for.
//
// The parts, each in a collaborator of its own: ShardLinks, the send seam
// (worker/shard_links.h: ZeroMQ in a process, a fake in tests); PsRequests,
// the requests in flight (worker/ps_requests.h); ShardRoutes, the shard map
// and where each shard is, with redirects and re-planned maps
// (worker/shard_routes.h); ChunkCodec, the compression policy both ways
// (worker/chunk_codec.h); LinkMonitor, the passive link estimates
// (worker/link_monitor.h). Torch-free.
//
// Threading: not synchronized. One thread (the training thread) owns a
// PsClient and its links, and calls servers_view and the ledger from it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "cluster/chunking.h"
#include "common/clock.h"
#include "common/histogram.h"
#include "common/push_ledger.h"
#include "common/status.h"
#include "config/job.h"
#include "proto/geodesic.pb.h"
#include "transport/message.h"
#include "worker/chunk_codec.h"
#include "worker/link_monitor.h"
#include "worker/ps_requests.h"
#include "worker/shard_links.h"
#include "worker/shard_routes.h"

namespace geodesic::worker {

struct PsClientOptions {
  std::string job;
  wire::Role role = wire::WORKER;
  int id = 0;
  WireSpec wire;
  MembershipSpec timing;
  // Push codec by the shard's region (compression/codec.h names); a region
  // not listed uses fp32. Pulls are encoded by the shards.
  std::map<std::string, std::string> push_codecs;
  bool error_feedback = true;  // keep what lossy push codecs drop for later pushes
  // > 0: momentum correction (compression.momentum_correction): push the
  // velocity v = momentum * v + g instead of g, zeroing v where a sparse
  // codec sent a value.
  double local_momentum = 0;
  int64_t sparsity_warmup_steps = 0;  // see CompressionSpec
  uint64_t seed = 1;                  // stochastic rounding and random-k
  double retry_after_s = 5.0;         // resend a request unanswered this long
  // Replicated jobs: where each shard is served now. Called on every poll
  // with the epoch last seen; returns the current epoch and, when it is
  // newer, fills `servers`. A shard whose endpoint changed (its backup was
  // promoted) is reconnected and sent again every pull and push it has not
  // answered. Unset: endpoints never change.
  ServersViewFn servers_view;
  // Where to count pushed chunks and their answers so that the counts
  // outlive this process (common/push_ledger.h). Not owned; may be null.
  PushLedger* ledger = nullptr;
  // Told each push message's first acknowledgement (a regional aggregator
  // relays the shards' answers to its workers).
  std::function<void(const wire::PushRequest& sent, const wire::PushAck& ack)> on_push_ack = {};
};

struct PullOptions {
  bool final = false;  // evaluator: read the current values, skipping the bound (waited for as kFinalPull)
  bool full = false;   // exact values, not changes (our copy is new or lost)
  // Sent before the step it follows is computed: servers hold it until our
  // push of clock - 1 has been applied to each chunk (and answer chunk by
  // chunk as that happens), but at most max_hold_s after it arrived.
  bool after_own_push = false;
  double max_hold_s = -1;  // < 0: expected compute time minus the round trip
  // Only these chunks (training.fragments); unset: every chunk.
  std::optional<cluster::ChunkRange> only = std::nullopt;
};

// A pulled chunk handed over without copying: the values stay in the
// received ZeroMQ frame (fp32, read-only) for as long as this object lives.
struct PulledChunk {
  uint32_t chunk_id = 0;
  uint64_t version = 0;
  zmq::message_t frame;
  const float* values() const { return static_cast<const float*>(frame.data()); }
};

// Where WaitPull puts a pull's values, and what bounds the wait.
struct PullInto {
  float* params = nullptr;  // copied into params[0, num_params) as chunks arrive
  // With params null: the received frames are handed over instead (a
  // zero-copy read of plain fp32 values).
  std::vector<PulledChunk>* borrowed = nullptr;
  const std::atomic<bool>* stop = nullptr;  // required: Cancelled once it is set
  // Explains a long wait ("worker 5 at clock 14 ...") in the periodic report.
  std::function<std::string()> describe = {};
};

struct PullTiming {
  double wait_seconds = 0;   // time WaitPull blocked
  double bound_seconds = 0;  // part of it the servers held the request for the staleness bound
  int64_t min_clock = -1;    // slowest live worker's clock, as the replies reported
};

// What Push sends for one clock.
struct PushData {
  // num_params values; null: the clock is skipped, no gradient (every
  // shard is told, so that it does not wait for us).
  const float* values = nullptr;
  std::shared_ptr<const void> owner = {};  // keeps `values` alive until sent (zero-copy)
  int64_t unit = -1;                       // elastic jobs: the data unit it was computed on
  // Only these chunks are pushed, and every shard is told that the others
  // are skipped at this clock (training.fragments), unless `skip_others`
  // is false (a regional aggregator: the workers told the shards themselves).
  std::optional<cluster::ChunkRange> only = std::nullopt;
  bool skip_others = true;
  // A regional aggregator's combined push (PushRequest.covers): the workers
  // whose gradients `values` sums, increasing. Empty for a worker's own.
  std::vector<int> covers = {};
};

// What the client counted so far.
struct PsClientStats {
  uint64_t pushes_refused = 0;   // pushes a shard refused for good
  uint64_t chunks_dropped = 0;   // pushed chunks a shard dropped (their BSP round had closed)
  uint64_t resyncs = 0;          // pulled changes for another copy, asked again in full
  uint64_t redirects = 0;        // shards reconnected to a promoted backup
  uint64_t chunks_rerouted = 0;  // chunks whose owner changed in SwitchMap
  uint64_t moved_refusals = 0;   // requests refused because a chunk had moved away (kept, not lost)
  double residual_norm = 0;      // L2 norm of the push error-feedback residual
  // The first push a shard refused for good (not OK once one was): Push,
  // WaitAcks and WaitPull return it from then on.
  Status push_error;
  std::vector<LinkEstimate> links;     // per server region, from the pull replies
  std::vector<RegionTraffic> traffic;  // per server region (the shard's current one)
  // Pull: request -> last reply (the shards' holds included). Push: send ->
  // acknowledgement, per shard.
  DurationHistogram pull_latency, push_latency;
};

class PsClient {
 public:
  PsClient(std::unique_ptr<ShardLinks> links, PsClientOptions options, const wire::RegisterReply& assignment,
           const Clock* clock);

  // Connects to every shard; InvalidArgument for a bad push codec name.
  Status Connect();
  const cluster::ShardMap& shard_map() const { return routes_.map(); }

  // Offers initial parameter values to every shard and waits until each
  // acknowledged. Shards keep the first values they get, so every worker
  // may call this and all start from the same model. Chunks are offered by
  // digest first, and values go only where a shard asks for them (the
  // first worker to offer a chunk not yet set); docs/wire.md "Initial
  // values".
  Status Init(const float* params, const std::atomic<bool>* stop);
  // Whether, after Init, every chunk's initial values on the shards are
  // ours (we set them, or offered the same): then the model at clock 0 is
  // what we hold, and the first pull has nothing to bring.
  bool HoldsAllInitial() const;

  // Asks every shard for its chunks as of clock `clock`; WaitPull(clock)
  // (a final pull: WaitPull(kFinalPull)) collects them. With after_own_push
  // (a prefetch, see PullOptions and PullRequest in proto/geodesic.proto) a
  // fast network gives fresh reads and a slow one overlaps the transfer
  // with the compute.
  Status Pull(int64_t clock, const PullOptions& options = {});
  // Blocks until every chunk of pull `clock` has arrived `into` the
  // caller's buffer (or been handed over). A malformed reply fails the pull
  // and never writes outside the buffer.
  StatusOr<PullTiming> WaitPull(int64_t clock, const PullInto& into);
  // Reads whatever replies wait, without blocking; true once every chunk of
  // pull `clock` is in without error (WaitPull then returns at once).
  bool PullArrived(int64_t clock);
  // Reads whatever replies wait and sends again what is unanswered past the
  // retry interval, without blocking: for an owner with a loop of its own
  // (the regional aggregator). The first push a shard refused for good, or OK.
  Status Tick();
  // Forgets every pull in flight (their late replies are ignored): for a
  // worker that jumps ahead to the live clock after rejoining.
  void DropPulls() { requests_.DropPulls(); }
  // Feeds the expected compute time of one step (an average) to prefetch holds.
  void NoteComputeSeconds(double seconds);

  // The version of `chunk` whose values our pulls last wrote.
  uint64_t HeldVersion(uint32_t chunk) const { return codec_.version(chunk); }
  // Sends clock `clock`'s push to the shards (see PushData).
  Status Push(int64_t clock, const PushData& data);
  // Blocks until at most `max_unacked_clocks` clocks still await push
  // acknowledgements; returns the seconds it blocked. `max_wait` (if
  // positive) shortens the deadline (membership.rpc_timeout_s).
  StatusOr<double> WaitAcks(size_t max_unacked_clocks, const std::atomic<bool>* stop, Duration max_wait = {});
  // The oldest clock with a push not yet acknowledged by every shard
  // (INT64_MAX when none): every clock below it is acknowledged.
  int64_t OldestUnackedClock() const { return requests_.OldestUnackedClock(); }

  // Re-planning (docs/planner.md "In a running job"): takes the coordinator's
  // newer shard map (same layout and servers). Chunks that changed owner
  // start with no pull copy (their new owner answers with full values); a
  // push or pull still unanswered is sent again to the chunks' new owners,
  // split by owner. InvalidArgument for a map of another layout; a map not
  // newer than ours changes nothing.
  Status SwitchMap(const wire::ShardMap& map);

  PsClientStats Stats() const;

  // Takes one message from shard index `shard` (position in the shard map's
  // server list) that passed the framing checks: what polling does with
  // each arrival. Public so that tests/fuzz/fuzz_ps_client.cc can feed
  // replies without a server. A malformed reply fails the pull it answers
  // (WaitPull returns the error) and never writes outside the pull's buffer.
  void OnMessage(int shard, transport::Message& m);

 private:
  // Receives and dispatches whatever waits, blocking up to `timeout_ms`.
  void Poll(int timeout_ms);
  Status SendPullRequest(PendingPull& p, size_t si);
  // Sends pull `p` again to every shard owning a chunk it still misses
  // (only chunks in `only`, when given).
  Status RerequestMissing(PendingPull& p, const std::vector<uint32_t>* only = nullptr);
  // Records `h` (with its payloads) in `box` and sends it to shard `si`.
  Status SendTracked(transport::Outbox<uint64_t>& box, size_t si, wire::Header h,
                     std::vector<transport::Payload> payloads);
  Status PushChunks(int64_t clock, size_t si, const std::vector<uint32_t>& chunks, const float* values,
                    const std::shared_ptr<const void>& owner, const PushData& data);
  // Tells shard index `si` that chunks `ids` (its own) get no gradient at
  // `clock`; no ids: none of its chunks does (a whole skipped step).
  Status PushSkippedChunks(int64_t clock, size_t si, const std::vector<uint32_t>& ids, int64_t unit = -1);
  Status WaitInits(const std::atomic<bool>* stop);
  // Sends shard index si `chunks[si]` of `params`: offers (digests) or values.
  Status SendInits(const std::vector<std::vector<uint32_t>>& chunks, const float* params, bool offer,
                   const std::atomic<bool>* stop);
  void OnInitAck(int shard, const wire::Header& h);

  // OnMessage by body.
  void OnPullReply(int shard, transport::Message& m);
  // One chunk of a pull reply into pull `p`.
  void TakeChunk(int shard, PendingPull& p, const wire::ChunkData& d, zmq::message_t& frame);
  Status Decode(PendingPull& p, const wire::ChunkData& d, const zmq::message_t& frame);
  // InvalidArgument unless chunk descriptor `i` of `m` fits the chunk shard `shard` owns.
  Status CheckPulledChunk(int shard, const transport::Message& m, int i) const;
  // The passive link estimate (LinkMonitor) from one pull reply.
  void NoteReplyTiming(int shard, PendingPull& p, const transport::Message& m);
  void OnPushAck(int shard, const wire::Header& h);
  void OnErrorReply(int shard, const wire::Header& h);
  void OnPushRefused(const wire::Header& h, transport::OutboxEntry& push, const Status& err);

  // WaitPull before its loop: where arrived chunks go from now on.
  Status PrepareWait(PendingPull& p, const PullInto& into);
  // WaitPull's loop: polls until pull `p` is complete or failed.
  Status AwaitPull(PendingPull& p, const PullInto& into);
  // Hands pull `p`'s frames over without copying (WaitPull's zero-copy read).
  void Borrow(PendingPull& p, std::vector<PulledChunk>* borrowed);
  PullTiming Finished(const PendingPull& p, TimePoint entered);
  std::string DescribeShardsMissing(const PendingPull& p) const;
  std::string DescribeUnacked() const;

  // Sends what is due for a resend: pushes and inits from the outboxes,
  // pulls without progress for retry_after_s.
  void ResendStale();
  // Follows options_.servers_view: reconnects moved shards and resends.
  void FollowRedirects();
  void Resend(size_t si);
  // Unacknowledged pushes split by the chunks' owners in the new map.
  void ReroutePushes();

  const PsClientOptions options_;
  const Clock* clock_;
  std::unique_ptr<ShardLinks> links_;
  ShardRoutes routes_;
  PsRequests requests_;
  ChunkCodec codec_;
  LinkMonitor monitor_;
  PsClientStats stats_;  // counters and latencies; links, traffic and residual filled by Stats()
  std::vector<Status> init_errors_;
  std::vector<bool> held_initial_;                // per chunk: the shards' initial values are ours
  std::vector<std::vector<uint32_t>> init_send_;  // per shard index: chunks the last offers were asked for
  std::vector<std::vector<uint32_t>> init_wait_;  // per shard index: chunks another worker is sending
  double compute_ema_ = 0;                        // seconds per step, as the trainer reported
  double rtt_ema_ = -1;                           // request round trip without server holds; -1 until measured
};

}  // namespace geodesic::worker
