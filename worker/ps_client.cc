#include "worker/ps_client.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/log.h"
#include "common/wait.h"
#include "compression/codec.h"

namespace geodesic::worker {

PsClient::PsClient(zmq::context_t& ctx, PsClientOptions options, const wire::RegisterReply& assignment,
                   transport::TrafficCounters* counters, const Clock* clock)
    : options_(std::move(options)), clock_(clock), ctx_(ctx), counters_(counters) {
  auto map = cluster::ShardMap::FromWire(assignment.shard_map(), assignment.servers_size());
  GD_CHECK(map.ok()) << map.status();
  map_ = *map;
  compressor_ = std::make_unique<compression::PushCompressor>(
      compression::PushCompressorOptions{.error_feedback = options_.error_feedback,
                                         .local_momentum = options_.local_momentum,
                                         .sparsity_warmup_steps = options_.sparsity_warmup_steps,
                                         .seed = options_.seed,
                                         .sender = options_.id},
      map_.layout.num_params(), map_.layout.chunk_elems());
  const transport::RetryPolicy retry{
      .retry_after = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(options_.retry_after_s))};
  pushes_.set_policy(retry);
  inits_.set_policy(retry);
  versions_.assign(map_.layout.num_chunks(), 0);
  copy_seq_.assign(map_.layout.num_chunks(), -1);
  for (const auto& s : assignment.servers()) {
    Shard shard;
    shard.id = s.id();
    shard.endpoint = s.endpoint();
    shard.region = s.region();
    shard.curve_key = s.curve_public_key();
    shard.chunks = map_.ChunksOf(s.id());
    shards_.push_back(std::move(shard));
  }
  std::sort(shards_.begin(), shards_.end(), [](const Shard& a, const Shard& b) { return a.id < b.id; });
  for (size_t si = 0; si < shards_.size(); ++si) compressor_->SetChunks(si, shards_[si].chunks);
}

Status PsClient::Connect() {
  for (size_t si = 0; si < shards_.size(); ++si) {
    Shard& s = shards_[si];
    auto it = options_.push_codecs.find(s.region);
    if (it != options_.push_codecs.end()) {
      GD_ASSIGN_OR_RETURN(compression::CodecSpec spec, compression::ParseCodecSpec(it->second));
      compressor_->SetCodec(si, s.id, spec);
    }
    GD_RETURN_IF_ERROR(ConnectShard(s));
  }
  return Status::Ok();
}

Status PsClient::ConnectShard(Shard& s) {
  transport::SocketOptions so{.job = options_.job,
                              .role = options_.role,
                              .id = options_.id,
                              .max_message_bytes = options_.wire.max_message_bytes,
                              .curve = transport::CurveSocket{.keys = options_.curve_keys, .server_key = s.curve_key},
                              .also_count = s.wire.get()};
  s.socket = std::make_unique<transport::Socket>(ctx_, zmq::socket_type::dealer, so, counters_);
  return s.socket->Connect(s.endpoint);
}

void PsClient::FollowRedirects() {
  if (!options_.servers_view) return;
  std::vector<wire::ServerInfo> servers;
  uint64_t epoch = options_.servers_view(servers_epoch_, &servers);
  if (epoch <= servers_epoch_) return;
  servers_epoch_ = epoch;
  for (const auto& info : servers) {
    for (size_t si = 0; si < shards_.size(); ++si) {
      Shard& s = shards_[si];
      if (s.id != info.id() || info.endpoint().empty() || info.endpoint() == s.endpoint) continue;
      GD_LOG(WARNING) << "server " << s.id << " moved from " << s.endpoint << " to " << info.endpoint()
                      << " (its backup was promoted); resending what it has not answered";
      s.endpoint = info.endpoint();
      s.curve_key = info.curve_public_key();
      s.min_rtt_s = -1;
      Status st = ConnectShard(s);
      if (!st.ok()) {
        GD_LOG(ERROR) << "reconnecting to server " << s.id << ": " << st;
        continue;
      }
      ++redirects_;
      // The promoted backup holds every push its primary acknowledged;
      // the others it answers as duplicates or applies now.
      for (auto& [clock, p] : pulls_) {
        if (p.remaining == 0) continue;
        bool missing = false;
        for (uint32_t c : s.chunks) missing |= !p.got[c];
        if (missing) (void)SendPullRequest(p, si, clock < 0);
      }
      TimePoint now = clock_->Now();
      for (auto* pending : {&pushes_, &inits_})
        for (auto& [id, e] : *pending) {
          if (e.dest != static_cast<int>(si)) continue;
          (void)s.socket->Send(e.header, e.payloads);
          e.sent = now;
        }
    }
  }
}

Status PsClient::SwitchMap(const wire::ShardMap& wire_map) {
  GD_ASSIGN_OR_RETURN(cluster::ShardMap next, cluster::ShardMap::FromWire(wire_map, static_cast<int>(shards_.size())));
  if (next.layout.num_params() != map_.layout.num_params() || next.layout.chunk_elems() != map_.layout.chunk_elems())
    return InvalidArgument("the new shard map has another layout");
  if (next.version <= map_.version) return Status::Ok();
  std::vector<uint32_t> moved;
  for (uint32_t c = 0; c < next.layout.num_chunks(); ++c)
    if (next.owner[c] != map_.owner[c]) moved.push_back(c);
  map_ = std::move(next);
  for (size_t si = 0; si < shards_.size(); ++si) {
    shards_[si].chunks = map_.ChunksOf(shards_[si].id);
    compressor_->SetChunks(si, shards_[si].chunks);
  }
  for (uint32_t c : moved) copy_seq_[c] = -1;  // the new owner keeps no copy of ours
  chunks_rerouted_ += moved.size();
  GD_LOG(INFO) << "shard map version " << map_.version << ": " << moved.size() << " chunk(s) changed owner";
  ReroutePushes();
  // Pulls still waiting for moved chunks ask their new owners.
  for (auto& [clock, p] : pulls_)
    if (p.remaining > 0) (void)RerequestMissing(p, clock < 0, &moved);
  return Status::Ok();
}

// Pushes not acknowledged yet (none at a barrier, unless one was refused as
// moved): each chunk goes to its owner now, in messages split by owner. The
// descriptors and payload frames are reused as they are; the ledger already
// counted them when they were first sent.
void PsClient::ReroutePushes() {
  std::map<int, size_t> index;  // server id -> position in shards_
  for (size_t si = 0; si < shards_.size(); ++si) index[shards_[si].id] = si;
  std::vector<uint64_t> split;
  for (auto& [id, e] : pushes_) {
    bool same = true;
    for (const auto& d : e.header.push_request().chunks()) same &= map_.owner[d.chunk_id()] == shards_[e.dest].id;
    if (!same) split.push_back(id);
  }
  const TimePoint now = clock_->Now();
  for (uint64_t id : split) {
    transport::OutboxEntry push = std::move(*pushes_.Find(id));
    pushes_.Ack(id);
    const auto& req = push.header.push_request();
    std::map<size_t, transport::OutboxEntry> parts;
    for (int i = 0; i < req.chunks_size(); ++i) {
      transport::OutboxEntry& part = parts[index[map_.owner[req.chunks(i).chunk_id()]]];
      if (!part.header.has_push_request()) {
        part.header = push.header;
        part.header.mutable_push_request()->clear_chunks();
      }
      *part.header.mutable_push_request()->add_chunks() = req.chunks(i);
      part.payloads.push_back(push.payloads[i]);
    }
    for (auto& [si, part] : parts) {
      const uint64_t nid = next_request_++;
      part.header.set_request_id(nid);
      (void)shards_[si].socket->Send(part.header, part.payloads);
      pushes_.Add(nid, static_cast<int>(si), std::move(part.header), std::move(part.payloads), now);
    }
  }
}

Status PsClient::RerequestMissing(PendingPull& p, bool final, const std::vector<uint32_t>* only) {
  Status first;
  for (size_t si = 0; si < shards_.size(); ++si) {
    bool missing = false;
    for (uint32_t c : shards_[si].chunks)
      missing |= !p.got[c] && (!only || std::binary_search(only->begin(), only->end(), c));
    if (!missing) continue;
    Status s = SendPullRequest(p, si, final);
    if (first.ok()) first = s;
  }
  return first;
}

void PsClient::Poll(int timeout_ms) {
  FollowRedirects();
  std::vector<zmq::pollitem_t> items;
  for (auto& s : shards_) items.push_back({s.socket->raw().handle(), 0, ZMQ_POLLIN, 0});
  try {
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(timeout_ms));
  } catch (const zmq::error_t&) {
    return;  // interrupted by a signal; callers re-check their stop flag
  }
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (!(items[i].revents & ZMQ_POLLIN)) continue;
    for (int k = 0; k < 256; ++k) {
      auto in = shards_[i].socket->Receive();
      if (!in) break;
      if (!in->status.ok()) {
        GD_LOG(WARNING) << "server " << shards_[i].id << " sent a message we refuse: " << in->status;
        continue;
      }
      OnMessage(static_cast<int>(i), in->message);
    }
  }
}

void PsClient::OnMessage(int shard, transport::Message& m) {
  const wire::Header& h = m.header;
  switch (h.body_case()) {
    case wire::Header::kPullReply:
      OnPullReply(shard, m);
      return;
    case wire::Header::kPushAck:
      OnPushAck(shard, h);
      return;
    case wire::Header::kInitAck:
      inits_.Ack(h.request_id());
      return;
    case wire::Header::kErrorReply:
      OnErrorReply(shard, h);
      return;
    default:
      GD_LOG(WARNING) << "unexpected " << transport::BodyName(h) << " from server " << shards_[shard].id;
  }
}

Status PsClient::CheckPulledChunk(int shard, const transport::Message& m, int i) const {
  const auto& d = m.header.pull_reply().chunks(i);
  if (d.chunk_id() >= map_.layout.num_chunks() || map_.owner[d.chunk_id()] != shards_[shard].id)
    return InvalidArgument("server " + std::to_string(shards_[shard].id) + " sent chunk " +
                           std::to_string(d.chunk_id()) + " it does not own");
  if (d.num_elems() != map_.layout.Size(d.chunk_id()))
    return InvalidArgument("server sent chunk " + std::to_string(d.chunk_id()) + " with " +
                           std::to_string(d.num_elems()) + " values, expected " +
                           std::to_string(map_.layout.Size(d.chunk_id())));
  return compression::CheckPayloadSize(compression::PayloadInfo::FromWire(d), d.num_elems(), m.frames[i].size())
      .Annotate("pull reply from server " + std::to_string(shards_[shard].id));
}

void PsClient::OnPullReply(int shard, transport::Message& m) {
  const auto& r = m.header.pull_reply();
  auto it = pulls_.find(r.clock());
  if (it == pulls_.end()) return;  // answer to a pull we already completed (a resend)
  PendingPull& p = it->second;
  if (static_cast<size_t>(r.chunks_size()) != m.frames.size()) {
    p.error = InvalidArgument("server " + std::to_string(shards_[shard].id) + " sent a malformed pull reply");
    return;
  }
  for (int i = 0; i < r.chunks_size(); ++i) {
    if (Status s = CheckPulledChunk(shard, m, i); !s.ok()) {
      p.error = s;
      return;
    }
    const auto& d = r.chunks(i);
    if (p.got[d.chunk_id()]) continue;  // duplicate answer to a resent request
    p.got[d.chunk_id()] = true;
    --p.remaining;
    shards_[shard].raw_received += static_cast<uint64_t>(d.num_elems()) * sizeof(float);
    if (p.dest) {
      Status s = Decode(p, d, m.frames[i]);
      if (!s.ok()) p.error = s;
    } else {
      p.data.emplace_back(d, std::move(m.frames[i]));
      if (p.borrow)
        if (Status s = CheckBorrowable(d, p.data.back().second); !s.ok()) p.error = s;
    }
  }
  p.max_held_us = std::max<uint64_t>(p.max_held_us, r.held_us());
  p.max_hold_us = std::max<uint64_t>(p.max_hold_us, r.hold_us());
  p.last_reply = clock_->Now();
  NoteReplyTiming(shard, p, m);
  if (p.min_clock < 0 || r.min_clock() < p.min_clock) p.min_clock = r.min_clock();
  p.last_progress = clock_->Now();
}

// The reply's time on the path is the time since the request, less the
// server's hold and the path's least round trip; bytes so far over it are a
// throughput sample when the transfer, not the latency, made most of it.
void PsClient::NoteReplyTiming(int shard, PendingPull& p, const transport::Message& m) {
  Shard& sh = shards_[shard];
  if (p.reply_bytes.size() != shards_.size()) p.reply_bytes.assign(shards_.size(), 0);
  for (const auto& f : m.frames) p.reply_bytes[shard] += f.size();
  double path_s = Seconds(p.last_reply - p.requested) - static_cast<double>(m.header.pull_reply().hold_us()) * 1e-6;
  if (path_s > 0 && (sh.min_rtt_s < 0 || path_s < sh.min_rtt_s)) sh.min_rtt_s = path_s;
  double transfer_s = path_s - sh.min_rtt_s;
  if (transfer_s > 0.002 && transfer_s > 0.2 * path_s && p.reply_bytes[shard] >= (64u << 10)) {
    double mbit = static_cast<double>(p.reply_bytes[shard]) * 8 / transfer_s / 1e6;
    sh.mbit_ema = sh.mbit_samples == 0 ? mbit : 0.8 * sh.mbit_ema + 0.2 * mbit;
    ++sh.mbit_samples;
  }
}

void PsClient::OnPushAck(int shard, const wire::Header& h) {
  const transport::OutboxEntry* sent = pushes_.Find(h.request_id());
  if (!sent) return;  // ack of a resend we already counted
  push_latency_.Observe(Seconds(clock_->Now() - sent->first_sent));
  const auto& ack = h.push_ack();
  if (ack.dropped_chunks()) {
    chunks_dropped_ += ack.dropped_chunks();
    GD_LOG(WARNING) << "server " << shards_[shard].id << " dropped " << ack.dropped_chunks()
                    << " chunk(s) of our push at clock " << ack.clock() << " (its round had closed)";
  }
  if (options_.ledger) {
    options_.ledger->AddAcknowledged(ack.applied_chunks() + ack.duplicate_chunks());
    options_.ledger->AddDropped(ack.dropped_chunks());
  }
  pushes_.Ack(h.request_id());
}

void PsClient::OnErrorReply(int shard, const wire::Header& h) {
  Status err(transport::FromWire(h.error_reply().code()),
             "server " + std::to_string(shards_[shard].id) + ": " + h.error_reply().message());
  if (transport::OutboxEntry* push = pushes_.Find(h.request_id())) {
    OnPushRefused(h, *push, err);
    return;
  }
  if (inits_.Ack(h.request_id())) {
    init_errors_.push_back(err);
    return;
  }
  if (h.error_reply().reason() == wire::REFUSAL_MOVED) {
    ++moved_refusals_;  // asked again of the new owner after SwitchMap (or the retry)
    return;
  }
  for (auto& [clock, p] : pulls_)
    for (uint64_t id : p.request_ids)
      if (id == h.request_id()) p.error = err;
}

// docs/wire.md "Refused pushes": a chunk that moved (a migration) or a
// backup not yet promoted is asked again; any other refusal is final. The
// shard applied nothing of the push and will never complete its clock for
// us, so waiting would stall every worker of a synchronous job: the push
// fails this client (push_error_), and every later wait returns that error
// at once. Values the shards refuse (non-finite, beyond kMaxValueMagnitude)
// mean the model diverged, which no worker can repair: Detail::kJobFatal.
void PsClient::OnPushRefused(const wire::Header& h, transport::OutboxEntry& push, const Status& err) {
  const wire::Refusal why = h.error_reply().reason();
  const int64_t clock = push.header.push_request().clock();
  if (why == wire::REFUSAL_MOVED || why == wire::REFUSAL_NOT_PRIMARY) {
    // Nothing was applied; the push stays pending and goes to the new
    // owner once we hold the new map (SwitchMap), or here again after the
    // retry interval.
    push.sent = clock_->Now();
    if (why == wire::REFUSAL_MOVED) ++moved_refusals_;
    return;
  }
  ++pushes_refused_;
  if (options_.ledger) options_.ledger->AddRefused(static_cast<uint64_t>(push.header.push_request().chunks_size()));
  Status failed =
      err.Annotate("push at clock " + std::to_string(clock) + " refused (" + transport::RefusalName(why) + ")");
  if (why == wire::REFUSAL_NON_FINITE || why == wire::REFUSAL_VALUE_TOO_LARGE)
    failed = Status(failed.code(), failed.message() + ": the model diverged").WithDetail(Detail::kJobFatal);
  GD_LOG(ERROR) << failed;
  if (push_error_.ok()) push_error_ = failed;
  pushes_.Ack(h.request_id());
}

void PsClient::AddChunks(const std::vector<uint32_t>& batch, const float* base,
                         const std::shared_ptr<const void>& owner,
                         google::protobuf::RepeatedPtrField<wire::ChunkData>* descriptors,
                         std::vector<transport::Payload>* payloads) const {
  for (uint32_t c : batch) {
    auto* d = descriptors->Add();
    d->set_chunk_id(c);
    d->set_codec(wire::FP32);
    d->set_num_elems(map_.layout.Size(c));
    d->set_version(versions_[c]);
    const float* values = base + map_.layout.Begin(c);
    size_t size = map_.layout.Size(c) * sizeof(float);
    payloads->push_back(owner ? transport::Payload{values, size, owner} : transport::CopyPayload(values, size));
  }
}

Status PsClient::Init(const float* params, const std::atomic<bool>* stop) {
  init_errors_.clear();
  for (size_t si = 0; si < shards_.size(); ++si) {
    Shard& s = shards_[si];
    for (const auto& batch : Batches(s.chunks)) {
      wire::Header h;
      uint64_t id = next_request_++;
      h.set_request_id(id);
      std::vector<transport::Payload> payloads;
      // Copied once, and kept for resends (a redirect, a lost answer).
      AddChunks(batch, params, nullptr, h.mutable_init_request()->mutable_chunks(), &payloads);
      for (auto& p : payloads) p = transport::CopyPayload(p.data, p.size);
      GD_RETURN_IF_ERROR(s.socket->Send(h, payloads));
      inits_.Add(id, static_cast<int>(si), std::move(h), std::move(payloads), clock_->Now());
    }
  }
  WaitReporter report(clock_, std::chrono::seconds(options_.timing.report_after_s));
  TimePoint deadline = clock_->Now() + std::chrono::seconds(options_.timing.rpc_timeout_s);
  while (!inits_.empty()) {
    if (stop->load()) return Cancelled("stopped during init");
    if (clock_->Now() > deadline) return DeadlineExceeded("no init acknowledgement from the servers");
    if (report.Due())
      GD_LOG(INFO) << "waiting " << static_cast<int>(report.ElapsedSeconds()) << " s for " << inits_.size()
                   << " init acknowledgement(s)";
    Poll(50);
    ResendStale();
  }
  if (!init_errors_.empty()) return init_errors_.front().Annotate("init");
  return Status::Ok();
}

Status PsClient::Decode(PendingPull& p, const wire::ChunkData& d, const zmq::message_t& frame) {
  const uint32_t c = d.chunk_id();
  const compression::PayloadInfo info = compression::PayloadInfo::FromWire(d);
  float* out = p.dest + map_.layout.Begin(c);
  if (d.delta()) {
    if (copy_seq_[c] < 0 || static_cast<uint64_t>(copy_seq_[c]) != d.base_seq()) {
      // The change is for a copy we do not hold (a reply was lost or a
      // resend answered twice): ask for this chunk's values again.
      ++resyncs_;
      GD_LOG(WARNING) << "chunk " << c << ": change " << d.base_seq() << " does not fit our copy " << copy_seq_[c]
                      << "; asking for full values";
      p.got[c] = false;
      ++p.remaining;
      p.resync.push_back(c);
      return Status::Ok();
    }
    // Decoded aside first: a change that would make our copy non-finite
    // (finite values can still overflow when added) is refused whole.
    scratch_.resize(d.num_elems());
    GD_RETURN_IF_ERROR(
        compression::Decode(info, frame.data(), frame.size(), d.num_elems(), scratch_.data(), &zstd_scratch_));
    for (uint64_t i = 0; i < d.num_elems(); ++i)
      if (!std::isfinite(out[i] + scratch_[i]))
        return InvalidArgument("chunk " + std::to_string(c) + ": the change from the server makes value " +
                               std::to_string(i) + " non-finite");
    for (uint64_t i = 0; i < d.num_elems(); ++i) out[i] += scratch_[i];
    copy_seq_[c] = static_cast<int64_t>(d.base_seq()) + 1;
  } else {
    GD_RETURN_IF_ERROR(compression::Decode(info, frame.data(), frame.size(), d.num_elems(), out, &zstd_scratch_));
    copy_seq_[c] = 0;
  }
  versions_[c] = d.version();
  return Status::Ok();
}

void PsClient::NoteComputeSeconds(double seconds) {
  compute_ema_ = compute_ema_ == 0 ? seconds : 0.9 * compute_ema_ + 0.1 * seconds;
}

Status PsClient::SendPullRequest(PendingPull& p, size_t si, bool final) {
  Shard& s = shards_[si];
  wire::Header h;
  uint64_t id = next_request_++;
  h.set_request_id(id);
  auto* req = h.mutable_pull_request();
  req->set_clock(p.clock);
  req->set_final(final);
  req->set_full(p.full);
  if (p.after_own_push) {
    // Reply when our own previous push is in, or when the reply must leave
    // to arrive as our compute ends (with a quarter for jitter).
    double rtt = std::max(0.0, rtt_ema_);
    double hold = p.max_hold_s >= 0 ? p.max_hold_s : std::max(0.0, 1.25 * compute_ema_ - rtt);
    req->set_wait_for_own_push(true);
    req->set_max_hold_us(static_cast<uint64_t>(hold * 1e6));
  }
  for (uint32_t c : s.chunks)
    if (!p.got[c]) req->add_chunk_ids(c);
  p.request_ids[si] = id;
  return s.socket->Send(h, {});
}

std::vector<RegionTraffic> PsClient::TrafficByRegion() const {
  std::map<std::string, RegionTraffic> by_region;
  for (const Shard& sh : shards_) {
    RegionTraffic& t = by_region[sh.region];
    t.region = sh.region;
    t.wire_sent += sh.wire->bytes_sent.load();
    t.wire_received += sh.wire->bytes_received.load();
    t.raw_sent += sh.raw_sent;
    t.raw_received += sh.raw_received;
  }
  std::vector<RegionTraffic> out;
  for (auto& [region, t] : by_region) out.push_back(std::move(t));
  return out;
}

std::vector<LinkEstimate> PsClient::LinkEstimates() const {
  std::map<std::string, LinkEstimate> by_region;
  std::map<std::string, int> with_rate;
  for (const Shard& sh : shards_) {
    if (sh.min_rtt_s < 0) continue;
    LinkEstimate& e = by_region[sh.region];
    e.server_region = sh.region;
    double rtt_ms = sh.min_rtt_s * 1e3;
    e.min_rtt_ms = e.min_rtt_ms == 0 ? rtt_ms : std::min(e.min_rtt_ms, rtt_ms);
    if (sh.mbit_samples > 0) {
      // Shards of one region share the path: their replies' rates add up
      // only when they overlap, so report the mean of the shards' rates.
      e.mbit += sh.mbit_ema;
      e.samples += sh.mbit_samples;
      ++with_rate[sh.region];
    }
  }
  std::vector<LinkEstimate> out;
  for (auto& [region, e] : by_region) {
    if (with_rate[region] > 0) e.mbit /= with_rate[region];
    out.push_back(e);
  }
  return out;
}

Status PsClient::RequestPull(int64_t clock, const PullOptions& options) {
  const bool final = options.final;
  int64_t key = final ? -1 : clock;
  PendingPull& p = pulls_[key];
  p = PendingPull{};
  p.clock = key;
  p.after_own_push = options.after_own_push && !final;
  p.full = options.full || final;
  p.max_hold_s = options.max_hold_s;
  p.requested = clock_->Now();
  p.last_progress = p.requested;
  p.got.assign(map_.layout.num_chunks(), false);
  p.remaining = map_.layout.num_chunks();
  if (options.only) {
    // Chunks outside the range count as arrived: nobody is asked for them.
    for (uint32_t c = 0; c < map_.layout.num_chunks(); ++c) p.got[c] = !options.only->Contains(c);
    p.remaining = options.only->end - options.only->begin;
  }
  p.request_ids.assign(shards_.size(), 0);
  for (size_t si = 0; si < shards_.size(); ++si) {
    const auto& chunks = shards_[si].chunks;
    if (std::all_of(chunks.begin(), chunks.end(), [&](uint32_t c) { return p.got[c]; })) continue;
    GD_RETURN_IF_ERROR(SendPullRequest(p, si, final));
  }
  return Status::Ok();
}

std::string PsClient::DescribeShardsMissing(const PendingPull& p) const {
  std::string out;
  for (const auto& s : shards_) {
    size_t missing = 0;
    for (uint32_t c : s.chunks) missing += !p.got[c];
    if (!missing) continue;
    out += (out.empty() ? "" : ", ") + std::string("server ") + std::to_string(s.id) + " (" + s.endpoint + ", " +
           std::to_string(missing) + "/" + std::to_string(s.chunks.size()) + " chunks missing)";
  }
  return out;
}

void PsClient::ResendStale() {
  TimePoint now = clock_->Now();
  // Pulls stay out of the Outbox: a pull is one request per shard whose
  // chunk list shrinks as replies arrive, retried when the pull as a whole
  // makes no progress, not message by message.
  const Duration retry = pushes_.policy().retry_after;
  for (auto& [clock, p] : pulls_) {
    if (p.remaining == 0 || now - p.last_progress < retry) continue;
    (void)RerequestMissing(p, clock < 0);
    p.last_progress = now;
  }
  for (auto* pending : {&pushes_, &inits_})
    for (auto& [id, push] : pending->Due(now)) {
      const Shard& s = shards_[push->dest];
      GD_LOG(WARNING) << "server " << s.id << " (" << s.endpoint << ") has not acknowledged our "
                      << (pending == &inits_ ? std::string("init")
                                             : "push at clock " + std::to_string(push->header.push_request().clock()))
                      << " for " << static_cast<int>(Seconds(now - push->first_sent)) << " s; resending";
      (void)s.socket->Send(push->header, push->payloads);
    }
}

bool PsClient::PullArrived(int64_t clock) {
  Poll(0);
  auto it = pulls_.find(clock);
  return it != pulls_.end() && it->second.remaining == 0 && it->second.error.ok() && it->second.resync.empty();
}

StatusOr<PullTiming> PsClient::WaitPull(int64_t clock, bool final, float* params, const std::atomic<bool>* stop,
                                        const std::function<std::string()>& describe,
                                        std::vector<PulledChunk>* borrowed) {
  if (!params && !borrowed) return InvalidArgument("WaitPull needs a destination or a borrowed list");
  int64_t key = final ? -1 : clock;
  auto it = pulls_.find(key);
  if (it == pulls_.end()) return FailedPrecondition("no pull requested for clock " + std::to_string(clock));
  TimePoint entered = clock_->Now();
  {
    // From here on chunks are copied in as they arrive, overlapping the
    // copy with the rest of the transfer.
    PendingPull& p = it->second;
    p.dest = params;
    if (params) {
      for (auto& [d, frame] : p.data) GD_RETURN_IF_ERROR(Decode(p, d, frame));
      p.data.clear();
      p.borrow = false;
    } else {
      // What arrives from here on is checked on arrival, so that the read
      // of the values overlaps the rest of the transfer.
      for (const auto& [d, frame] : p.data) GD_RETURN_IF_ERROR(CheckBorrowable(d, frame));
      p.borrow = true;
    }
  }
  GD_RETURN_IF_ERROR(AwaitPull(it, clock, final, stop, describe));
  PendingPull p = std::move(it->second);
  pulls_.erase(it);
  if (!p.error.ok()) return p.error;
  if (borrowed) GD_RETURN_IF_ERROR(Borrow(p, borrowed));
  TimePoint done = clock_->Now();
  pull_latency_.Observe(Seconds(p.last_reply - p.requested));
  // Round trip of this pull without the time servers held it.
  double rtt = Seconds(p.last_reply - p.requested) - static_cast<double>(p.max_hold_us) * 1e-6;
  if (rtt >= 0) rtt_ema_ = rtt_ema_ < 0 ? rtt : 0.8 * rtt_ema_ + 0.2 * rtt;
  PullTiming t;
  t.wait_seconds = Seconds(done - entered);
  // The servers held the request for max_held_us after it arrived (about
  // when it was sent); the part of that hold after we started waiting is
  // time lost to the staleness bound, the rest of the wait is the network.
  TimePoint held_until = p.requested + std::chrono::microseconds(p.max_held_us);
  t.bound_seconds = std::clamp(Seconds(held_until - entered), 0.0, t.wait_seconds);
  t.min_clock = p.min_clock;
  return t;
}

Status PsClient::AwaitPull(std::map<int64_t, PendingPull>::iterator it, int64_t clock, bool final,
                           const std::atomic<bool>* stop, const std::function<std::string()>& describe) {
  TimePoint deadline = clock_->Now() + std::chrono::seconds(options_.timing.rpc_timeout_s);
  WaitReporter report(clock_, std::chrono::seconds(options_.timing.report_after_s));
  while (it->second.remaining > 0 && it->second.error.ok()) {
    if (!push_error_.ok()) return push_error_;
    if (stop->load()) return Cancelled("stopped while waiting for a pull");
    if (clock_->Now() > deadline)
      return DeadlineExceeded("pull at clock " + std::to_string(clock) + " unanswered after " +
                              std::to_string(options_.timing.rpc_timeout_s) + " s by " +
                              DescribeShardsMissing(it->second));
    if (report.Due()) {
      std::string why = describe ? describe() : "";
      GD_LOG(INFO) << (options_.role == wire::WORKER ? "worker " : "evaluator ") << options_.id << " waiting "
                   << static_cast<int>(report.ElapsedSeconds()) << " s for pull at clock " << clock << " from "
                   << DescribeShardsMissing(it->second) << (why.empty() ? "" : "; " + why);
    }
    Poll(20);
    ResendStale();
    if (!it->second.resync.empty()) {
      // Ask the owners of chunks that could not take their change for full values.
      PendingPull& q = it->second;
      q.resync.clear();
      q.full = true;
      q.after_own_push = false;
      GD_RETURN_IF_ERROR(RerequestMissing(q, final));
    }
  }
  return Status::Ok();
}

Status PsClient::CheckBorrowable(const wire::ChunkData& d, const zmq::message_t& frame) {
  // Borrowed values are read in place: only fp32 frames qualify (their size
  // was checked on arrival, CheckPulledChunk).
  if (d.codec() != wire::FP32 || d.zstd() || d.delta())
    return InvalidArgument("zero-copy pulls need plain fp32 values");
  uint64_t first = 0;
  if (size_t bad = compression::CountNonFinite(static_cast<const float*>(frame.data()), d.num_elems(), &first))
    return InvalidArgument("server sent chunk " + std::to_string(d.chunk_id()) + " with " + std::to_string(bad) +
                           " non-finite values (first at index " + std::to_string(first) + ")");
  return Status::Ok();
}

Status PsClient::Borrow(PendingPull& p, std::vector<PulledChunk>* borrowed) {
  borrowed->clear();
  // Every frame was checked (CheckBorrowable) when WaitPull began or on arrival since.
  for (auto& [d, frame] : p.data) {
    versions_[d.chunk_id()] = d.version();
    borrowed->push_back(PulledChunk{d.chunk_id(), d.version(), std::move(frame)});
  }
  return Status::Ok();
}

int64_t PsClient::OldestUnackedClock() const {
  int64_t oldest = std::numeric_limits<int64_t>::max();
  for (const auto& [id, e] : pushes_) oldest = std::min(oldest, e.header.push_request().clock());
  return oldest;
}

Status PsClient::Push(int64_t clock, const float* grad, std::shared_ptr<const void> owner, int64_t unit,
                      const std::optional<cluster::ChunkRange>& only) {
  if (!push_error_.ok()) return push_error_;
  TimePoint now = clock_->Now();
  grad = only ? compressor_->Prepare(clock, grad, &owner, only->begin, only->end)
              : compressor_->Prepare(clock, grad, &owner);
  for (size_t si = 0; si < shards_.size(); ++si) {
    Shard& s = shards_[si];
    std::vector<uint32_t> pushed, skipped;
    for (uint32_t c : s.chunks) (!only || only->Contains(c) ? pushed : skipped).push_back(c);
    if (!skipped.empty()) GD_RETURN_IF_ERROR(PushSkippedChunks(clock, si, skipped));
    for (const auto& batch : Batches(pushed)) {
      wire::Header h;
      uint64_t id = next_request_++;
      h.set_request_id(id);
      auto* req = h.mutable_push_request();
      req->set_clock(clock);
      if (unit >= 0) req->set_unit(unit);
      std::vector<transport::Payload> payloads;
      if (!compressor_->encodes(si)) {
        AddChunks(batch, grad, owner, req->mutable_chunks(), &payloads);  // fp32, zero-copy
      } else {
        GD_RETURN_IF_ERROR(EncodeChunks(si, clock, batch, req->mutable_chunks(), &payloads));
      }
      // Counted before it can leave: a kill right after the send must not
      // leave a chunk a shard took that no ledger says was pushed.
      if (options_.ledger) options_.ledger->AddPushed(static_cast<uint64_t>(req->chunks_size()));
      for (uint32_t c : batch) s.raw_sent += map_.layout.Size(c) * sizeof(float);
      GD_RETURN_IF_ERROR(s.socket->Send(h, payloads).Annotate("push to server " + std::to_string(s.id)));
      pushes_.Add(id, static_cast<int>(si), std::move(h), std::move(payloads), now);
    }
  }
  return Status::Ok();
}

Status PsClient::EncodeChunks(size_t si, int64_t clock, const std::vector<uint32_t>& batch,
                              google::protobuf::RepeatedPtrField<wire::ChunkData>* descriptors,
                              std::vector<transport::Payload>* payloads) {
  for (uint32_t c : batch) {
    auto bytes = std::make_shared<std::vector<uint8_t>>();
    compression::PayloadInfo info;
    GD_RETURN_IF_ERROR(compressor_->Encode(si, clock, c, bytes.get(), &info));
    auto* d = descriptors->Add();
    d->set_chunk_id(c);
    d->set_num_elems(map_.layout.Size(c));
    d->set_version(versions_[c]);
    info.ToWire(d);
    payloads->push_back(
        transport::Payload{bytes->data(), bytes->size(), std::shared_ptr<const void>(bytes, bytes->data())});
  }
  return Status::Ok();
}

Status PsClient::PushSkipped(int64_t clock, int64_t unit) {
  for (size_t si = 0; si < shards_.size(); ++si)
    if (!shards_[si].chunks.empty()) GD_RETURN_IF_ERROR(PushSkippedChunks(clock, si, {}, unit));
  return Status::Ok();
}

Status PsClient::PushSkippedChunks(int64_t clock, size_t si, const std::vector<uint32_t>& ids, int64_t unit) {
  wire::Header h;
  uint64_t id = next_request_++;
  h.set_request_id(id);
  auto* req = h.mutable_push_request();
  req->set_clock(clock);
  req->set_skipped(true);
  if (unit >= 0) req->set_unit(unit);
  for (uint32_t c : ids) {
    auto* d = req->add_chunks();
    d->set_chunk_id(c);
    d->set_num_elems(map_.layout.Size(c));
  }
  GD_RETURN_IF_ERROR(
      shards_[si].socket->Send(h, {}).Annotate("skipped push to server " + std::to_string(shards_[si].id)));
  pushes_.Add(id, static_cast<int>(si), std::move(h), {}, clock_->Now());
  return Status::Ok();
}

StatusOr<double> PsClient::WaitAcks(size_t max_unacked_clocks, const std::atomic<bool>* stop, Duration max_wait) {
  auto unacked_clocks = [&] {
    std::vector<int64_t> clocks;
    for (const auto& [id, e] : pushes_) clocks.push_back(e.header.push_request().clock());
    std::sort(clocks.begin(), clocks.end());
    return static_cast<size_t>(std::unique(clocks.begin(), clocks.end()) - clocks.begin());
  };
  Poll(0);
  if (!push_error_.ok()) return push_error_;
  if (unacked_clocks() <= max_unacked_clocks) return 0.0;
  TimePoint entered = clock_->Now();
  TimePoint deadline = entered + std::chrono::seconds(options_.timing.rpc_timeout_s);
  if (max_wait > Duration::zero()) deadline = std::min(deadline, entered + max_wait);
  WaitReporter report(clock_, std::chrono::seconds(options_.timing.report_after_s));
  while (unacked_clocks() > max_unacked_clocks) {
    if (!push_error_.ok()) return push_error_;
    if (stop->load()) return Cancelled("stopped while waiting for push acknowledgements");
    if (clock_->Now() > deadline)
      return DeadlineExceeded(std::to_string(pushes_.size()) + " push message(s) unacknowledged after " +
                              std::to_string(Seconds(clock_->Now() - entered)) + " s");
    if (report.Due()) {
      std::map<int, int> per_shard;
      for (const auto& [id, e] : pushes_) per_shard[shards_[e.dest].id]++;
      std::string who;
      for (const auto& [s, n] : per_shard) who += " server " + std::to_string(s) + " (" + std::to_string(n) + ")";
      GD_LOG(INFO) << "waiting " << static_cast<int>(report.ElapsedSeconds()) << " s for push acknowledgements from"
                   << who;
    }
    Poll(20);
    ResendStale();
  }
  return Seconds(clock_->Now() - entered);
}

}  // namespace geodesic::worker
