#include "server/replicator.h"

#include <algorithm>

#include "common/log.h"

namespace geodesic::server {

Replicator::Replicator(const JobSpec& job, const Clock* clock, transport::PeerConnector connect,
                       transport::ReplySink* replies)
    : clock_(clock),
      connect_(std::move(connect)),
      replies_(replies),
      // An op unanswered for a while was lost with its connection, or the
      // backup is gone. Only the coordinator decides the latter (Degrade):
      // acknowledging alone on our own judgement could lose updates if the
      // backup, cut off only from us, were promoted later. At most one
      // gap-triggered resend per heartbeat: the backup answers duplicates by
      // sequence number, but a flood of them would only fill the queue.
      pending_(
          transport::RetryPolicy{.retry_after = std::max<Duration>(Millis(1000), Millis(job.membership.lease_ms / 2)),
                                 .min_resend_gap = Millis(job.membership.heartbeat_ms)}) {}

Status Replicator::Connect(const std::string& endpoint, const std::string& backup_key) {
  endpoint_ = endpoint;
  auto link = connect_(endpoint, backup_key);
  GD_RETURN_IF_ERROR(link.status());
  replica_ = std::move(*link);
  GD_LOG(INFO) << "replicating to the backup at " << endpoint;
  return Status::Ok();
}

void Replicator::Replicate(transport::Message& m, wire::Header reply) {
  const uint64_t seq = ++seq_;
  held_[seq] = HeldReply{.peer = m.peer, .reply = std::move(reply)};
  Send(seq, ReplicateOp(seq, m), TakeFrames(m));
}

void Replicator::ReplicateLive(const std::vector<int>& live, const std::vector<int64_t>& clocks) {
  if (!active() || live == replicated_live_) return;
  // Same live set, same rounds closed on the backup. Its ack holds nothing:
  // a round's pushes were held until the backup took them.
  replicated_live_ = live;
  const uint64_t seq = ++seq_;
  Send(seq, ReplicateMembership(seq, live, clocks), {});
}

void Replicator::Send(uint64_t seq, wire::Header op, std::vector<transport::Payload> payloads) {
  // A send that times out (the connection is down and its queue full) is
  // not lost: the op stays pending and goes again with the next resend.
  Status s = replica_->Send(op, payloads);
  uint64_t skipped = 0;
  if (!s.ok() && unsent_log_.Due(clock_->Now(), &skipped))
    GD_LOG(WARNING) << "replication op " << seq << " not sent yet: " << s.message() << " (and " << skipped
                    << " more since the last such line)";
  ++ops_sent_;
  pending_.Add(seq, 0, std::move(op), std::move(payloads), clock_->Now());
}

void Replicator::SendDue(const std::string& why) {
  auto due = pending_.Due(clock_->Now());
  if (due.empty()) return;
  GD_LOG(WARNING) << "sending " << due.size() << " unacknowledged replication op(s) from " << due.front().first
                  << " again (" << why << ")";
  for (auto& [seq, e] : due) {
    if (Status s = replica_->Send(e->header, e->payloads); !s.ok()) {
      GD_LOG(WARNING) << "replication op " << seq << " not sent again yet: " << s.message();
      break;
    }
    ++ops_resent_;
  }
}

bool Replicator::OnBackupMessage(const wire::Header& h) {
  if (h.has_error_reply()) {
    const std::string& msg = h.error_reply().message();
    switch (h.error_reply().reason()) {
      case wire::REFUSAL_NOT_BACKUP:
        // We were declared dead and our backup serves now: acknowledging
        // anything more here could lose it. Workers resend to the backup.
        Fence("the backup was promoted (" + msg + ")");
        return false;
      case wire::REFUSAL_REPLICATION_GAP:
        // Ops lost with a connection (a partition, a reset): send them again.
        if (pending_.Resend(clock_->Now())) SendDue("the backup misses ops: " + msg);
        return true;
      default:
        // The backup refused an op that we applied: the same code on the
        // same state decided otherwise, which must not happen. Acknowledging
        // it alone could lose it at a failover; stop serving instead
        // (workers resend to whoever serves the shard next).
        Fence("the backup refused a replication op we applied (" + msg + ")");
        return false;
    }
  }
  if (!h.has_replicate_ack()) return true;
  const uint64_t acked = h.replicate_ack().seq();
  pending_.AckThrough(acked);
  for (auto it = held_.begin(); it != held_.end() && it->first <= acked; it = held_.erase(it))
    (void)replies_->Send(std::move(it->second.reply), {}, it->second.peer);
  return true;
}

void Replicator::Drain() {
  if (!active()) return;
  for (int i = 0; i < 1024; ++i) {
    auto in = replica_->Receive();
    if (!in) break;
    if (!in->status.ok()) {
      GD_LOG(WARNING) << "backup sent a message we refuse: " << in->status;
      continue;
    }
    if (!OnBackupMessage(in->message.header)) return;
  }
  const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(pending_.policy().retry_after);
  SendDue("no acknowledgement for " + std::to_string(after.count()) + " ms");
}

void Replicator::Degrade(const std::string& why) {
  if (degraded_) return;
  degraded_ = true;
  const size_t held = held_.size();
  for (auto& [seq, h] : held_) (void)replies_->Send(std::move(h.reply), {}, h.peer);
  GD_LOG(ERROR) << "replication to " << endpoint_ << " stopped (" << why << "); acknowledging " << held
                << " held and all later updates without a backup (degraded)";
  held_.clear();
  pending_.Clear();
}

void Replicator::Fence(const std::string& why) {
  fenced_ = why;
  held_.clear();
  pending_.Clear();
}

void Replicator::AddStats(stats::ShardStats* j) const {
  if (!replica_) return;
  j->set_replication_ops_sent(ops_sent_);
  j->set_replication_degraded(degraded_);
  j->set_replication_ops_resent(ops_resent_);
  j->set_replication_ops_pending(static_cast<uint32_t>(pending_.size()));
}

Handled ReplicaBackup::Apply(const ShardContext& ctx, transport::Message& m) {
  if (!backup_ || promoted_) {
    Handled h;
    h.reason = wire::REFUSAL_NOT_BACKUP;
    h.status = FailedPrecondition(std::string("server ") + std::to_string(server_id_) +
                                  (promoted_ ? " was promoted and" : " is a primary and") + " takes no replication");
    return h;
  }
  return ApplyReplicate(ctx, &applied_seq_, m);
}

bool ReplicaBackup::Park(transport::Message& m) {
  if (parked_.size() >= 10000) return false;
  parked_.push_back(std::move(m));
  return true;
}

std::vector<transport::Message> ReplicaBackup::Promote(const ShardState& shard, const ClockTable& clocks) {
  promoted_ = true;
  promoted_at_ = clock_->Now();
  updates_at_promotion_ = shard.updates_applied();
  GD_LOG(WARNING) << "promoted: serving shard " << server_id_ << " from op " << applied_seq_ << " ("
                  << shard.updates_applied() << " updates, slowest live worker at clock " << clocks.MinClock() << "); "
                  << parked_.size() << " early request(s) to answer";
  std::vector<transport::Message> parked = std::move(parked_);
  parked_.clear();
  return parked;
}

void ReplicaBackup::NoteUpdates(uint64_t updates_applied) {
  if (!promoted_ || first_update_unix_ != 0 || updates_applied <= updates_at_promotion_) return;
  first_update_unix_ = UnixSeconds();
  GD_LOG(INFO) << "first update applied since the promotion, after "
               << static_cast<int>(1e3 * Seconds(clock_->Now() - promoted_at_)) << " ms";
}

void ReplicaBackup::AddStats(stats::ShardStats* j) const {
  if (backup_) j->set_replication_ops_applied(applied_seq_);
  if (promoted_) j->set_updates_at_promotion(updates_at_promotion_);
  if (first_update_unix_ > 0) j->set_first_update_unix(first_update_unix_);
}

}  // namespace geodesic::server
