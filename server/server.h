// Server: one parameter-server shard process. It binds a ROUTER socket,
// joins the job through the coordinator, takes the chunks the shard map
// gives it, and then serves pulls, pushes and initial values until the job
// finishes or it is told to stop.
//
// Threading: Run() is a single-threaded event loop that owns the ROUTER
// socket and the ShardState; the cluster::MemberClient's heartbeat thread only reads
// the atomic progress counters. ZeroMQ's I/O thread moves bytes in the
// background, so the loop applies one message's gradients while the next
// ones are still arriving. See docs/architecture.md.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "cluster/member_client.h"
#include "common/clock.h"
#include "common/status.h"
#include "compression/codec.h"
#include "config/job.h"
#include "server/pull_compressor.h"
#include "server/requests.h"
#include "server/shard.h"
#include "transport/message.h"

namespace geodesic::server {

struct ServerProcessOptions {
  JobSpec job;
  int id = 0;
  std::string bind;         // e.g. tcp://127.0.0.1:* (a free port)
  std::string coordinator;  // coordinator endpoint
  std::string stats_file;   // if set, stats JSON is written here periodically and at exit
  // Checkpoints (server/checkpoint.h) go under this directory; empty: none.
  std::string checkpoint_dir;
  // A resume plan (ResumePlan JSON): the shard loads its chunks from the
  // plan's files before serving, and its workers start at the plan's clocks.
  std::string resume_file;
  // Restarted in place after a crash: load this shard's newest valid
  // checkpoint under checkpoint_dir and take the workers' clocks from the
  // coordinator (updates acknowledged after that checkpoint are lost).
  bool recover = false;
  // Replicated jobs: this process is shard `id`'s backup. It registers as
  // (BACKUP, id), applies the primary's replication ops and serves nothing
  // else until the coordinator promotes it (docs/reliability.md).
  bool backup = false;
  // Bumped (e.g. by a SIGUSR1 handler) to ask for a checkpoint now.
  const std::atomic<uint64_t>* checkpoint_requests = nullptr;
  transport::MemberCredentials credentials;  // secured jobs; the ROUTER serves with credentials.keys
};

class Server {
 public:
  Server(ServerProcessOptions options, zmq::context_t& ctx, const Clock* clock);
  Status Run(const std::atomic<bool>* stop);

  // Counters for tests and the stats file.
  const std::map<std::string, uint64_t>& refused() const { return refused_; }

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

  void Handle(transport::Message& m);
  void HandlePull(transport::Message& m);
  void HandlePush(transport::Message& m);
  void HandleInit(transport::Message& m);
  // Backup: one op of the primary's log.
  void HandleReplicate(transport::Message& m);
  // Primary: sends the taken request `m` to the backup and holds `reply`
  // until the backup acknowledges it; without a backup, sends `reply` now.
  void Replicate(transport::Message& m, wire::Header reply);
  // Primary: the backup's acks (and refusals); gives up on a silent backup.
  void DrainReplica();
  void ReplicationDegraded(const std::string& why);
  // Sends op `seq` to the backup and keeps it until acknowledged; `reply`
  // goes to `peer` then.
  void SendOp(uint64_t seq, wire::Header op, std::vector<transport::Payload> payloads, const std::string& peer,
              std::optional<wire::Header> reply);
  void ResendPending(const std::string& why);
  // Backup: takes over the shard (its clocks are the primary's last ones).
  void Promote();
  bool serving() const { return !options_.backup || promoted_; }
  void Refuse(const transport::Message& m, wire::Refusal reason, const Status& status);
  ShardContext Context();
  const compression::CodecSpec& PullCodecFor(int worker) const;
  // Whether the bound and initialization allow the read at all.
  bool BoundAllows(const HeldPull& p) const;
  bool CanServe(HeldPull& p);
  // Sends `chunks` of pull `p` (all of them if null).
  void ServePull(const HeldPull& p, const std::vector<uint32_t>* chunks = nullptr);
  void ServeHeldPulls();
  void SyncMembership();
  void ReportHeldPulls();
  void WriteStats() const;
  void PublishProgress();
  // Loads the resume plan's checkpoints into shard_ and seeds the clocks.
  Status Resume();
  // Loads this shard's newest valid checkpoint (options_.recover).
  Status Recover();
  // Writes a checkpoint when the clock passed the next multiple of
  // checkpoint.every_clocks, or one was requested, or `reason` is given.
  void MaybeCheckpoint(const char* reason = nullptr);
  // Re-planning (wan.replan; docs/planner.md "In a running job"): follows the
  // coordinator's migration (sends this shard's moving chunks once told to,
  // resends unacknowledged ones, reports when all were taken) and its
  // published shard map.
  void SyncMigration();
  // A destination shard: takes one chunk of a migration.
  void HandleTransfer(transport::Message& m);
  // A source shard: the destinations' acknowledgements.
  void DrainTransfers();
  // The chunk a pull or push names that moved away from here, if any.
  std::optional<uint32_t> MovedChunk(const wire::Header& h) const;
  // Secured jobs: installs the coordinator's list of authorized client keys
  // (heartbeat thread), and checks a message's key against its sender.
  void Authorize(const wire::HeartbeatReply& r);
  Status CheckSender(const transport::Message& m) const;

  ServerProcessOptions options_;
  const Clock* clock_;
  zmq::context_t& ctx_;
  transport::TrafficCounters counters_;
  std::unique_ptr<transport::ZapHandler> zap_;  // secured jobs: admits only authorized client keys
  transport::Socket socket_;
  mutable std::mutex keys_mu_;
  std::map<std::string, int> key_owner_;  // guarded by keys_mu_: key -> worker id (-1: evaluator)
  std::string primary_key_;               // guarded by keys_mu_: a backup's primary's key (secured jobs)
  std::unique_ptr<cluster::MemberClient> member_;
  std::unique_ptr<ShardState> shard_;
  ClockTable clocks_;
  int num_workers_ = 0;
  std::vector<HeldPull> held_;
  uint64_t seen_replies_ = 0;
  std::map<std::string, uint64_t> refused_;
  TimePoint next_report_{};
  // Mirrors for the heartbeat thread.
  std::atomic<uint64_t> pub_updates_{0}, pub_dropped_{0}, pub_refused_{0}, pub_held_{0};
  std::atomic<double> pub_stale_mean_{0};
  std::atomic<int64_t> pub_stale_max_{0};
  std::atomic<bool> pub_promoted_{false};
  std::atomic<uint64_t> pub_updates_at_promotion_{0};
  RequestDecoder decoder_;
  std::map<int, compression::CodecSpec> pull_codecs_;  // by worker
  compression::CodecSpec fp32_;
  PullCompressor pulls_{cluster::ChunkLayout(), 0};
  std::string reported_error_;
  int64_t next_checkpoint_clock_ = 0;
  bool clocks_from_coordinator_ = false;
  bool restored_ = false;  // started from a checkpoint (no initial checkpoint then)  // recovering: seed clocks_ from
                           // the first membership view
  int64_t last_min_clock_ = 0;  // the slowest live worker's clock when one was last live
  uint64_t seen_checkpoint_requests_ = 0;
  uint64_t checkpoints_written_ = 0;
  int64_t last_checkpoint_clock_ = -1;
  double last_checkpoint_ms_ = 0;
  std::string last_checkpoint_error_;
  // Replication. Primary: the DEALER to the backup, the last op sent, the
  // ops the backup has not acknowledged yet (kept to send again: a lost
  // connection may lose what was in flight) with the workers' acks they
  // hold, the live set last sent.
  struct PendingOp {
    uint64_t seq = 0;
    wire::Header op;
    std::vector<transport::Payload> payloads;  // shared with the first send
    std::string peer;                          // the worker whose ack waits, if any
    std::optional<wire::Header> reply;         // that ack (none for a live-set op)
    TimePoint since{};
  };
  std::unique_ptr<transport::Socket> replica_;
  std::string replica_endpoint_;
  uint64_t replica_seq_ = 0;
  std::deque<PendingOp> pending_ops_;
  TimePoint last_resend_{};
  uint64_t ops_resent_ = 0;
  std::vector<int> replicated_live_;
  bool degraded_ = false;
  std::string fenced_;  // why this primary stopped serving: its backup was promoted
  uint64_t replicated_ops_ = 0;
  // Backup: the last op applied, requests that came before the promotion.
  uint64_t applied_seq_ = 0;
  bool promoted_ = false;
  std::vector<transport::Message> parked_;
  TimePoint promoted_at_{};
  uint64_t updates_at_promotion_ = 0;
  double first_update_unix_ = 0;  // promoted: wall time of the first update applied since
  // Re-planning. Source: the chunks being sent for migration_id_, each kept
  // (header and frames) until its destination acknowledges it.
  struct Outgoing {
    int to = 0;
    std::string endpoint;
    wire::Header header;
    std::vector<transport::Payload> payloads;
    TimePoint sent{};
    bool acked = false;
  };
  uint64_t migration_id_ = 0;    // the migration whose transfers run (or ran) here
  uint64_t migration_done_ = 0;  // the last one whose transfers were all acknowledged
  uint64_t seen_migration_replies_ = 0;
  wire::Migration migration_;  // the latest announced (id 0: none)
  std::map<uint32_t, Outgoing> outgoing_;
  std::map<std::string, std::unique_ptr<transport::Socket>> peers_;  // DEALERs to destination shards, by endpoint
  std::map<uint32_t, uint64_t> adopted_;                             // chunk -> migration it was taken in
  std::map<uint32_t, int> moved_away_;                               // chunk -> the shard it went to
  uint64_t map_version_ = 0;                                         // the shard map version this shard follows
  uint64_t chunks_sent_ = 0, chunks_adopted_ = 0;
  std::atomic<uint64_t> pub_migration_done_{0};
  // Chunks of pushes taken (APPLIED) here, replicated ones included, by the
  // pushing worker (their sum is the stats' updates_taken).
  std::map<int, uint64_t> taken_by_worker_;
};

}  // namespace geodesic::server
