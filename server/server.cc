#include "server/server.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/log.h"
#include "compression/codec.h"
#include "server/checkpoint.h"

namespace geodesic::server {
namespace {

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

Server::Server(ServerProcessOptions options, zmq::context_t& ctx, const Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      ctx_(ctx),
      socket_(ctx, zmq::socket_type::router,
              transport::SocketOptions{
                  .job = options_.job.name,
                  .role = wire::SERVER,
                  .id = options_.id,
                  .max_message_bytes = options_.job.wire.max_message_bytes,
                  .curve = transport::CurveSocket{.keys = options_.credentials.keys, .server_key = {}}},
              &counters_),
      clocks_(options_.job.training.staleness_bound),
      num_workers_(options_.job.NumWorkers()) {}

void Server::Refuse(const transport::Message& m, wire::Refusal reason, const Status& status) {
  refused_[transport::RefusalName(reason)]++;
  counters_.messages_refused++;
  GD_LOG(WARNING) << "refused " << transport::BodyName(m.header) << " from "
                  << (m.header.sender_role() == wire::WORKER ? "worker " : "peer ") << m.header.sender_id() << " ("
                  << transport::RefusalName(reason) << "): " << status.message();
  if (m.peer.empty()) return;
  wire::Header reply;
  reply.set_request_id(m.header.request_id());
  reply.mutable_error_reply()->set_code(transport::ToWire(status.code()));
  reply.mutable_error_reply()->set_message(status.message());
  reply.mutable_error_reply()->set_reason(reason);
  (void)socket_.Send(std::move(reply), {}, m.peer);
}

ShardContext Server::Context() {
  return ShardContext{.shard = shard_.get(),
                      .clocks = &clocks_,
                      .server_id = options_.id,
                      .num_workers = num_workers_,
                      .decoder = &decoder_};
}

void Server::Authorize(const wire::HeartbeatReply& r) {
  std::map<std::string, int> owners;
  for (int i = 0; i < r.authorized_keys_size() && i < r.authorized_ids_size(); ++i)
    owners[r.authorized_keys(i)] = r.authorized_ids(i);
  std::vector<std::string> allowed(r.authorized_keys().begin(), r.authorized_keys().end());
  if (!r.primary_key().empty()) allowed.push_back(r.primary_key());  // a backup: its primary replicates to it
  zap_->SetAllowed(allowed);
  std::lock_guard<std::mutex> lock(keys_mu_);
  key_owner_ = std::move(owners);
  if (!r.primary_key().empty()) primary_key_ = r.primary_key();
}

Status Server::CheckSender(const transport::Message& m) const {
  if (!options_.credentials.enabled()) return Status::Ok();
  // The ZAP handler admitted the connection; here the key must also be the
  // sender's own, so that one worker cannot push or pull as another.
  std::lock_guard<std::mutex> lock(keys_mu_);
  if (m.header.has_replicate_request()) {
    if (primary_key_.empty() || m.peer_key != primary_key_)
      return PermissionDenied("replication ops are taken from this shard's primary's CURVE key only");
    return Status::Ok();
  }
  auto it = key_owner_.find(m.peer_key);
  if (it == key_owner_.end()) return PermissionDenied("the connection's CURVE key is not authorized here");
  int want = m.header.sender_role() == wire::EVALUATOR ? -1 : m.header.sender_id();
  if ((m.header.sender_role() != wire::WORKER && m.header.sender_role() != wire::EVALUATOR) || it->second != want)
    return PermissionDenied("the connection's CURVE key is not the sender's");
  return Status::Ok();
}

void Server::Handle(transport::Message& m) {
  if (Status s = CheckSender(m); !s.ok()) return Refuse(m, wire::REFUSAL_UNAUTHORIZED, s);
  if (m.header.has_replicate_request()) return HandleReplicate(m);
  if (m.header.has_chunk_transfer()) return HandleTransfer(m);
  if (!moved_away_.empty())
    if (auto c = MovedChunk(m.header)) {
      // Never applied to a copy that is no longer the chunk's: the sender
      // keeps the request and sends it to the new owner (worker/ps_client.h).
      return Refuse(m, wire::REFUSAL_MOVED,
                    FailedPrecondition("chunk " + std::to_string(*c) + " moved to server " +
                                       std::to_string(moved_away_.at(*c)) + " (shard map version " +
                                       std::to_string(map_version_ + (migration_done_ > map_version_ ? 1 : 0)) + ")"));
    }
  if (!serving()) {
    // A worker redirected before this backup saw its own promotion: keep the
    // request for then (the worker would otherwise wait its retry interval).
    if (parked_.size() >= 10000)
      return Refuse(m, wire::REFUSAL_NOT_PRIMARY, Unavailable("this backup is not serving yet"));
    parked_.push_back(std::move(m));
    return;
  }
  switch (m.header.body_case()) {
    case wire::Header::kPullRequest:
      return HandlePull(m);
    case wire::Header::kPushRequest:
      return HandlePush(m);
    case wire::Header::kInitRequest:
      return HandleInit(m);
    default:
      Refuse(m, wire::REFUSAL_UNSUPPORTED_TYPE,
             InvalidArgument("a server does not serve " + transport::BodyName(m.header) + " messages"));
  }
}

std::optional<uint32_t> Server::MovedChunk(const wire::Header& h) const {
  auto check = [&](uint32_t c) { return moved_away_.count(c) > 0 && !shard_->Owns(c); };
  if (h.has_push_request())
    for (const auto& d : h.push_request().chunks())
      if (check(d.chunk_id())) return d.chunk_id();
  if (h.has_pull_request())
    for (uint32_t c : h.pull_request().chunk_ids())
      if (check(c)) return c;
  if (h.has_init_request())
    for (const auto& d : h.init_request().chunks())
      if (check(d.chunk_id())) return d.chunk_id();
  return std::nullopt;
}

void Server::HandleTransfer(transport::Message& m) {
  const auto& t = m.header.chunk_transfer();
  auto reply = [&]() {
    wire::Header ack;
    ack.set_request_id(m.header.request_id());
    ack.mutable_chunk_transfer_ack()->set_migration_id(t.migration_id());
    ack.mutable_chunk_transfer_ack()->set_chunk_id(t.chunk_id());
    (void)socket_.Send(std::move(ack), {}, m.peer);
  };
  if (m.header.sender_role() != wire::SERVER)
    return Refuse(m, wire::REFUSAL_BAD_SENDER, PermissionDenied("chunk transfers come from server shards only"));
  if (!options_.job.wan.replan)
    return Refuse(m, wire::REFUSAL_UNSUPPORTED_TYPE,
                  FailedPrecondition("this job does not re-plan (wan.replan: false)"));
  auto map = cluster::ShardMap::FromWire(t.new_map(), options_.job.NumServers());
  if (!map.ok()) return Refuse(m, wire::REFUSAL_BAD_MAP, map.status());
  if (map->layout.num_params() != shard_->layout().num_params() ||
      map->layout.chunk_elems() != shard_->layout().chunk_elems() || t.chunk_id() >= map->layout.num_chunks())
    return Refuse(m, wire::REFUSAL_BAD_MAP, InvalidArgument("chunk transfer for another layout"));
  if (map->owner[t.chunk_id()] != options_.id)
    return Refuse(m, wire::REFUSAL_CHUNK_NOT_OWNED,
                  InvalidArgument("the migration's map gives chunk " + std::to_string(t.chunk_id()) + " to server " +
                                  std::to_string(map->owner[t.chunk_id()])));
  if (shard_->Owns(t.chunk_id())) {
    auto it = adopted_.find(t.chunk_id());
    if (it != adopted_.end() && it->second == t.migration_id()) return reply();  // a resend
    return Refuse(m, wire::REFUSAL_ALREADY_OWNED,
                  FailedPrecondition("chunk " + std::to_string(t.chunk_id()) + " is already owned here"));
  }
  const uint64_t n = shard_->layout().Size(t.chunk_id());
  if (t.num_elems() != n || m.frames.size() != 1 + t.optimizer_arrays())
    return Refuse(m, wire::REFUSAL_WRONG_SHAPE, InvalidArgument("chunk transfer of the wrong shape"));
  wire::ChunkCheckpoint ck;
  ck.set_chunk_id(t.chunk_id());
  ck.set_num_elems(t.num_elems());
  ck.set_version(t.version());
  ck.set_closed_through(t.closed_through());
  *ck.mutable_last_clock() = t.last_clock();
  *ck.mutable_optimizer_counters() = t.optimizer_counters();
  ck.set_params(static_cast<const char*>(m.frames[0].data()), m.frames[0].size());
  for (size_t i = 1; i < m.frames.size(); ++i)
    ck.add_optimizer_arrays(static_cast<const char*>(m.frames[i].data()), m.frames[i].size());
  if (Status s = shard_->AdoptChunk(ck); !s.ok()) return Refuse(m, wire::REFUSAL_BAD_CHUNK_STATE, s);
  pulls_.ForgetChunk(t.chunk_id());  // every puller gets full values of it first
  adopted_[t.chunk_id()] = t.migration_id();
  moved_away_.erase(t.chunk_id());
  ++chunks_adopted_;
  GD_LOG(INFO) << "migration " << t.migration_id() << ": took chunk " << t.chunk_id() << " (version " << t.version()
               << ") from server " << m.header.sender_id();
  reply();
}

void Server::SyncMigration() {
  if (member_->replies() != seen_migration_replies_) {
    seen_migration_replies_ = member_->replies();
    cluster::MembershipView v = member_->view();
    migration_ = v.migration;
    if (v.shard_map.version() > map_version_) {
      auto map = cluster::ShardMap::FromWire(v.shard_map, options_.job.NumServers());
      if (map.ok()) {
        map_version_ = map->version;
        std::vector<uint32_t> want = map->ChunksOf(options_.id);
        if (want != shard_->owned())
          GD_LOG(ERROR) << "shard map version " << map_version_ << " gives this shard " << want.size()
                        << " chunks; it owns " << shard_->owned().size();
        else
          GD_LOG(INFO) << "shard map version " << map_version_ << ": owning " << want.size() << " chunks";
      }
    }
  }
  const wire::Migration& mg = migration_;
  if (mg.id() == 0 || !mg.transfer() || mg.id() == migration_done_) return;
  if (mg.id() != migration_id_) {
    auto map = cluster::ShardMap::FromWire(mg.new_map(), options_.job.NumServers());
    if (!map.ok()) {
      GD_LOG(ERROR) << "migration " << mg.id() << ": " << map.status();
      return;
    }
    migration_id_ = mg.id();
    outgoing_.clear();
    for (uint32_t c : shard_->owned())
      if (map->owner[c] != options_.id) {
        Outgoing o;
        o.to = map->owner[c];
        for (const auto& si : mg.servers())
          if (si.id() == o.to) o.endpoint = si.endpoint();
        outgoing_[c] = std::move(o);
      }
    GD_LOG(INFO) << "migration " << mg.id() << ": sending " << outgoing_.size() << " chunk(s) to their new owners";
  }
  const TimePoint now = clock_->Now();
  bool all = true;
  for (auto& [c, o] : outgoing_) {
    if (o.acked) continue;
    all = false;
    if (!o.header.has_chunk_transfer()) {
      // Every live worker waits at the barrier with its pushes below it
      // acknowledged; under BSP the last of them closed the chunk's round.
      auto state = shard_->ExportChunk(c);
      if (!state.ok()) {
        GD_LOG(WARNING) << "migration " << mg.id() << ": chunk " << c << " not ready to move: " << state.status();
        continue;
      }
      if (o.endpoint.empty()) {
        GD_LOG(ERROR) << "migration " << mg.id() << ": no endpoint for server " << o.to;
        continue;
      }
      auto* t = o.header.mutable_chunk_transfer();
      t->set_migration_id(mg.id());
      t->set_chunk_id(c);
      t->set_num_elems(state->num_elems());
      t->set_version(state->version());
      t->set_closed_through(state->closed_through());
      *t->mutable_last_clock() = state->last_clock();
      *t->mutable_optimizer_counters() = state->optimizer_counters();
      t->set_optimizer_arrays(static_cast<uint32_t>(state->optimizer_arrays_size()));
      *t->mutable_new_map() = mg.new_map();
      o.header.set_request_id(c);
      o.payloads.push_back(transport::CopyPayload(state->params().data(), state->params().size()));
      for (const std::string& a : state->optimizer_arrays())
        o.payloads.push_back(transport::CopyPayload(a.data(), a.size()));
      // From here on this shard refuses the chunk (REFUSAL_MOVED): nothing more
      // may be applied to a copy that is no longer the chunk's.
      shard_->DropChunk(c);
      pulls_.ForgetChunk(c);
      moved_away_[c] = o.to;
      ++chunks_sent_;
    } else if (now - o.sent < std::chrono::seconds(2)) {
      continue;
    }
    auto& peer = peers_[o.endpoint];
    if (!peer) {
      peer = std::make_unique<transport::Socket>(
          ctx_, zmq::socket_type::dealer,
          transport::SocketOptions{.job = options_.job.name,
                                   .role = wire::SERVER,
                                   .id = options_.id,
                                   .max_message_bytes = options_.job.wire.max_message_bytes,
                                   .curve = {}},
          &counters_);
      if (Status s = peer->Connect(o.endpoint); !s.ok()) {
        GD_LOG(ERROR) << "migration: connecting to " << o.endpoint << ": " << s;
        peer.reset();
        continue;
      }
    }
    // Resent every 2 s until acknowledged; the destination answers a resend again.
    if (Status s = peer->Send(o.header, o.payloads); !s.ok())
      GD_LOG(WARNING) << "migration: chunk " << c << " to server " << o.to << " not sent yet: " << s;
    o.sent = now;
  }
  if (all) {
    migration_done_ = mg.id();
    pub_migration_done_ = migration_done_;
    member_->Nudge();
    GD_LOG(INFO) << "migration " << mg.id() << ": all " << outgoing_.size()
                 << " outgoing chunk(s) acknowledged; now owning " << shard_->owned().size();
  }
}

void Server::DrainTransfers() {
  for (auto& [endpoint, peer] : peers_) {
    if (!peer) continue;
    for (int i = 0; i < 256; ++i) {
      auto in = peer->Receive();
      if (!in) break;
      if (!in->status.ok()) continue;
      const wire::Header& h = in->message.header;
      if (h.has_error_reply()) {
        GD_LOG(ERROR) << "migration: " << endpoint << " refused a chunk: " << h.error_reply().message();
        continue;
      }
      if (!h.has_chunk_transfer_ack()) continue;
      auto it = outgoing_.find(h.chunk_transfer_ack().chunk_id());
      if (it != outgoing_.end() && h.chunk_transfer_ack().migration_id() == migration_id_ && !it->second.acked) {
        it->second.acked = true;
        it->second.payloads.clear();
      }
    }
  }
}

void Server::HandleInit(transport::Message& m) {
  Handled h = ApplyInit(Context(), m);
  if (!h.status.ok()) return Refuse(m, h.reason, h.status);
  if (h.reply.init_ack().accepted_chunks() && shard_->AllInitialized())
    GD_LOG(INFO) << "all " << shard_->owned().size() << " chunks initialized (by worker " << m.header.sender_id()
                 << ")";
  Replicate(m, std::move(h.reply));
  ServeHeldPulls();
}

void Server::HandlePush(transport::Message& m) {
  Handled h = ApplyPush(Context(), m);
  if (!h.status.ok()) return Refuse(m, h.reason, h.status);
  const auto& req = m.header.push_request();
  if (req.skipped() && h.completed)
    GD_LOG(WARNING) << "worker " << m.header.sender_id() << " skipped clock " << req.clock() << " (no usable gradient)";
  taken_by_worker_[m.header.sender_id()] += h.reply.push_ack().applied_chunks();
  // Acknowledge after the update took effect (applied, or held in its
  // round) here and, in a replicated job, on the backup.
  Replicate(m, std::move(h.reply));
  if (!req.skipped() || h.completed) ServeHeldPulls();
}

void Server::Replicate(transport::Message& m, wire::Header reply) {
  if (!replica_ || degraded_) {
    (void)socket_.Send(std::move(reply), {}, m.peer);
    return;
  }
  const uint64_t seq = ++replica_seq_;
  SendOp(seq, ReplicateOp(seq, m), TakeFrames(m), m.peer, std::move(reply));
}

void Server::SendOp(uint64_t seq, wire::Header op, std::vector<transport::Payload> payloads, const std::string& peer,
                    std::optional<wire::Header> reply) {
  // A send that times out (the connection is down and its queue full) is
  // not lost: the op stays pending and goes again with the next resend.
  Status s = replica_->Send(op, payloads);
  if (!s.ok()) GD_LOG(WARNING) << "replication op " << seq << " not sent yet: " << s.message();
  ++replicated_ops_;
  pending_ops_.push_back(PendingOp{.seq = seq,
                                   .op = std::move(op),
                                   .payloads = std::move(payloads),
                                   .peer = peer,
                                   .reply = std::move(reply),
                                   .since = clock_->Now()});
}

void Server::ResendPending(const std::string& why) {
  const TimePoint now = clock_->Now();
  // At most one resend per heartbeat: the backup answers duplicates by
  // sequence number, but a flood of them would only fill the queue.
  if (pending_ops_.empty() || now - last_resend_ < Millis(options_.job.membership.heartbeat_ms)) return;
  last_resend_ = now;
  GD_LOG(WARNING) << "sending " << pending_ops_.size() << " unacknowledged replication op(s) from "
                  << pending_ops_.front().seq << " again (" << why << ")";
  for (const PendingOp& p : pending_ops_) {
    if (Status s = replica_->Send(p.op, p.payloads); !s.ok()) {
      GD_LOG(WARNING) << "replication op " << p.seq << " not sent again yet: " << s.message();
      break;
    }
    ++ops_resent_;
  }
}

void Server::ReplicationDegraded(const std::string& why) {
  if (degraded_) return;
  degraded_ = true;
  size_t held = 0;
  for (auto& p : pending_ops_)
    if (p.reply) (void)socket_.Send(std::move(*p.reply), {}, p.peer), ++held;
  GD_LOG(ERROR) << "replication to " << replica_endpoint_ << " stopped (" << why << "); acknowledging " << held
                << " held and all later updates without a backup (degraded)";
  pending_ops_.clear();
}

void Server::DrainReplica() {
  if (!replica_ || degraded_) return;
  for (int i = 0; i < 1024; ++i) {
    auto in = replica_->Receive();
    if (!in) break;
    if (!in->status.ok()) {
      GD_LOG(WARNING) << "backup sent a message we refuse: " << in->status;
      continue;
    }
    const wire::Header& h = in->message.header;
    if (h.has_error_reply()) {
      const std::string& msg = h.error_reply().message();
      const wire::Refusal reason = h.error_reply().reason();
      if (reason == wire::REFUSAL_NOT_BACKUP) {
        // We were declared dead and our backup serves now: acknowledging
        // anything more here could lose it. Workers resend to the backup.
        fenced_ = "the backup was promoted (" + msg + ")";
        pending_ops_.clear();
        return;
      }
      if (reason == wire::REFUSAL_REPLICATION_GAP) {
        // Ops lost with a connection (a partition, a reset): send them again.
        ResendPending("the backup misses ops: " + msg);
        continue;
      }
      // The backup refused an op that we applied: the same code on the same
      // state decided otherwise, which must not happen. Acknowledging it
      // alone could lose it at a failover; stop serving instead (workers
      // resend to whoever serves the shard next).
      fenced_ = "the backup refused a replication op we applied (" + msg + ")";
      pending_ops_.clear();
      return;
    }
    if (!h.has_replicate_ack()) continue;
    const uint64_t acked = h.replicate_ack().seq();
    while (!pending_ops_.empty() && pending_ops_.front().seq <= acked) {
      PendingOp& p = pending_ops_.front();
      if (p.reply) (void)socket_.Send(std::move(*p.reply), {}, p.peer);
      pending_ops_.pop_front();
    }
  }
  // An op unanswered for a while was lost with its connection, or the
  // backup is gone. Only the coordinator decides the latter (it declares
  // the backup dead after a lease, and we go on alone when it says so,
  // SyncMembership): acknowledging alone on our own judgement could lose
  // updates if the backup, cut off only from us, were promoted later.
  const Duration resend_after = std::max<Duration>(Millis(1000), Millis(options_.job.membership.lease_ms / 2));
  if (!pending_ops_.empty() && clock_->Now() - pending_ops_.front().since > resend_after &&
      clock_->Now() - last_resend_ > resend_after)
    ResendPending("no acknowledgement for " +
                  std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(resend_after).count()) + " ms");
}

void Server::HandleReplicate(transport::Message& m) {
  if (!options_.backup || promoted_)
    return Refuse(
        m, wire::REFUSAL_NOT_BACKUP,
        FailedPrecondition(std::string("server ") + std::to_string(options_.id) +
                           (promoted_ ? " was promoted and" : " is a primary and") + " takes no replication"));
  Handled h = ApplyReplicate(Context(), &applied_seq_, m);
  if (!h.status.ok()) return Refuse(m, h.reason, h.status);
  if (m.header.replicate_request().has_push()) taken_by_worker_[m.header.replicate_request().worker()] += h.taken;
  (void)socket_.Send(std::move(h.reply), {}, m.peer);
}

void Server::Promote() {
  promoted_ = true;
  promoted_at_ = clock_->Now();
  updates_at_promotion_ = shard_->updates_applied();
  pub_updates_at_promotion_ = updates_at_promotion_;
  pub_promoted_ = true;
  GD_LOG(WARNING) << "promoted: serving shard " << options_.id << " from op " << applied_seq_ << " ("
                  << shard_->updates_applied() << " updates, slowest live worker at clock " << clocks_.MinClock()
                  << "); " << parked_.size() << " early request(s) to answer";
  std::vector<transport::Message> parked = std::move(parked_);
  parked_.clear();
  for (auto& m : parked) Handle(m);
}

void Server::HandlePull(transport::Message& m) {
  const auto& req = m.header.pull_request();
  HeldPull p;
  wire::Refusal reason = wire::REFUSAL_UNSPECIFIED;
  Status s = ValidatePull(*shard_, options_.id, m, &reason, &p.chunks);
  if (!s.ok()) return Refuse(m, reason, s);
  const wire::Role role = m.header.sender_role();
  p.peer = m.peer;
  p.request_id = m.header.request_id();
  p.sender_id = m.header.sender_id();
  p.role = role;
  p.clock = req.final() ? -1 : req.clock();
  p.since = clock_->Now();
  p.wait_for_own_push = req.wait_for_own_push() && role == wire::WORKER && !req.final();
  p.full = req.full() || req.final();
  p.hold_until = p.since + std::chrono::microseconds(std::min<uint64_t>(req.max_hold_us(), 60'000'000));
  if (CanServe(p)) return ServePull(p);
  // A resent request replaces the one already held.
  for (auto& h : held_)
    if (h.peer == p.peer && h.clock == p.clock) {
      h.request_id = p.request_id;
      h.wait_for_own_push = p.wait_for_own_push;
      h.hold_until = p.hold_until;
      h.full = h.full || p.full;
      return;
    }
  held_.push_back(std::move(p));
}

bool Server::BoundAllows(const HeldPull& p) const {
  for (uint32_t c : p.chunks)
    if (!shard_->IsInitialized(c)) return false;
  // A final read (the evaluator's) waits only for rounds still open.
  if (p.clock < 0) return !shard_->HasOpenRounds();
  return clocks_.CanRead(p.clock);
}

bool Server::CanServe(HeldPull& p) {
  if (!BoundAllows(p)) return false;
  if (!p.bound_met) p.bound_met = clock_->Now();
  if (!p.wait_for_own_push) return true;
  return clocks_.ClockOf(p.sender_id) >= p.clock || clock_->Now() >= p.hold_until;
}

void Server::ServePull(const HeldPull& p, const std::vector<uint32_t>* only) {
  const std::vector<uint32_t>& chunks = only ? *only : p.chunks;
  const int64_t limit = options_.job.wire.message_bytes;
  auto us = [](Duration d) {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
  };
  TimePoint now = clock_->Now();
  uint64_t held_us = us(p.bound_met.value_or(now) - p.since);
  uint64_t hold_us = us(now - p.since);
  int64_t min_clock = clocks_.MinClock();
  if (min_clock == ClockTable::kNoWorkers) min_clock = -1;
  size_t i = 0;
  while (i < chunks.size()) {
    wire::Header reply;
    reply.set_request_id(p.request_id);
    auto* r = reply.mutable_pull_reply();
    r->set_clock(p.clock);
    r->set_min_clock(min_clock);
    r->set_held_us(held_us);
    r->set_hold_us(hold_us);
    std::vector<transport::Payload> payloads;
    int64_t bytes = 0;
    while (i < chunks.size()) {
      uint32_t c = chunks[i];
      // Budget by the uncompressed size, so a message never exceeds the limit.
      int64_t size = static_cast<int64_t>(shard_->layout().Size(c) * sizeof(float));
      if (!payloads.empty() && bytes + size > limit) break;
      auto snap = shard_->Read(c);
      auto* d = r->add_chunks();
      d->set_chunk_id(c);
      d->set_num_elems(shard_->layout().Size(c));
      d->set_version(snap.version);
      // Workers get their link's pull codec; the evaluator and tools exact values.
      auto payload = pulls_.Encode(p.role == wire::WORKER ? p.sender_id : -1 - p.sender_id,
                                   p.role == wire::WORKER ? PullCodecFor(p.sender_id) : fp32_, c, snap, p.full, d);
      if (!payload.ok()) {
        GD_LOG(ERROR) << "encoding chunk " << c << " for " << p.sender_id << ": " << payload.status();
        return;
      }
      payloads.push_back(std::move(*payload));
      bytes += size;
      ++i;
    }
    Status s = socket_.Send(std::move(reply), payloads, p.peer);
    if (!s.ok()) {
      GD_LOG(WARNING) << "pull reply to " << p.sender_id << " failed: " << s;
      return;
    }
  }
}

void Server::ServeHeldPulls() {
  if (held_.empty()) return;
  std::vector<HeldPull> still;
  for (auto& p : held_) {
    if (CanServe(p)) {
      ServePull(p);
      continue;
    }
    // A pull waiting for its sender's own push pipelines: each chunk goes
    // out as soon as that push has been applied to it, while later chunks
    // are still arriving and being applied.
    if (p.wait_for_own_push && p.bound_met) {
      std::vector<uint32_t> ready, rest;
      for (uint32_t c : p.chunks) (shard_->LastClock(p.sender_id, c) >= p.clock - 1 ? ready : rest).push_back(c);
      if (!ready.empty()) {
        ServePull(p, &ready);
        p.chunks = std::move(rest);
      }
      if (p.chunks.empty()) continue;
    }
    still.push_back(std::move(p));
  }
  held_ = std::move(still);
}

void Server::SyncMembership() {
  uint64_t r = member_->replies();
  if (r == seen_replies_) return;
  seen_replies_ = r;
  cluster::MembershipView v = member_->view();
  if (!v.valid) return;
  if (!serving()) {
    // A backup's live set comes from its primary's ops, in their order.
    if (v.promoted)
      Promote();
    else
      return;
  }
  if (clocks_from_coordinator_) {
    // Recovering: every worker is where the coordinator last saw it, or
    // further if this shard's checkpoint says so.
    clocks_from_coordinator_ = false;
    clocks_ = ClockTable(options_.job.training.staleness_bound);
    // A worker's clock at the coordinator is the step it pulled; it may
    // already have pushed that step to our predecessor and been answered,
    // and it will not send it again. Count that step as finished here, or a
    // BSP shard would wait forever for it. (A push of it still on its way
    // is then a late one: dropped under BSP, applied when asynchronous.)
    std::vector<int64_t> seeds = v.clocks;
    for (auto& c : seeds) ++c;
    clocks_.SetLive(v.live, seeds);
    for (int w = 0; w < num_workers_; ++w)
      if (shard_->CompletedClock(w) >= 0) clocks_.Finished(w, shard_->CompletedClock(w));
    GD_LOG(INFO) << "clocks from the coordinator: slowest live worker at " << clocks_.MinClock();
  }
  if (replica_)
    for (const auto& si : v.servers) {
      if (si.id() != options_.id) continue;
      if (!si.endpoint().empty() && si.endpoint() != socket_.endpoint())
        fenced_ = "the coordinator says shard " + std::to_string(options_.id) + " is served at " + si.endpoint();
      // The coordinator declared our backup dead (it never promotes it
      // after that): from now on we acknowledge alone.
      else if (!degraded_ && si.backup_endpoint().empty())
        ReplicationDegraded("the coordinator declared the backup dead");
    }
  clocks_.SetLive(v.live, v.clocks);
  if (replica_ && !degraded_ && v.live != replicated_live_) {
    // Same live set, same rounds closed on the backup. Its ack holds nothing:
    // a round's pushes were held until the backup took them.
    replicated_live_ = v.live;
    const uint64_t seq = ++replica_seq_;
    SendOp(seq, ReplicateMembership(seq, v.live, v.clocks), {}, "", std::nullopt);
  }
  if (shard_->CloseRounds(clocks_) > 0 || !held_.empty()) ServeHeldPulls();
}

void Server::ReportHeldPulls() {
  TimePoint now = clock_->Now();
  if (now < next_report_ || held_.empty()) return;
  const Duration after = std::chrono::seconds(options_.job.membership.report_after_s);
  next_report_ = now + after;
  const HeldPull* oldest = &held_.front();
  for (const auto& p : held_)
    if (p.since < oldest->since) oldest = &p;
  if (now - oldest->since < after) return;
  std::string why;
  bool uninit = false;
  for (uint32_t c : oldest->chunks) uninit |= !shard_->IsInitialized(c);
  if (uninit) {
    why = "its chunks have no initial values yet (waiting for a worker's init)";
  } else {
    int slow = clocks_.SlowestWorker();
    why = "staleness bound " + std::to_string(clocks_.bound()) + " waits for worker " + std::to_string(slow) +
          " at clock " + std::to_string(clocks_.ClockOf(slow));
  }
  GD_LOG(INFO) << "holding " << held_.size() << " pull(s); worker " << oldest->sender_id << " at clock "
               << oldest->clock << " has waited " << static_cast<int>(Seconds(now - oldest->since)) << " s: " << why;
}

void Server::PublishProgress() {
  pub_updates_ = shard_->updates_applied();
  pub_dropped_ = shard_->dropped();
  pub_refused_ = counters_.messages_refused.load();
  pub_held_ = held_.size();
  pub_stale_mean_ = shard_->staleness().Mean();
  pub_stale_max_ = shard_->staleness().max();
}

void Server::WriteStats() const {
  if (options_.stats_file.empty()) return;
  nlohmann::json j;
  j["role"] = "server";
  j["id"] = options_.id;
  j["backup"] = options_.backup;
  j["promoted"] = promoted_;
  j["serving"] = serving();
  uint64_t taken = 0;
  nlohmann::json by_worker = nlohmann::json::object();
  for (const auto& [w, n] : taken_by_worker_) {
    taken += n;
    if (n) by_worker[std::to_string(w)] = n;
  }
  j["updates_taken"] = taken;
  j["taken_by_worker"] = by_worker;
  if (options_.backup) j["replication_ops_applied"] = applied_seq_;
  if (replica_) {
    j["replication_ops_sent"] = replicated_ops_;
    j["replication_degraded"] = degraded_;
    j["replication_ops_resent"] = ops_resent_;
  }
  if (promoted_) j["updates_at_promotion"] = updates_at_promotion_;
  if (first_update_unix_ > 0) j["first_update_unix"] = first_update_unix_;
  j["bytes_sent"] = counters_.bytes_sent.load();
  j["bytes_received"] = counters_.bytes_received.load();
  j["messages_sent"] = counters_.messages_sent.load();
  j["messages_received"] = counters_.messages_received.load();
  j["messages_refused"] = counters_.messages_refused.load();
  j["refused_by_reason"] = refused_;
  if (options_.job.wan.replan) {
    j["migration_chunks_sent"] = chunks_sent_;
    j["migration_chunks_adopted"] = chunks_adopted_;
    j["shard_map_version"] = map_version_;
  }
  if (shard_) {
    j["chunks"] = shard_->owned().size();
    j["updates_applied"] = shard_->updates_applied();
    j["duplicates"] = shard_->duplicates();
    j["stale_dropped"] = shard_->dropped();
    nlohmann::json h = nlohmann::json::object();
    for (const auto& [k, v] : shard_->staleness().NonZero()) h[std::to_string(k)] = v;
    j["staleness_histogram"] = h;
  }
  j["checkpoints_written"] = checkpoints_written_;
  j["last_checkpoint_clock"] = last_checkpoint_clock_;
  j["last_checkpoint_ms"] = last_checkpoint_ms_;
  if (!last_checkpoint_error_.empty()) j["checkpoint_error"] = last_checkpoint_error_;
  Status s = WriteFileAtomic(options_.stats_file, j.dump(2), /*durable=*/false);
  if (!s.ok()) GD_LOG(WARNING) << s;
}

const compression::CodecSpec& Server::PullCodecFor(int worker) const {
  auto it = pull_codecs_.find(worker);
  return it == pull_codecs_.end() ? fp32_ : it->second;
}

Status Server::Resume() {
  GD_ASSIGN_OR_RETURN(std::string text, ReadFile(options_.resume_file));
  GD_ASSIGN_OR_RETURN(ResumePlan plan, ResumePlan::FromJson(text, options_.resume_file));
  if (plan.worker_clocks.size() != static_cast<size_t>(num_workers_))
    return FailedPrecondition(options_.resume_file + ": plan for " + std::to_string(plan.worker_clocks.size()) +
                              " workers; this job has " + std::to_string(num_workers_));
  size_t took = 0;
  for (const std::string& path : plan.files) {
    GD_ASSIGN_OR_RETURN(wire::ShardCheckpoint ck, LoadCheckpoint(path));
    if (ck.job() != options_.job.name)
      return FailedPrecondition(path + ": checkpoint of job '" + ck.job() + "', not '" + options_.job.name + "'");
    GD_ASSIGN_OR_RETURN(size_t n, shard_->Restore(ck));
    took += n;
  }
  if (!shard_->AllInitialized())
    return FailedPrecondition("resume: the checkpoints in " + options_.resume_file + " hold only " +
                              std::to_string(took) + " of the " + std::to_string(shard_->owned().size()) +
                              " chunks this shard owns (did the model or wire.chunk_bytes change?)");
  // Workers start at the plan's clocks; a chunk here may already hold later
  // pushes of theirs (asynchronous checkpoints), which count as finished.
  clocks_ = ClockTable(options_.job.training.staleness_bound);
  std::vector<int> all;
  for (int w = 0; w < num_workers_; ++w) all.push_back(w);
  clocks_.SetLive(all, plan.worker_clocks);
  for (int w = 0; w < num_workers_; ++w)
    if (shard_->CompletedClock(w) >= 0) clocks_.Finished(w, shard_->CompletedClock(w));
  last_min_clock_ = clocks_.MinClock();
  int64_t every = options_.job.checkpoint.every_clocks;
  int64_t at = shard_->CheckpointClock(last_min_clock_);
  next_checkpoint_clock_ = every > 0 ? (at / every + 1) * every : 0;
  GD_LOG(INFO) << "resumed " << took << " chunks at clock " << at << " from " << plan.files.size()
               << " checkpoint file(s); workers start at clock " << plan.clock;
  return Status::Ok();
}

Status Server::Recover() {
  std::vector<std::string> refused;
  GD_ASSIGN_OR_RETURN(auto found,
                      NewestValidCheckpoint(options_.checkpoint_dir, options_.job.name, options_.id, &refused));
  GD_ASSIGN_OR_RETURN(size_t took, shard_->Restore(found.second));
  if (!shard_->AllInitialized())
    return FailedPrecondition("recover: " + found.first + " holds only " + std::to_string(took) + " of the " +
                              std::to_string(shard_->owned().size()) + " chunks this shard owns");
  // The workers went on without us: their clocks come from the coordinator
  // (the first membership view), not from the checkpoint.
  clocks_from_coordinator_ = true;
  int64_t every = options_.job.checkpoint.every_clocks;
  next_checkpoint_clock_ = every > 0 ? (found.second.clock() / every + 1) * every : 0;
  GD_LOG(WARNING) << "recovered " << took << " chunks from " << found.first << " (clock " << found.second.clock()
                  << ", " << found.second.updates_applied() << " updates); updates acknowledged after it are lost";
  return Status::Ok();
}

void Server::MaybeCheckpoint(const char* reason) {
  if (options_.checkpoint_dir.empty() || !shard_ || !shard_->AllInitialized() || !serving()) return;
  const CheckpointSpec& spec = options_.job.checkpoint;
  int64_t min_clock = clocks_.MinClock();
  if (min_clock != ClockTable::kNoWorkers) last_min_clock_ = min_clock;
  const int64_t clock = shard_->CheckpointClock(last_min_clock_);
  if (!reason && options_.checkpoint_requests && options_.checkpoint_requests->load() != seen_checkpoint_requests_) {
    seen_checkpoint_requests_ = options_.checkpoint_requests->load();
    reason = "request";
  }
  if (!reason && spec.every_clocks > 0 && clock >= next_checkpoint_clock_ && clock > 0) reason = "periodic";
  // The first one, as soon as every chunk has a value: a shard that dies
  // before its first periodic checkpoint can still restart in place.
  if (!reason && !restored_ && checkpoints_written_ == 0) reason = "initial";
  if (!reason || ((!std::strcmp(reason, "stop") || !std::strcmp(reason, "final")) && !spec.on_stop)) return;
  if (spec.every_clocks > 0) next_checkpoint_clock_ = (clock / spec.every_clocks + 1) * spec.every_clocks;
  TimePoint t0 = clock_->Now();
  wire::ShardCheckpoint ck = shard_->ToCheckpoint(last_min_clock_);
  ck.set_job(options_.job.name);
  ck.set_reason(reason);
  ck.set_unix_seconds(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  auto path = WriteCheckpoint(options_.checkpoint_dir, ck, spec.keep);
  last_checkpoint_ms_ = 1e3 * Seconds(clock_->Now() - t0);
  if (!path.ok()) {
    // Training goes on; the previous checkpoints stay as they were.
    last_checkpoint_error_ = path.status().message();
    GD_LOG(ERROR) << "checkpoint at clock " << clock << " failed: " << path.status();
    return;
  }
  ++checkpoints_written_;
  last_checkpoint_clock_ = clock;
  GD_LOG(INFO) << "checkpoint (" << reason << ") at clock " << clock << ": " << *path << " in " << last_checkpoint_ms_
               << " ms";
}

Status Server::Run(const std::atomic<bool>* stop) {
  // Codecs by worker, for this shard's links (checked here too, so that a
  // server started by hand refuses a bad codec name at start-up).
  const std::string& my_region = options_.job.RegionOfServer(options_.id).name;
  for (int w = 0; w < num_workers_; ++w) {
    const std::string& name = options_.job.PullCodec(options_.job.RegionOfWorker(w).name, my_region);
    auto spec = compression::ParseCodecSpec(name);
    if (!spec.ok()) return spec.status().Annotate("compression (pull codec for worker " + std::to_string(w) + ")");
    pull_codecs_[w] = *spec;
  }
  if (options_.credentials.enabled()) {
    zap_ = std::make_unique<transport::ZapHandler>(ctx_, /*admit_any=*/false);
    GD_RETURN_IF_ERROR(zap_->Start());
  }
  GD_RETURN_IF_ERROR(socket_.Bind(options_.bind));
  GD_LOG(INFO) << "listening on " << socket_.endpoint() << (zap_ ? " (CurveZMQ)" : "");
  cluster::MemberOptions mo;
  mo.job = options_.job.name;
  mo.role = options_.backup ? wire::BACKUP : wire::SERVER;
  mo.id = options_.id;
  mo.coordinator = options_.coordinator;
  mo.endpoint = socket_.endpoint();
  mo.region = options_.job.RegionOfServer(options_.id).name;
  mo.timing = options_.job.membership;
  mo.max_message_bytes = options_.job.wire.max_message_bytes;
  if (options_.credentials.enabled()) {
    mo.curve =
        transport::CurveSocket{.keys = options_.credentials.keys, .server_key = options_.credentials.coordinator_key};
    mo.token = options_.credentials.token;
    mo.authorize = [this](const wire::HeartbeatReply& r) { Authorize(r); };
  }
  member_ = std::make_unique<cluster::MemberClient>(ctx_, mo, &counters_, clock_);
  GD_ASSIGN_OR_RETURN(wire::RegisterReply assignment, member_->Join(stop));
  GD_ASSIGN_OR_RETURN(cluster::ShardMap map,
                      cluster::ShardMap::FromWire(assignment.shard_map(), options_.job.NumServers()));
  ShardOptions so;
  so.shard_id = options_.id;
  so.staleness_bound = options_.job.training.staleness_bound;
  so.staleness_scaling = options_.job.training.staleness_scaling;
  // With momentum correction the workers apply the momentum (pushes are
  // velocities); with local steps they run the optimizer and pushes are
  // model deltas, averaged by an outer step.
  so.optimizer = options_.job.ShardOptimizer();
  so.total_clocks = options_.job.ClocksPerWorker();
  shard_ = std::make_unique<ShardState>(so, map.layout, map.ChunksOf(options_.id));
  map_version_ = map.version;
  pulls_ = PullCompressor(map.layout, options_.job.seed * 7919 + static_cast<uint64_t>(options_.id));
  GD_LOG(INFO) << "owns " << shard_->owned().size() << " of " << map.layout.num_chunks() << " chunks ("
               << map.BytesPerServer(options_.job.NumServers())[options_.id] / 1024 << " KiB); optimizer "
               << options_.job.optimizer.name << ", staleness bound " << options_.job.training.staleness_bound;
  // Every worker starts at the clock the coordinator gave it (0 at job start).
  std::vector<int> all;
  for (int w = 0; w < num_workers_; ++w) all.push_back(w);
  clocks_.SetLive(all, std::vector<int64_t>(all.size(), assignment.start_clock()));
  next_checkpoint_clock_ = options_.job.checkpoint.every_clocks;
  if (!options_.resume_file.empty()) GD_RETURN_IF_ERROR(Resume());
  if (options_.recover) GD_RETURN_IF_ERROR(Recover());
  restored_ = !options_.resume_file.empty() || options_.recover;
  if (options_.job.replication.backups > 0 && !options_.backup) {
    std::string backup_key;
    for (const auto& si : assignment.servers())
      if (si.id() == options_.id) replica_endpoint_ = si.backup_endpoint(), backup_key = si.backup_curve_public_key();
    if (replica_endpoint_.empty()) return FailedPrecondition("replicated job, but the coordinator names no backup");
    if (options_.credentials.enabled() && backup_key.empty())
      return FailedPrecondition("secured replicated job, but the coordinator names no key for the backup");
    replica_ = std::make_unique<transport::Socket>(
        ctx_, zmq::socket_type::dealer,
        transport::SocketOptions{
            .job = options_.job.name,
            .role = wire::SERVER,
            .id = options_.id,
            .max_message_bytes = options_.job.wire.max_message_bytes,
            .curve = transport::CurveSocket{.keys = options_.credentials.keys, .server_key = backup_key}},
        &counters_);
    GD_RETURN_IF_ERROR(replica_->Connect(replica_endpoint_));
    GD_LOG(INFO) << "replicating to the backup at " << replica_endpoint_;
  }
  if (options_.backup) GD_LOG(INFO) << "backup of shard " << options_.id << ": applying the primary's ops";
  if (options_.checkpoint_requests) seen_checkpoint_requests_ = options_.checkpoint_requests->load();

  PublishProgress();
  member_->Start([this](wire::Heartbeat* hb) {
    auto* p = hb->mutable_server();
    p->set_updates_applied(pub_updates_.load());
    p->set_pushes_dropped(pub_dropped_.load());
    p->set_messages_refused(pub_refused_.load());
    p->set_held_pulls(pub_held_.load());
    p->set_staleness_mean(pub_stale_mean_.load());
    p->set_staleness_max(pub_stale_max_.load());
    p->set_promoted(pub_promoted_.load());
    p->set_updates_at_promotion(pub_updates_at_promotion_.load());
    hb->set_migration_done(pub_migration_done_.load());
  });

  TimePoint last_stats = clock_->Now();
  while (!stop->load()) {
    // Wake in time for the earliest own-push hold to expire. A pull the
    // staleness bound still holds is woken by pushes and membership, not by
    // its hold (which may have long expired: waking for it would spin).
    int wait_ms = 20;
    for (const auto& p : held_)
      if (p.wait_for_own_push && p.bound_met) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(p.hold_until - clock_->Now()).count();
        wait_ms = std::clamp<int>(static_cast<int>(left) + 1, 0, wait_ms);
      }
    bool readable = false;
    if (replica_ && !degraded_) {
      // Wait on both: the backup's acks release the workers' acks.
      zmq::pollitem_t items[] = {{socket_.raw().handle(), 0, ZMQ_POLLIN, 0},
                                 {replica_->raw().handle(), 0, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 2, std::chrono::milliseconds(wait_ms));
      } catch (const zmq::error_t&) {
      }
      readable = items[0].revents & ZMQ_POLLIN;
      DrainReplica();
    } else {
      readable = socket_.WaitReadable(wait_ms);
    }
    if (readable) {
      for (int i = 0; i < 64; ++i) {
        auto in = socket_.Receive();
        if (!in) break;
        if (!in->status.ok()) {
          Refuse(in->message, in->refusal, in->status);
          counters_.messages_refused--;  // the socket already counted it
          continue;
        }
        try {
          Handle(in->message);
        } catch (const std::exception& e) {
          Refuse(in->message, wire::REFUSAL_INTERNAL, Internal(e.what()));
        }
      }
    }
    SyncMembership();
    if (options_.job.wan.replan) {
      DrainTransfers();
      SyncMigration();
    }
    if (promoted_ && first_update_unix_ == 0 && shard_->updates_applied() > updates_at_promotion_) {
      first_update_unix_ = UnixSeconds();
      GD_LOG(INFO) << "first update applied since the promotion, after "
                   << static_cast<int>(1e3 * Seconds(clock_->Now() - promoted_at_)) << " ms";
    }
    ServeHeldPulls();
    ReportHeldPulls();
    PublishProgress();
    MaybeCheckpoint();
    TimePoint now = clock_->Now();
    if (now - last_stats > std::chrono::seconds(2)) {
      WriteStats();
      last_stats = now;
    }
    Status err = member_->error();
    if (!err.ok() && err.message() != reported_error_) {
      reported_error_ = err.message();
      GD_LOG(ERROR) << err;
    }
    if (options_.backup && !promoted_ && err.code() == Code::kFailedPrecondition) {
      // Declared dead while cut off: the primary went on alone, and this
      // backup will never serve. Nothing to keep.
      GD_LOG(ERROR) << "stopping: the coordinator retired this backup";
      member_->Stop(false);
      WriteStats();
      return err;
    }
    if (!fenced_.empty()) {
      // Fenced: exit without answering anything more (an error exit, so the
      // launcher counts a failover).
      GD_LOG(ERROR) << "stopping: " << fenced_;
      member_->Stop(false);
      WriteStats();
      return FailedPrecondition("server " + std::to_string(options_.id) + " fenced: " + fenced_);
    }
    if (member_->view().job_finished) {
      GD_LOG(INFO) << "job finished; " << shard_->updates_applied() << " updates applied, staleness mean "
                   << shard_->staleness().Mean() << " max " << shard_->staleness().max();
      MaybeCheckpoint("final");
      break;
    }
  }
  if (stop->load()) MaybeCheckpoint("stop");
  member_->Stop(true);
  WriteStats();
  return Status::Ok();
}

}  // namespace geodesic::server
