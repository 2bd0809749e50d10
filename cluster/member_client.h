// MemberClient: a process's membership in a job. Join() registers with the
// coordinator and waits through the start-up rendezvous; Start() then keeps
// the lease alive from a background thread that sends a heartbeat every
// heartbeat_ms and keeps the latest membership view (live workers and their
// clocks, done/dead counts, whether the job has finished).
//
// Threading: the coordinator socket is used by the caller's thread during
// Join() and by the heartbeat thread after Start(); view() and error() are
// thread-safe. The fill callback runs on the heartbeat thread. Stop() (also
// run by the destructor) sends a LeaveRequest and joins the thread.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/wait.h"
#include "config/job.h"
#include "proto/geodesic.pb.h"
#include "transport/message.h"

namespace geodesic::cluster {

struct MemberOptions {
  std::string job;
  wire::Role role = wire::WORKER;
  int id = 0;
  std::string coordinator;  // ZeroMQ endpoint of the coordinator
  std::string endpoint;     // servers: where they can be reached
  std::string region;
  wire::ModelSignature model;  // workers and the evaluator
  MembershipSpec timing;
  int64_t max_message_bytes = 256 << 20;  // wire.max_message_bytes: larger replies are refused unread
  // Secured jobs: this process's keypair, the coordinator's public key as
  // `curve.server_key`, and the join token sent with every registration.
  transport::CurveSocket curve;
  std::string token;
  // Servers in secured jobs: installs the client keys the coordinator lists
  // (HeartbeatReply.authorized_keys/_ids; runs on the heartbeat thread, so it
  // must be thread-safe). The installed epoch goes back in heartbeats.
  std::function<void(const wire::HeartbeatReply&)> authorize;
  // Every reply from a coordinator that knows us (heartbeat thread; must be
  // thread-safe): elastic workers take their data units from it.
  std::function<void(const wire::HeartbeatReply&)> on_reply;
};

struct MembershipView {
  bool valid = false;  // a heartbeat reply has arrived
  uint64_t epoch = 0;
  std::vector<int> live;
  std::vector<int64_t> clocks;  // parallel to live
  int done = 0;
  int dead = 0;
  bool job_finished = false;
  bool training_ended = false;        // every worker done or gone (elastic: every unit finished)
  std::vector<int> aggregators_down;  // regions whose aggregator died or left (HeartbeatReply)
  double seconds_since_reply = 0;
  // Replicated jobs: every shard's serving endpoint (and its backup's) as of
  // servers_epoch (0: none received yet), and, for a backup, whether it has
  // been promoted to serve its shard.
  uint64_t servers_epoch = 0;
  std::vector<wire::ServerInfo> servers;
  bool promoted = false;
  // Re-planning: the migration the latest reply announced (id 0: none), and
  // the newest shard map the coordinator sent (version 0: none since Join).
  wire::Migration migration;
  wire::ShardMap shard_map;
};

class MemberClient {
 public:
  MemberClient(zmq::context_t& ctx, MemberOptions options, transport::TrafficCounters* counters, const Clock* clock);
  ~MemberClient();
  MemberClient(const MemberClient&) = delete;
  MemberClient& operator=(const MemberClient&) = delete;

  // Registers and waits until the coordinator says the job has started.
  // DeadlineExceeded after rendezvous_timeout_s; Cancelled if `stop` is set;
  // the coordinator's refusal (e.g. an id outside the job) as is.
  StatusOr<wire::RegisterReply> Join(const std::atomic<bool>* stop);

  // Starts heartbeating. `fill` adds progress to each heartbeat.
  void Start(std::function<void(wire::Heartbeat*)> fill);
  // Stops heartbeating; with `leave`, tells the coordinator we are gone.
  void Stop(bool leave = true);

  MembershipView view() const;
  // Bumped whenever a heartbeat reply arrives; cheap to poll.
  uint64_t replies() const { return replies_.load(); }
  // Replicated jobs: the view's servers_epoch; cheap to poll.
  uint64_t servers_epoch() const { return servers_epoch_pub_.load(); }
  // Sends the next heartbeat now rather than at its time (e.g. a worker
  // that just reached a migration barrier).
  void Nudge() { nudge_ = true; }
  // Set if the coordinator refused us after Join (e.g. on re-registration).
  Status error() const;
  // Workers: the start clock of the newest re-registration after a lost
  // lease (the live workers' clock, which may be ahead of ours), once; -1
  // if none since the last call.
  int64_t TakeRejoinClock() { return rejoin_clock_.exchange(-1); }

 private:
  void Loop();
  void SendHeartbeat(TimePoint now, WaitReporter* silent_report);
  void OnReply(const wire::Header& h, TimePoint* next);
  void TakeView(const wire::HeartbeatReply& r) GD_EXCLUDES(mu_);
  wire::Header RegisterHeader() const;

  MemberOptions options_;
  const Clock* clock_;
  transport::Socket socket_;
  std::function<void(wire::Heartbeat*)> fill_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> leave_{true};
  std::atomic<uint64_t> replies_{0};
  std::atomic<int64_t> rejoin_clock_{-1};
  TimePoint last_register_{};  // heartbeat thread: the last re-registration sent
  std::atomic<uint64_t> servers_epoch_pub_{0};
  std::atomic<bool> nudge_{false};
  std::atomic<uint64_t> map_version_{0};  // the newest shard map version received (Join or heartbeat replies)
  mutable Mutex mu_;
  MembershipView view_ GD_GUARDED_BY(mu_);
  TimePoint last_reply_ GD_GUARDED_BY(mu_){};
  Status error_ GD_GUARDED_BY(mu_);
  uint64_t next_request_ = 1;
  uint64_t keys_installed_ = 0;  // heartbeat thread only
  uint64_t servers_epoch_ = 0;   // heartbeat thread only
};

}  // namespace geodesic::cluster
