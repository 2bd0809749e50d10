#include "server/migration.h"

#include "cluster/chunking.h"
#include "common/log.h"

namespace geodesic::server {
namespace {

Handled Refused(wire::Refusal reason, Status status) {
  Handled h;
  h.reason = reason;
  h.status = std::move(status);
  return h;
}

wire::ChunkCheckpoint FromTransfer(const transport::Message& m) {
  const auto& t = m.header.chunk_transfer();
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
  return ck;
}

wire::Header ToTransfer(const wire::Migration& mg, uint32_t c, const wire::ChunkCheckpoint& state) {
  wire::Header h;
  auto* t = h.mutable_chunk_transfer();
  t->set_migration_id(mg.id());
  t->set_chunk_id(c);
  t->set_num_elems(state.num_elems());
  t->set_version(state.version());
  t->set_closed_through(state.closed_through());
  *t->mutable_last_clock() = state.last_clock();
  *t->mutable_optimizer_counters() = state.optimizer_counters();
  t->set_optimizer_arrays(static_cast<uint32_t>(state.optimizer_arrays_size()));
  *t->mutable_new_map() = mg.new_map();
  h.set_request_id(c);
  return h;
}

}  // namespace

Migration::Migration(const JobSpec& job, int server_id, const Clock* clock, transport::PeerConnector connect)
    : job_(job),
      server_id_(server_id),
      clock_(clock),
      connect_(std::move(connect)),
      // Resent every 2 s until acknowledged; the destination answers a resend again.
      outgoing_(transport::RetryPolicy{.retry_after = std::chrono::seconds(2)}) {}

void Migration::Start(ShardState* shard, PullService* pulls, uint64_t map_version) {
  shard_ = shard;
  pulls_ = pulls;
  map_version_ = map_version;
}

std::optional<Status> Migration::Moved(const wire::Header& h) const {
  if (moved_away_.empty()) return std::nullopt;
  auto check = [&](uint32_t c) { return moved_away_.count(c) > 0 && !shard_->Owns(c); };
  std::optional<uint32_t> moved;
  if (h.has_push_request())
    for (const auto& d : h.push_request().chunks())
      if (!moved && check(d.chunk_id())) moved = d.chunk_id();
  if (h.has_pull_request())
    for (uint32_t c : h.pull_request().chunk_ids())
      if (!moved && check(c)) moved = c;
  if (h.has_init_request())
    for (const auto& d : h.init_request().chunks())
      if (!moved && check(d.chunk_id())) moved = d.chunk_id();
  if (!moved) return std::nullopt;
  return FailedPrecondition("chunk " + std::to_string(*moved) + " moved to server " +
                            std::to_string(moved_away_.at(*moved)) + " (shard map version " +
                            std::to_string(map_version_ + (done_ > map_version_ ? 1 : 0)) + ")");
}

Handled Migration::Adopt(const transport::Message& m) {
  const auto& t = m.header.chunk_transfer();
  if (m.header.sender_role() != wire::SERVER)
    return Refused(wire::REFUSAL_BAD_SENDER, PermissionDenied("chunk transfers come from server shards only"));
  if (!job_.wan.replan)
    return Refused(wire::REFUSAL_UNSUPPORTED_TYPE, FailedPrecondition("this job does not re-plan (wan.replan: false)"));
  Handled h = AdoptChecked(m);
  if (!h.status.ok()) return h;
  h.reply.set_request_id(m.header.request_id());
  h.reply.mutable_chunk_transfer_ack()->set_migration_id(t.migration_id());
  h.reply.mutable_chunk_transfer_ack()->set_chunk_id(t.chunk_id());
  return h;
}

Handled Migration::AdoptChecked(const transport::Message& m) {
  const auto& t = m.header.chunk_transfer();
  auto map = cluster::ShardMap::FromWire(t.new_map(), job_.NumServers());
  if (!map.ok()) return Refused(wire::REFUSAL_BAD_MAP, map.status());
  if (map->layout.num_params() != shard_->layout().num_params() ||
      map->layout.chunk_elems() != shard_->layout().chunk_elems() || t.chunk_id() >= map->layout.num_chunks())
    return Refused(wire::REFUSAL_BAD_MAP, InvalidArgument("chunk transfer for another layout"));
  if (map->owner[t.chunk_id()] != server_id_)
    return Refused(wire::REFUSAL_CHUNK_NOT_OWNED,
                   InvalidArgument("the migration's map gives chunk " + std::to_string(t.chunk_id()) + " to server " +
                                   std::to_string(map->owner[t.chunk_id()])));
  if (shard_->Owns(t.chunk_id())) {
    auto it = adopted_.find(t.chunk_id());
    if (it != adopted_.end() && it->second == t.migration_id()) return Handled{};  // a resend
    return Refused(wire::REFUSAL_ALREADY_OWNED,
                   FailedPrecondition("chunk " + std::to_string(t.chunk_id()) + " is already owned here"));
  }
  const uint64_t n = shard_->layout().Size(t.chunk_id());
  if (t.num_elems() != n || m.frames.size() != 1 + t.optimizer_arrays())
    return Refused(wire::REFUSAL_WRONG_SHAPE, InvalidArgument("chunk transfer of the wrong shape"));
  if (Status s = shard_->AdoptChunk(FromTransfer(m)); !s.ok()) return Refused(wire::REFUSAL_BAD_CHUNK_STATE, s);
  pulls_->ForgetChunk(t.chunk_id());  // every puller gets full values of it first
  adopted_[t.chunk_id()] = t.migration_id();
  moved_away_.erase(t.chunk_id());
  ++chunks_adopted_;
  GD_LOG(INFO) << "migration " << t.migration_id() << ": took chunk " << t.chunk_id() << " (version " << t.version()
               << ") from server " << m.header.sender_id();
  return Handled{};
}

void Migration::Follow(const cluster::MembershipView& v) {
  announced_ = v.migration;
  if (v.shard_map.version() <= map_version_) return;
  auto map = cluster::ShardMap::FromWire(v.shard_map, job_.NumServers());
  if (!map.ok()) return;
  map_version_ = map->version;
  std::vector<uint32_t> want = map->ChunksOf(server_id_);
  if (want != shard_->owned())
    GD_LOG(ERROR) << "shard map version " << map_version_ << " gives this shard " << want.size() << " chunks; it owns "
                  << shard_->owned().size();
  else
    GD_LOG(INFO) << "shard map version " << map_version_ << ": owning " << want.size() << " chunks";
}

bool Migration::Begin(const wire::Migration& mg) {
  auto map = cluster::ShardMap::FromWire(mg.new_map(), job_.NumServers());
  if (!map.ok()) {
    GD_LOG(ERROR) << "migration " << mg.id() << ": " << map.status();
    return false;
  }
  id_ = mg.id();
  to_export_.clear();
  outgoing_.Clear();
  endpoints_.clear();
  for (const auto& si : mg.servers()) endpoints_[si.id()] = si.endpoint();
  for (uint32_t c : shard_->owned())
    if (map->owner[c] != server_id_) to_export_[c] = map->owner[c];
  moving_ = to_export_.size();
  GD_LOG(INFO) << "migration " << mg.id() << ": sending " << moving_ << " chunk(s) to their new owners";
  return true;
}

transport::PeerLink* Migration::PeerFor(const std::string& endpoint) {
  auto& peer = peers_[endpoint];
  if (peer) return peer.get();
  auto link = connect_(endpoint, "");
  if (!link.ok()) {
    GD_LOG(ERROR) << "migration: connecting to " << endpoint << ": " << link.status();
    return nullptr;
  }
  peer = std::move(*link);
  return peer.get();
}

bool Migration::SendChunk(const wire::Migration& mg, uint32_t c, int to) {
  // Every live worker waits at the barrier with its pushes below it
  // acknowledged; under BSP the last of them closed the chunk's round.
  auto state = shard_->ExportChunk(c);
  if (!state.ok()) {
    GD_LOG(WARNING) << "migration " << mg.id() << ": chunk " << c << " not ready to move: " << state.status();
    return false;
  }
  const std::string& endpoint = endpoints_[to];
  if (endpoint.empty()) {
    GD_LOG(ERROR) << "migration " << mg.id() << ": no endpoint for server " << to;
    return false;
  }
  std::vector<transport::Payload> payloads;
  payloads.push_back(transport::CopyPayload(state->params().data(), state->params().size()));
  for (const std::string& a : state->optimizer_arrays()) payloads.push_back(transport::CopyPayload(a.data(), a.size()));
  // From here on this shard refuses the chunk (REFUSAL_MOVED): nothing more
  // may be applied to a copy that is no longer the chunk's.
  shard_->DropChunk(c);
  pulls_->ForgetChunk(c);
  moved_away_[c] = to;
  ++chunks_sent_;
  transport::OutboxEntry& e = outgoing_.Add(c, to, ToTransfer(mg, c, *state), std::move(payloads), clock_->Now());
  if (transport::PeerLink* peer = PeerFor(endpoint))
    if (Status s = peer->Send(e.header, e.payloads); !s.ok())
      GD_LOG(WARNING) << "migration: chunk " << c << " to server " << to << " not sent yet: " << s;
  return true;
}

bool Migration::Sync() {
  const wire::Migration& mg = announced_;
  if (mg.id() == 0 || !mg.transfer() || mg.id() == done_) return false;
  if (mg.id() != id_ && !Begin(mg)) return false;
  for (auto it = to_export_.begin(); it != to_export_.end();)
    it = SendChunk(mg, it->first, it->second) ? to_export_.erase(it) : std::next(it);
  for (auto& [c, e] : outgoing_.Due(clock_->Now()))
    if (transport::PeerLink* peer = PeerFor(endpoints_[e->dest]))
      if (Status s = peer->Send(e->header, e->payloads); !s.ok())
        GD_LOG(WARNING) << "migration: chunk " << c << " to server " << e->dest << " not sent yet: " << s;
  if (!to_export_.empty() || !outgoing_.empty()) return false;
  done_ = mg.id();
  done_pub_ = done_;
  GD_LOG(INFO) << "migration " << mg.id() << ": all " << moving_ << " outgoing chunk(s) acknowledged; now owning "
               << shard_->owned().size();
  return true;
}

void Migration::Drain() {
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
      if (h.has_chunk_transfer_ack() && h.chunk_transfer_ack().migration_id() == id_)
        outgoing_.Ack(h.chunk_transfer_ack().chunk_id());
    }
  }
}

void Migration::AddStats(stats::ShardStats* j) const {
  j->set_migration_chunks_sent(chunks_sent_);
  j->set_migration_chunks_adopted(chunks_adopted_);
  j->set_shard_map_version(map_version_);
}

}  // namespace geodesic::server
