// Server: one parameter-server shard process. It binds a ROUTER socket,
// joins the job through the coordinator, takes the chunks the shard map
// gives it, and then serves pulls, pushes and initial values until the job
// finishes or it is told to stop.
//
// Server dispatches; the parts own their state: PullService (held pulls,
// replies), Replicator and ReplicaBackup (replication), Migration
// (re-planning) and Checkpointer (checkpoints and starting from them).
//
// Threading: Run() is a single-threaded event loop that owns the ROUTER
// socket, the ShardState and every part; the cluster::MemberClient's
// heartbeat thread reads the atomic progress mirrors and installs the
// authorized keys (Authorize, under keys_mu_). ZeroMQ's I/O thread moves
// bytes in the background, so the loop applies one message's gradients
// while the next ones are still arriving. See docs/architecture.md.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "cluster/member_client.h"
#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "config/job.h"
#include "server/checkpointer.h"
#include "server/init_offers.h"
#include "server/migration.h"
#include "server/pull_service.h"
#include "server/replicator.h"
#include "server/requests.h"
#include "server/shard.h"
#include "transport/connection_guard.h"
#include "transport/http_endpoint.h"
#include "transport/key_owners.h"
#include "transport/message.h"
#include "transport/refusal_limiter.h"

namespace geodesic::server {

struct ServerProcessOptions {
  JobSpec job;
  int id = 0;
  std::string bind;  // e.g. tcp://127.0.0.1:* (a free port)
  // The endpoint registered with the coordinator, which members dial (and
  // route by: transport/routes.h); empty: the bound one, an address. A
  // compose deployment advertises the container's name, which its link
  // router routes.
  std::string advertise;
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
  transport::HttpOptions http;               // /metrics, /healthz, /readyz (ready: its shard taken)
};

class Server {
 public:
  Server(ServerProcessOptions options, zmq::context_t& ctx, const Clock* clock);
  Status Run(const std::atomic<bool>* stop);
  // After Run: until the final metrics were scraped (http.linger_s at most).
  // `finished`: Run returned OK (transport::ProcessMetrics::Linger).
  void Linger(bool finished) const { metrics_.Linger(options_.http, finished); }

 private:
  // Start-up, in Run's order.
  Status Listen();
  StatusOr<wire::RegisterReply> Join(const std::atomic<bool>* stop);
  // Where members reach this process (ServerProcessOptions::advertise).
  std::string Advertised() const { return options_.advertise.empty() ? socket_.endpoint() : options_.advertise; }
  Status TakeShard(const wire::RegisterReply& assignment);
  Status ConnectBackup(const wire::RegisterReply& assignment);
  void StartHeartbeat();

  // One turn of the loop: waits up to `wait_ms` and handles what arrived.
  void ReceiveAll(int wait_ms);
  // The loop's bookkeeping after receiving; a status when the loop ends.
  std::optional<Status> AfterReceive();

  void Handle(transport::Message& m);
  void HandlePull(transport::Message& m);
  void HandlePush(transport::Message& m);
  void HandleInit(transport::Message& m);
  // Acknowledges an applied init or push: now, or once the backup has it.
  void Acknowledge(transport::Message& m, wire::Header reply);
  // Backup: one op of the primary's log.
  void HandleReplicate(transport::Message& m);
  // A destination shard: takes one chunk of a migration.
  void HandleTransfer(transport::Message& m);
  // Backup: takes over the shard (its clocks are the primary's last ones).
  void Promote();
  bool serving() const { return backup_.serving(); }
  void Refuse(const transport::Message& m, wire::Refusal reason, const Status& status);
  ShardContext Context();
  void SyncMembership();
  // Recovering: seeds the clocks from the coordinator's first view.
  void SeedClocks(const cluster::MembershipView& v);
  // Primary: the coordinator's word on this shard's endpoint and backup.
  void FollowServers(const cluster::MembershipView& v);
  stats::ShardStats Stats() const;
  // Publishes the stats as metrics, and writes them to the stats file.
  void WriteStats() const;
  void PublishProgress();
  // Secured jobs: installs the coordinator's list of authorized client keys
  // (heartbeat thread), and checks a message's key against its sender.
  void Authorize(const wire::HeartbeatReply& r) GD_EXCLUDES(keys_mu_);
  Status CheckSender(const transport::Message& m) const GD_EXCLUDES(keys_mu_);

  // Everything below is the loop thread's, except what is marked shared.
  ServerProcessOptions options_;
  const Clock* clock_;
  zmq::context_t& ctx_;
  transport::TrafficCounters counters_;         // shared: atomics
  std::unique_ptr<transport::ZapHandler> zap_;  // secured jobs: admits only authorized client keys
  transport::ConnectionGuard guard_;            // limits the ROUTER's connections (its own thread)
  transport::Socket socket_;
  transport::RouterReplies replies_{&socket_};  // socket_'s replies, for the parts below
  transport::RefusalLimiter refusals_;          // answers and logs of refusals, per peer and reason
  // Shared with the heartbeat thread (Authorize).
  mutable Mutex keys_mu_;
  transport::KeyOwners key_owner_ GD_GUARDED_BY(keys_mu_);
  std::string primary_key_ GD_GUARDED_BY(keys_mu_);  // a backup's primary's key (secured jobs)
  std::unique_ptr<cluster::MemberClient> member_;    // thread-safe
  std::unique_ptr<ShardState> shard_;
  ClockTable clocks_;
  int num_workers_ = 0;
  uint64_t seen_replies_ = 0;
  // Mirrors for the heartbeat thread (shared: atomics).
  std::atomic<uint64_t> pub_updates_{0}, pub_dropped_{0}, pub_refused_{0}, pub_held_{0};
  std::atomic<double> pub_stale_mean_{0};
  std::atomic<int64_t> pub_stale_max_{0};
  std::atomic<bool> pub_promoted_{false};
  std::atomic<uint64_t> pub_updates_at_promotion_{0};
  RequestDecoder decoder_;
  std::string reported_error_;
  // Restarted from a checkpoint (--recover): clocks_ is seeded from the
  // first membership view, and the pushes and pulls that come before it
  // are kept and answered then (judged against clocks of 0 they would be
  // refused as beyond the live window).
  struct Recovering {
    bool seed_clocks = false;
    std::vector<transport::Message> early;
  } recovering_;
  // Chunks of pushes taken (APPLIED) here, replicated ones included, by the
  // pushing worker (their sum is the stats' updates_taken).
  std::map<int, uint64_t> taken_by_worker_;
  PullService pulls_;
  InitOffers init_offers_;  // who sends which chunk's initial values
  Replicator replicator_;   // primary side
  ReplicaBackup backup_;    // backup side
  Migration migration_;
  Checkpointer checkpoints_;
  mutable transport::ProcessMetrics metrics_;  // published by the loop, served by its own thread
  std::atomic<bool> pub_ready_{false};         // shared: /readyz
};

}  // namespace geodesic::server
