// PsClient: a worker's (or the evaluator's) connection to every server
// shard. It cuts the flat parameter vector into the shard map's chunks,
// batches each shard's chunks into messages of at most wire.message_bytes,
// and keeps requests and replies matched.
//
// Pulls are split in two so they overlap compute: RequestPull(c) sends the
// requests and returns; WaitPull(c) later collects the replies (which
// ZeroMQ's I/O thread received in the meantime) into the caller's buffer.
// Pushes send gradient bytes zero-copy; `owner` keeps them alive until
// ZeroMQ has sent them. Unanswered requests are resent after a retry
// interval (servers treat duplicates idempotently), and every wait has a
// deadline and reports who it waits for. What a push carries (momentum and
// error feedback, top-k, codecs) is compression::PushCompressor's policy;
// PsClient keeps the transport and the request bookkeeping. Torch-free.
// Not synchronized, and nothing in it is shared between threads: one
// thread (the training thread) owns a PsClient and its sockets, and calls
// servers_view and the ledger from that thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>
#include <zmq.hpp>

#include "cluster/chunking.h"
#include "common/clock.h"
#include "common/histogram.h"
#include "common/push_ledger.h"
#include "common/status.h"
#include "compression/codec.h"
#include "compression/push_compressor.h"
#include "config/job.h"
#include "proto/geodesic.pb.h"
#include "transport/message.h"
#include "transport/outbox.h"

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
  // Secured jobs: this process's keypair; each shard's public key comes
  // from the assignment (ServerInfo.curve_public_key). Empty: plaintext.
  transport::CurveKeyPair curve_keys;
  // Replicated jobs: where each shard is served now. Called on every poll
  // with the epoch last seen; returns the current epoch and, when it is
  // newer, fills `servers`. A shard whose endpoint changed (its backup was
  // promoted) is reconnected and sent again every pull and push it has not
  // answered. Unset: endpoints never change.
  std::function<uint64_t(uint64_t seen, std::vector<wire::ServerInfo>* servers)> servers_view;
  // Where to count pushed chunks and their answers so that the counts
  // outlive this process (common/push_ledger.h). Not owned; may be null.
  PushLedger* ledger = nullptr;
};

struct PullOptions {
  bool final = false;  // evaluator: read the current values, skipping the bound
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

struct PullTiming {
  double wait_seconds = 0;   // time WaitPull blocked
  double bound_seconds = 0;  // part of it the servers held the request for the staleness bound
  int64_t min_clock = -1;    // slowest live worker's clock, as the replies reported
};

// Bytes exchanged with the shards of one region, headers included on the
// wire, and as the fp32 values they carry before encoding (raw / wire is
// what compression saved).
struct RegionTraffic {
  std::string region;
  uint64_t wire_sent = 0, wire_received = 0;
  uint64_t raw_sent = 0, raw_received = 0;
};

// A passive estimate of the path from one server region to this worker,
// from the pull replies themselves (no probe traffic).
struct LinkEstimate {
  std::string server_region;
  double min_rtt_ms = 0;  // least request -> reply time, the server's hold excluded
  double mbit = 0;        // EWMA of reply bytes / (reply time - hold - min RTT)
  uint64_t samples = 0;
};

class PsClient {
 public:
  PsClient(zmq::context_t& ctx, PsClientOptions options, const wire::RegisterReply& assignment,
           transport::TrafficCounters* counters, const Clock* clock);

  // Connects to every shard; InvalidArgument for a bad push codec name.
  Status Connect();
  const cluster::ShardMap& shard_map() const { return map_; }
  uint64_t num_params() const { return map_.layout.num_params(); }

  // Offers initial parameter values to every shard and waits until each
  // acknowledged. Shards keep the first values they get, so every worker
  // may call this and all start from the same model.
  Status Init(const float* params, const std::atomic<bool>* stop);

  // Asks every shard for its chunks as of clock `clock`. With
  // after_own_push (a prefetch, see PullOptions and PullRequest in
  // proto/geodesic.proto) a fast network gives fresh reads and a slow one
  // overlaps the transfer with the compute.
  Status RequestPull(int64_t clock, const PullOptions& options = {});
  // Forgets every pull in flight (their late replies are ignored): for a
  // worker that jumps ahead to the live clock after rejoining.
  void DropPulls() { pulls_.clear(); }
  // Feeds the expected compute time of one step (an average) to prefetch holds.
  void NoteComputeSeconds(double seconds);
  double rtt_seconds() const { return rtt_ema_; }
  // Blocks until every chunk of pull `clock` has arrived in
  // params[0, num_params); chunks are copied in as they arrive. `describe` explains a long wait
  // ("blocked at clock 17 by worker 5 at clock 14") in the periodic report.
  // With params == nullptr and `borrowed` set, nothing is copied: the
  // received frames are handed over instead (a zero-copy read).
  // Reads whatever replies wait, without blocking; true once every chunk of
  // pull `clock` is in without error (WaitPull then returns at once).
  bool PullArrived(int64_t clock);
  StatusOr<PullTiming> WaitPull(int64_t clock, bool final, float* params, const std::atomic<bool>* stop,
                                const std::function<std::string()>& describe = {},
                                std::vector<PulledChunk>* borrowed = nullptr);

  // Sends the gradient of step `clock` (num_params values) to the shards;
  // `unit` >= 0 (elastic jobs): the data unit it was computed on. With
  // `only`, just those chunks are pushed and every shard is told that the
  // others are skipped at `clock` (training.fragments).
  Status Push(int64_t clock, const float* grad, std::shared_ptr<const void> owner, int64_t unit = -1,
              const std::optional<cluster::ChunkRange>& only = std::nullopt);
  // Tells every shard this worker finished `clock` without a gradient.
  Status PushSkipped(int64_t clock, int64_t unit = -1);
  // Tells shard index `si` that chunks `ids` (its own) get no gradient at
  // `clock`; no ids: none of its chunks does (a whole skipped step).
  Status PushSkippedChunks(int64_t clock, size_t si, const std::vector<uint32_t>& ids, int64_t unit = -1);
  // The oldest clock with a push not yet acknowledged by every shard
  // (INT64_MAX when none): every clock below it is acknowledged.
  int64_t OldestUnackedClock() const;
  // Blocks until at most `max_unacked_clocks` clocks still await push
  // acknowledgements; returns the seconds it blocked.
  // `max_wait` (if positive) shortens the deadline (membership.rpc_timeout_s).
  StatusOr<double> WaitAcks(size_t max_unacked_clocks, const std::atomic<bool>* stop, Duration max_wait = {});

  // Re-planning (docs/planner.md "In a running job"): takes the coordinator's
  // newer shard map (same layout and servers). Chunks that changed owner
  // start with no pull copy (their new owner answers with full values); a
  // push or pull still unanswered is sent again to the chunks' new owners,
  // split by owner. InvalidArgument for a map of another layout; a map not
  // newer than ours changes nothing.
  Status SwitchMap(const wire::ShardMap& map);
  // Chunks whose owner changed in SwitchMap so far.
  uint64_t chunks_rerouted() const { return chunks_rerouted_; }
  // Requests a shard refused because a chunk had moved away (kept, not lost).
  uint64_t moved_refusals() const { return moved_refusals_; }

  // Per server region, from this worker's pull replies so far.
  std::vector<LinkEstimate> LinkEstimates() const;
  // Per server region (the shard's current one), so far.
  std::vector<RegionTraffic> TrafficByRegion() const;
  // Pull: request -> last reply (the shards' holds included). Push: send ->
  // acknowledgement, per shard.
  const DurationHistogram& pull_latency() const { return pull_latency_; }
  const DurationHistogram& push_latency() const { return push_latency_; }

  uint64_t pushes_refused() const { return pushes_refused_; }
  // The first push a shard refused for good (not OK once one was): Push,
  // WaitAcks and WaitPull return it from then on.
  const Status& push_error() const { return push_error_; }
  uint64_t resyncs() const { return resyncs_; }
  const compression::ErrorFeedback& error_feedback() const { return compressor_->error_feedback(); }
  uint64_t chunks_dropped() const { return chunks_dropped_; }
  // Pushed chunks the shards acknowledged as taken (APPLIED or DUPLICATE),
  // each push counted once however often it was sent.
  // Shards reconnected to a promoted backup.
  uint64_t redirects() const { return redirects_; }

  // Takes one message from shard index `shard` (position in the shard map's
  // server list) that passed the framing checks: what Poll does with each
  // arrival. Public so that tests/fuzz/fuzz_ps_client.cc can feed replies
  // without a server. A malformed reply fails the pull it answers (WaitPull
  // returns the error) and never writes outside the pull's buffer.
  void OnMessage(int shard, transport::Message& m);

 private:
  struct Shard {
    int id = 0;
    std::string endpoint;
    std::vector<uint32_t> chunks;
    std::unique_ptr<transport::Socket> socket;
    std::string curve_key;  // the shard's CURVE public key (secured jobs)
    std::string region;
    // Passive link estimate (see LinkEstimate).
    double min_rtt_s = -1;
    double mbit_ema = 0;
    uint64_t mbit_samples = 0;
    // What went to and came from this shard: on the wire (its socket's
    // tally, kept across reconnects) and as fp32 values before encoding.
    std::unique_ptr<transport::TrafficCounters> wire = std::make_unique<transport::TrafficCounters>();
    uint64_t raw_sent = 0, raw_received = 0;
  };
  struct PendingPull {
    int64_t clock = 0;
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
  };

  // Receives and dispatches whatever waits, blocking up to `timeout_ms`.
  void Poll(int timeout_ms);
  Status SendPullRequest(PendingPull& p, size_t shard, bool final);
  // Encodes `batch` (after compressor_->Prepare) with shard `si`'s push codec.
  Status EncodeChunks(size_t si, int64_t clock, const std::vector<uint32_t>& batch,
                      google::protobuf::RepeatedPtrField<wire::ChunkData>* descriptors,
                      std::vector<transport::Payload>* payloads);
  // `chunks` cut into runs that fit one message of wire.message_bytes.
  std::vector<std::vector<uint32_t>> Batches(const std::vector<uint32_t>& chunks) const {
    return cluster::BatchChunks(map_.layout, chunks, options_.wire.message_bytes);
  }
  // Describes `batch` (fp32, with the versions we hold) and adds its values
  // at `base` as payloads: zero-copy under `owner`, or copied if it is null.
  void AddChunks(const std::vector<uint32_t>& batch, const float* base, const std::shared_ptr<const void>& owner,
                 google::protobuf::RepeatedPtrField<wire::ChunkData>* descriptors,
                 std::vector<transport::Payload>* payloads) const;
  Status Decode(PendingPull& p, const wire::ChunkData& d, const zmq::message_t& frame);
  // OnMessage by body.
  void OnPullReply(int shard, transport::Message& m);
  // InvalidArgument unless chunk descriptor `i` of `m` fits the chunk shard `shard` owns.
  Status CheckPulledChunk(int shard, const transport::Message& m, int i) const;
  // The passive link estimate (LinkEstimate) from one pull reply.
  void NoteReplyTiming(int shard, PendingPull& p, const transport::Message& m);
  void OnPushAck(int shard, const wire::Header& h);
  void OnErrorReply(int shard, const wire::Header& h);
  void OnPushRefused(const wire::Header& h, transport::OutboxEntry& push, const Status& err);
  // Sends pull `p` again to every shard owning a chunk it still misses
  // (only chunks in `only`, when given).
  Status RerequestMissing(PendingPull& p, bool final, const std::vector<uint32_t>* only = nullptr);
  // WaitPull's loop: polls until pull `it` is complete or failed.
  Status AwaitPull(std::map<int64_t, PendingPull>::iterator it, int64_t clock, bool final,
                   const std::atomic<bool>* stop, const std::function<std::string()>& describe);
  // Hands pull `p`'s frames over without copying (WaitPull's zero-copy read).
  Status Borrow(PendingPull& p, std::vector<PulledChunk>* borrowed);
  // InvalidArgument unless a pulled chunk (its size already checked) can be
  // read in place: plain fp32, every value finite.
  static Status CheckBorrowable(const wire::ChunkData& d, const zmq::message_t& frame);
  // Unacknowledged pushes split by the chunks' owners in the new map.
  void ReroutePushes();
  // Sends what is due for a resend: pushes and inits from the outboxes,
  // pulls without progress for retry_after_s.
  void ResendStale();
  // Follows options_.servers_view (see there).
  void FollowRedirects();
  Status ConnectShard(Shard& s);
  std::string DescribeShardsMissing(const PendingPull& p) const;

  PsClientOptions options_;
  const Clock* clock_;
  zmq::context_t& ctx_;
  transport::TrafficCounters* counters_;
  cluster::ShardMap map_;
  std::vector<Shard> shards_;
  std::vector<uint64_t> versions_;  // per chunk: version of the values we hold
  std::vector<int64_t> copy_seq_;   // per chunk: changes applied since full values (-1: none)
  std::unique_ptr<compression::PushCompressor> compressor_;
  std::vector<uint8_t> zstd_scratch_;
  uint64_t resyncs_ = 0;
  DurationHistogram pull_latency_, push_latency_;
  std::map<int64_t, PendingPull> pulls_;
  // Unacknowledged pushes and (while Init waits) inits, by request id; an
  // entry's dest is the shard's index in shards_.
  transport::Outbox<uint64_t> pushes_, inits_;
  std::vector<Status> init_errors_;
  Status push_error_;  // see push_error()
  uint64_t next_request_ = 1;
  uint64_t pushes_refused_ = 0, chunks_dropped_ = 0, redirects_ = 0, chunks_rerouted_ = 0, moved_refusals_ = 0;
  uint64_t servers_epoch_ = 0;
  std::vector<float> scratch_;
  double compute_ema_ = 0;  // seconds per step, as the trainer reported
  double rtt_ema_ = -1;     // request round trip without server holds; -1 until measured
};

}  // namespace geodesic::worker
