// Replication (replication.backups 1; docs/reliability.md), both sides.
//
// Replicator, the primary's side: every init and push the shard took goes
// to the backup as a numbered op (and every live-set change as a membership
// op), and the worker's acknowledgement is held until the backup
// acknowledges the op (cumulative acks). Without an active backup the
// server acknowledges a push itself, where it applied it; the Replicator
// only holds acknowledgements. It reaches the backup through a
// transport::PeerLink and answers workers through a transport::ReplySink
// (ZeroMQ sockets in the server; fakes in tests/server/replicator_test.cc).
// Unacknowledged ops stay in a transport::Outbox and go again when the
// backup says it misses some
// (REFUSAL_REPLICATION_GAP, at most once per heartbeat) or none was
// acknowledged for max(1 s, lease / 2). Only the coordinator decides that
// the backup is gone (Degrade: acknowledge alone from then on); a backup
// that was promoted (REFUSAL_NOT_BACKUP) or refused an op this primary
// applied fences the primary (it stops serving).
//
// ReplicaBackup, the backup's side: applies the primary's ops in order
// (ApplyReplicate), parks worker requests that arrive before its own
// promotion, and times the first update after it.
//
// Both are owned by the server loop's thread; neither is synchronized.
// The backup's promotion flag is mirrored to an atomic for the heartbeat.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/throttle.h"
#include "config/job.h"
#include "proto/stats.pb.h"
#include "server/requests.h"
#include "transport/links.h"
#include "transport/message.h"
#include "transport/outbox.h"

namespace geodesic::server {

class Replicator {
 public:
  // `connect` opens the link to the backup; `replies` reaches the workers.
  Replicator(const JobSpec& job, const Clock* clock, transport::PeerConnector connect, transport::ReplySink* replies);

  // Connects to the backup at `endpoint`; `backup_key`: its CURVE key
  // (secured jobs; empty: plaintext).
  Status Connect(const std::string& endpoint, const std::string& backup_key);
  // Whether a backup takes the ops (connected and not degraded).
  bool active() const { return replica_ && !degraded_; }
  bool connected() const { return replica_ != nullptr; }
  // The backup link's socket, to wait on beside the ROUTER (null: none).
  zmq::socket_t* pollable() { return replica_ ? replica_->pollable() : nullptr; }

  // Requires active(): sends the taken request `m` to the backup and holds
  // `reply` until the backup acknowledges it. Consumes m's frames.
  void Replicate(transport::Message& m, wire::Header reply);
  // A live-set change, when it differs from the last one sent.
  void ReplicateLive(const std::vector<int>& live, const std::vector<int64_t>& clocks);
  // The backup's acks and refusals; resends what is due.
  void Drain();
  // The coordinator declared the backup dead: acknowledges every held
  // reply and all later updates alone.
  void Degrade(const std::string& why);
  // Stops serving for `why` (the shard is served elsewhere now).
  void Fence(const std::string& why);
  bool degraded() const { return degraded_; }
  // Why this primary stopped serving; empty while it serves.
  const std::string& fenced() const { return fenced_; }
  void AddStats(stats::ShardStats* j) const;

 private:
  struct HeldReply {
    std::string peer;
    wire::Header reply;
  };
  void Send(uint64_t seq, wire::Header op, std::vector<transport::Payload> payloads);
  // Handles one message from the backup; false when this primary is fenced.
  bool OnBackupMessage(const wire::Header& h);
  void SendDue(const std::string& why);

  const Clock* clock_;
  transport::PeerConnector connect_;
  transport::ReplySink* replies_;
  std::unique_ptr<transport::PeerLink> replica_;
  Throttle unsent_log_{std::chrono::seconds(1)};  // ops the backup's full queue did not take
  std::string endpoint_;
  uint64_t seq_ = 0;
  transport::Outbox<uint64_t> pending_;  // sent ops, until acknowledged
  std::map<uint64_t, HeldReply> held_;   // by op: the worker's ack it releases
  std::vector<int> replicated_live_;
  bool degraded_ = false;
  std::string fenced_;
  uint64_t ops_sent_ = 0, ops_resent_ = 0;
};

class ReplicaBackup {
 public:
  ReplicaBackup(bool backup, int server_id, const Clock* clock)
      : backup_(backup), server_id_(server_id), clock_(clock) {}

  // Whether this process serves workers: a primary, or a promoted backup.
  bool serving() const { return !backup_ || promoted_; }
  bool promoted() const { return promoted_; }
  // Checks and applies one op of the primary's log (REFUSAL_NOT_BACKUP
  // unless this is an unpromoted backup).
  Handled Apply(const ShardContext& ctx, transport::Message& m);
  // Keeps a request that came before the promotion; false when too many wait.
  bool Park(transport::Message& m);
  // Takes over the shard; returns the parked requests, to be handled now.
  std::vector<transport::Message> Promote(const ShardState& shard, const ClockTable& clocks);
  // Logs (once) the first update applied since the promotion.
  void NoteUpdates(uint64_t updates_applied);
  uint64_t updates_at_promotion() const { return updates_at_promotion_; }
  void AddStats(stats::ShardStats* j) const;

 private:
  const bool backup_;
  const int server_id_;
  const Clock* clock_;
  uint64_t applied_seq_ = 0;  // the last op applied
  bool promoted_ = false;
  std::vector<transport::Message> parked_;
  TimePoint promoted_at_{};
  uint64_t updates_at_promotion_ = 0;
  double first_update_unix_ = 0;  // promoted: wall time of the first update applied since
};

}  // namespace geodesic::server
