#include "server/server.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "common/files.h"
#include "common/log.h"
#include "compression/codec.h"

namespace geodesic::server {

Server::Server(ServerProcessOptions options, zmq::context_t& ctx, const Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      ctx_(ctx),
      socket_(ctx, zmq::socket_type::router,
              wan::SocketOptions{.job = options_.job.name,
                                 .role = wire::SERVER,
                                 .id = options_.id,
                                 .max_message_bytes = options_.job.wire.max_message_bytes,
                                 .curve = wan::CurveSocket{.keys = options_.credentials.keys, .server_key = {}}},
              &counters_),
      clocks_(options_.job.training.staleness_bound),
      num_workers_(options_.job.NumWorkers()) {}

void Server::Refuse(const wan::Message& m, const std::string& reason, const Status& status) {
  refused_[reason]++;
  counters_.messages_refused++;
  GD_LOG(WARNING) << "refused " << wan::BodyName(m.header) << " from "
                  << (m.header.sender_role() == wire::WORKER ? "worker " : "peer ") << m.header.sender_id() << " ("
                  << reason << "): " << status.message();
  if (m.peer.empty()) return;
  wire::Header reply;
  reply.set_request_id(m.header.request_id());
  reply.mutable_error_reply()->set_code(wan::ToWire(status.code()));
  reply.mutable_error_reply()->set_message(status.message());
  (void)socket_.Send(std::move(reply), {}, m.peer);
}

Status Server::ValidateChunks(const wan::Message& m, const google::protobuf::RepeatedPtrField<wire::ChunkData>& chunks,
                              bool finite, std::string* reason, std::vector<const float*>* values) {
  values->clear();
  if (static_cast<size_t>(chunks.size()) != m.frames.size()) {
    *reason = "frame_count";
    return InvalidArgument(std::to_string(chunks.size()) + " chunks described but " + std::to_string(m.frames.size()) +
                           " payload frames");
  }
  std::set<uint32_t> seen;
  for (int i = 0; i < chunks.size(); ++i) {
    const wire::ChunkData& c = chunks[i];
    if (c.chunk_id() >= shard_->layout().num_chunks()) {
      *reason = "chunk_out_of_range";
      return OutOfRange("chunk " + std::to_string(c.chunk_id()) + " does not exist (the model has " +
                        std::to_string(shard_->layout().num_chunks()) + " chunks)");
    }
    if (!shard_->Owns(c.chunk_id())) {
      *reason = "chunk_not_owned";
      return OutOfRange("chunk " + std::to_string(c.chunk_id()) + " is not owned by server " +
                        std::to_string(options_.id));
    }
    if (!seen.insert(c.chunk_id()).second) {
      *reason = "duplicate_chunk";
      return InvalidArgument("chunk " + std::to_string(c.chunk_id()) + " appears twice");
    }
    uint64_t expected = shard_->layout().Size(c.chunk_id());
    if (c.num_elems() != expected) {
      *reason = "wrong_shape";
      return InvalidArgument("chunk " + std::to_string(c.chunk_id()) + " has " + std::to_string(expected) +
                             " values, message says " + std::to_string(c.num_elems()));
    }
    if (c.delta()) {
      *reason = "bad_payload";
      return InvalidArgument("chunk " + std::to_string(c.chunk_id()) + ": only pull replies carry deltas");
    }
    const compression::PayloadInfo info = compression::PayloadInfo::FromWire(c);
    const zmq::message_t& frame = m.frames[i];
    Status s = compression::CheckPayloadSize(info, c.num_elems(), frame.size());
    if (!s.ok()) {
      *reason = compression::MaxEncodedBytes(info, c.num_elems()) == 0 ? "unknown_codec" : "bad_payload_size";
      return s.Annotate("chunk " + std::to_string(c.chunk_id()));
    }
    if (decoded_.size() <= static_cast<size_t>(i)) decoded_.resize(i + 1);
    const float* v = nullptr;
    if (info.codec == wire::FP32 && !info.zstd) {
      v = m.FrameFloats(i, &decoded_[i]);  // in place unless misaligned
      if (finite) {
        size_t first = 0;
        size_t bad = compression::CountNonFinite(v, c.num_elems(), &first);
        if (bad) {
          *reason = "non_finite";
          return InvalidArgument("chunk " + std::to_string(c.chunk_id()) + " holds " + std::to_string(bad) +
                                 " non-finite values (first at index " + std::to_string(first) + ": " +
                                 std::to_string(v[first]) + ")");
        }
      }
    } else {
      // Decoding validates everything, finite values included.
      decoded_[i].resize(c.num_elems());
      s = compression::Decode(info, frame.data(), frame.size(), c.num_elems(), decoded_[i].data(), &zstd_scratch_);
      if (!s.ok()) {
        *reason = s.message().find("finite") != std::string::npos ? "non_finite" : "bad_payload";
        return s.Annotate("chunk " + std::to_string(c.chunk_id()) + " (" + compression::CodecName(info.codec) + ")");
      }
      v = decoded_[i].data();
    }
    values->push_back(v);
  }
  return Status::Ok();
}

void Server::Authorize(const wire::HeartbeatReply& r) {
  std::map<std::string, int> owners;
  for (int i = 0; i < r.authorized_keys_size() && i < r.authorized_ids_size(); ++i)
    owners[r.authorized_keys(i)] = r.authorized_ids(i);
  zap_->SetAllowed({r.authorized_keys().begin(), r.authorized_keys().end()});
  std::lock_guard<std::mutex> lock(keys_mu_);
  key_owner_ = std::move(owners);
}

Status Server::CheckSender(const wan::Message& m) const {
  if (!options_.credentials.enabled()) return Status::Ok();
  // The ZAP handler admitted the connection; here the key must also be the
  // sender's own, so that one worker cannot push or pull as another.
  std::lock_guard<std::mutex> lock(keys_mu_);
  auto it = key_owner_.find(m.peer_key);
  if (it == key_owner_.end()) return PermissionDenied("the connection's CURVE key is not authorized here");
  int want = m.header.sender_role() == wire::EVALUATOR ? -1 : m.header.sender_id();
  if ((m.header.sender_role() != wire::WORKER && m.header.sender_role() != wire::EVALUATOR) || it->second != want)
    return PermissionDenied("the connection's CURVE key is not the sender's");
  return Status::Ok();
}

void Server::Handle(wan::Message& m) {
  if (Status s = CheckSender(m); !s.ok()) return Refuse(m, "unauthorized", s);
  switch (m.header.body_case()) {
    case wire::Header::kPullRequest:
      return HandlePull(m);
    case wire::Header::kPushRequest:
      return HandlePush(m);
    case wire::Header::kInitRequest:
      return HandleInit(m);
    default:
      Refuse(m, "unsupported_type",
             InvalidArgument("a server does not serve " + wan::BodyName(m.header) + " messages"));
  }
}

void Server::HandleInit(wan::Message& m) {
  const auto& req = m.header.init_request();
  if (m.header.sender_role() != wire::WORKER)
    return Refuse(m, "bad_sender", InvalidArgument("only workers send initial values"));
  std::string reason;
  std::vector<const float*> values;
  Status s = ValidateChunks(m, req.chunks(), /*finite=*/true, &reason, &values);
  if (!s.ok()) return Refuse(m, reason, s);
  wire::Header reply;
  reply.set_request_id(m.header.request_id());
  auto* ack = reply.mutable_init_ack();
  for (int i = 0; i < req.chunks_size(); ++i) {
    bool took = shard_->Init(req.chunks(i).chunk_id(), values[i]);
    if (took)
      ack->set_accepted_chunks(ack->accepted_chunks() + 1);
    else
      ack->set_ignored_chunks(ack->ignored_chunks() + 1);
  }
  if (ack->accepted_chunks() && shard_->AllInitialized())
    GD_LOG(INFO) << "all " << shard_->owned().size() << " chunks initialized (by worker " << m.header.sender_id()
                 << ")";
  (void)socket_.Send(std::move(reply), {}, m.peer);
  ServeHeldPulls();
}

void Server::HandlePush(wan::Message& m) {
  const auto& req = m.header.push_request();
  int worker = m.header.sender_id();
  if (m.header.sender_role() != wire::WORKER || worker < 0 || worker >= num_workers_)
    return Refuse(m, "bad_sender", InvalidArgument("pushes come from workers 0.." + std::to_string(num_workers_ - 1)));
  if (req.clock() < 0) return Refuse(m, "bad_clock", InvalidArgument("negative clock"));
  if (req.skipped()) {
    if (!m.frames.empty() || req.chunks_size() != 0)
      return Refuse(m, "frame_count", InvalidArgument("a skipped push carries no chunks"));
    wire::Header reply;
    reply.set_request_id(m.header.request_id());
    reply.mutable_push_ack()->set_clock(req.clock());
    bool completed = shard_->Skip(worker, req.clock());
    reply.mutable_push_ack()->set_result(completed ? wire::APPLIED : wire::DUPLICATE);
    if (completed) {
      GD_LOG(WARNING) << "worker " << worker << " skipped clock " << req.clock() << " (no usable gradient)";
      clocks_.Finished(worker, req.clock());
      shard_->CloseRounds(clocks_);
    }
    (void)socket_.Send(std::move(reply), {}, m.peer);
    if (completed) ServeHeldPulls();
    return;
  }
  std::string reason;
  std::vector<const float*> values;
  Status s = ValidateChunks(m, req.chunks(), /*finite=*/true, &reason, &values);
  if (!s.ok())
    return Refuse(m, reason,
                  s.Annotate("push of worker " + std::to_string(worker) + " at clock " + std::to_string(req.clock())));
  for (const auto& c : req.chunks())
    if (!shard_->IsInitialized(c.chunk_id()))
      return Refuse(m, "not_initialized",
                    FailedPrecondition("chunk " + std::to_string(c.chunk_id()) + " has no initial value yet"));

  wire::Header reply;
  reply.set_request_id(m.header.request_id());
  auto* ack = reply.mutable_push_ack();
  ack->set_clock(req.clock());
  bool completed = false;
  for (int i = 0; i < req.chunks_size(); ++i) {
    const auto& c = req.chunks(i);
    auto out = shard_->Push(worker, req.clock(), c.chunk_id(), c.version(), values[i],
                            static_cast<int>(clocks_.live().size()));
    switch (out.result) {
      case wire::APPLIED:
        ack->set_applied_chunks(ack->applied_chunks() + 1);
        break;
      case wire::DUPLICATE:
        ack->set_duplicate_chunks(ack->duplicate_chunks() + 1);
        break;
      default:
        ack->set_dropped_chunks(ack->dropped_chunks() + 1);
        break;
    }
    if (out.staleness >= 0) ack->add_staleness(out.staleness);
    completed |= out.clock_completed;
  }
  ack->set_result(ack->applied_chunks()     ? wire::APPLIED
                  : ack->duplicate_chunks() ? wire::DUPLICATE
                                            : wire::STALE_DROPPED);
  if (completed) {
    clocks_.Finished(worker, req.clock());
    shard_->CloseRounds(clocks_);
  }
  // Acknowledge after the update took effect (applied, or held in its round).
  (void)socket_.Send(std::move(reply), {}, m.peer);
  ServeHeldPulls();
}

void Server::HandlePull(wan::Message& m) {
  const auto& req = m.header.pull_request();
  wire::Role role = m.header.sender_role();
  if (role != wire::WORKER && role != wire::EVALUATOR && role != wire::CLIENT)
    return Refuse(m, "bad_sender", InvalidArgument("pulls come from workers, the evaluator or tools"));
  if (req.final() && role == wire::WORKER)
    return Refuse(m, "bad_sender", InvalidArgument("workers may not skip the staleness bound"));
  if (!m.frames.empty()) return Refuse(m, "frame_count", InvalidArgument("a pull request carries no payload"));
  HeldPull p;
  p.peer = m.peer;
  p.request_id = m.header.request_id();
  p.sender_id = m.header.sender_id();
  p.role = role;
  p.clock = req.final() ? -1 : req.clock();
  p.since = clock_->Now();
  std::set<uint32_t> seen;
  for (uint32_t c : req.chunk_ids()) {
    if (c >= shard_->layout().num_chunks() || !shard_->Owns(c))
      return Refuse(
          m, "chunk_out_of_range",
          OutOfRange("chunk " + std::to_string(c) + " is not owned by server " + std::to_string(options_.id)));
    if (!seen.insert(c).second)
      return Refuse(m, "duplicate_chunk", InvalidArgument("chunk " + std::to_string(c) + " asked twice"));
    p.chunks.push_back(c);
  }
  if (p.chunks.empty()) p.chunks = shard_->owned();
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
    std::vector<wan::Payload> payloads;
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
  MembershipView v = member_->view();
  if (!v.valid) return;
  clocks_.SetLive(v.live, v.clocks);
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
  j["bytes_sent"] = counters_.bytes_sent.load();
  j["bytes_received"] = counters_.bytes_received.load();
  j["messages_sent"] = counters_.messages_sent.load();
  j["messages_received"] = counters_.messages_received.load();
  j["messages_refused"] = counters_.messages_refused.load();
  j["refused_by_reason"] = refused_;
  if (shard_) {
    j["chunks"] = shard_->owned().size();
    j["updates_applied"] = shard_->updates_applied();
    j["duplicates"] = shard_->duplicates();
    j["stale_dropped"] = shard_->dropped();
    nlohmann::json h = nlohmann::json::object();
    for (const auto& [k, v] : shard_->staleness().NonZero()) h[std::to_string(k)] = v;
    j["staleness_histogram"] = h;
  }
  Status s = WriteFileAtomic(options_.stats_file, j.dump(2), /*durable=*/false);
  if (!s.ok()) GD_LOG(WARNING) << s;
}

const compression::CodecSpec& Server::PullCodecFor(int worker) const {
  auto it = pull_codecs_.find(worker);
  return it == pull_codecs_.end() ? fp32_ : it->second;
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
    zap_ = std::make_unique<wan::ZapHandler>(ctx_, /*admit_any=*/false);
    GD_RETURN_IF_ERROR(zap_->Start());
  }
  GD_RETURN_IF_ERROR(socket_.Bind(options_.bind));
  GD_LOG(INFO) << "listening on " << socket_.endpoint() << (zap_ ? " (CurveZMQ)" : "");
  MemberOptions mo;
  mo.job = options_.job.name;
  mo.role = wire::SERVER;
  mo.id = options_.id;
  mo.coordinator = options_.coordinator;
  mo.endpoint = socket_.endpoint();
  mo.region = options_.job.RegionOfServer(options_.id).name;
  mo.timing = options_.job.membership;
  if (options_.credentials.enabled()) {
    mo.curve = wan::CurveSocket{.keys = options_.credentials.keys, .server_key = options_.credentials.coordinator_key};
    mo.token = options_.credentials.token;
    mo.authorize = [this](const wire::HeartbeatReply& r) { Authorize(r); };
  }
  member_ = std::make_unique<MemberClient>(ctx_, mo, &counters_, clock_);
  GD_ASSIGN_OR_RETURN(wire::RegisterReply assignment, member_->Join(stop));
  GD_ASSIGN_OR_RETURN(ShardMap map, ShardMap::FromWire(assignment.shard_map(), options_.job.NumServers()));
  ShardOptions so;
  so.shard_id = options_.id;
  so.staleness_bound = options_.job.training.staleness_bound;
  so.staleness_scaling = options_.job.training.staleness_scaling;
  so.optimizer = options_.job.optimizer;
  // With momentum correction the workers apply the momentum; pushes are velocities.
  if (options_.job.compression.momentum_correction) so.optimizer.momentum = 0;
  so.total_clocks = options_.job.StepsPerWorker();
  shard_ = std::make_unique<ShardState>(so, map.layout, map.ChunksOf(options_.id));
  pulls_ = PullCompressor(map.layout, options_.job.seed * 7919 + static_cast<uint64_t>(options_.id));
  GD_LOG(INFO) << "owns " << shard_->owned().size() << " of " << map.layout.num_chunks() << " chunks ("
               << map.BytesPerServer(options_.job.NumServers())[options_.id] / 1024 << " KiB); optimizer "
               << options_.job.optimizer.name << ", staleness bound " << options_.job.training.staleness_bound;
  // Every worker starts at the clock the coordinator gave it (0 at job start).
  std::vector<int> all;
  for (int w = 0; w < num_workers_; ++w) all.push_back(w);
  clocks_.SetLive(all, std::vector<int64_t>(all.size(), assignment.start_clock()));

  PublishProgress();
  member_->Start([this](wire::Heartbeat* hb) {
    auto* p = hb->mutable_server();
    p->set_updates_applied(pub_updates_.load());
    p->set_pushes_dropped(pub_dropped_.load());
    p->set_messages_refused(pub_refused_.load());
    p->set_held_pulls(pub_held_.load());
    p->set_staleness_mean(pub_stale_mean_.load());
    p->set_staleness_max(pub_stale_max_.load());
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
    if (socket_.WaitReadable(wait_ms)) {
      for (int i = 0; i < 64; ++i) {
        auto in = socket_.Receive();
        if (!in) break;
        if (!in->status.ok()) {
          std::string reason =
              in->status.message().find("unknown message type") != std::string::npos ? "unknown_type" : "malformed";
          Refuse(in->message, reason, in->status);
          counters_.messages_refused--;  // the socket already counted it
          continue;
        }
        try {
          Handle(in->message);
        } catch (const std::exception& e) {
          Refuse(in->message, "internal", Internal(e.what()));
        }
      }
    }
    SyncMembership();
    ServeHeldPulls();
    ReportHeldPulls();
    PublishProgress();
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
    if (member_->view().job_finished) {
      GD_LOG(INFO) << "job finished; " << shard_->updates_applied() << " updates applied, staleness mean "
                   << shard_->staleness().Mean() << " max " << shard_->staleness().max();
      break;
    }
  }
  member_->Stop(true);
  WriteStats();
  return Status::Ok();
}

}  // namespace geodesic::server
