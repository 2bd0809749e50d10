#include "worker/ps_client.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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
}

Status PsClient::Connect() {
  for (auto& s : shards_) {
    auto it = options_.push_codecs.find(s.region);
    if (it != options_.push_codecs.end()) {
      GD_ASSIGN_OR_RETURN(s.push, compression::ParseCodecSpec(it->second));
      if (s.push.lossy() || s.push.zstd_level > 0)
        s.encoder = std::make_unique<compression::Encoder>(
            s.push, options_.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(options_.id) * 31 + s.id);
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
                              .curve = transport::CurveSocket{.keys = options_.curve_keys, .server_key = s.curve_key}};
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
        for (auto& [id, push] : *pending) {
          if (push.shard != static_cast<int>(si)) continue;
          (void)s.socket->Send(push.header, push.payloads);
          push.sent = now;
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
  std::map<int, size_t> index;  // server id -> position in shards_
  for (size_t si = 0; si < shards_.size(); ++si) {
    shards_[si].chunks = map_.ChunksOf(shards_[si].id);
    index[shards_[si].id] = si;
  }
  for (uint32_t c : moved) copy_seq_[c] = -1;  // the new owner keeps no copy of ours
  chunks_rerouted_ += moved.size();
  GD_LOG(INFO) << "shard map version " << map_.version << ": " << moved.size() << " chunk(s) changed owner";
  // Pushes not acknowledged yet (none at a barrier, unless one was refused
  // as moved): each chunk goes to its owner now, in messages split by owner.
  // The descriptors and payload frames are reused as they are; the ledger
  // already counted them when they were first sent.
  TimePoint now = clock_->Now();
  std::map<uint64_t, PendingPush> kept;
  for (auto& [id, push] : pushes_) {
    const auto& req = push.header.push_request();
    bool same = true;
    for (const auto& d : req.chunks()) same &= map_.owner[d.chunk_id()] == shards_[push.shard].id;
    if (same) {
      kept.emplace(id, std::move(push));
      continue;
    }
    std::map<size_t, PendingPush> parts;
    for (int i = 0; i < req.chunks_size(); ++i) {
      const size_t si = index[map_.owner[req.chunks(i).chunk_id()]];
      PendingPush& part = parts[si];
      if (!part.header.has_push_request()) {
        part.shard = static_cast<int>(si);
        part.clock = push.clock;
        part.header = push.header;
        part.header.mutable_push_request()->clear_chunks();
      }
      *part.header.mutable_push_request()->add_chunks() = req.chunks(i);
      part.payloads.push_back(push.payloads[i]);
    }
    for (auto& [si, part] : parts) {
      const uint64_t nid = next_request_++;
      part.header.set_request_id(nid);
      part.sent = now;
      (void)shards_[si].socket->Send(part.header, part.payloads);
      kept.emplace(nid, std::move(part));
    }
  }
  pushes_ = std::move(kept);
  // Pulls still waiting for moved chunks ask their new owners.
  for (auto& [clock, p] : pulls_) {
    if (p.remaining == 0) continue;
    for (size_t si = 0; si < shards_.size(); ++si) {
      bool missing = false;
      for (uint32_t c : shards_[si].chunks) missing |= !p.got[c] && std::binary_search(moved.begin(), moved.end(), c);
      if (missing) (void)SendPullRequest(p, si, clock < 0);
    }
  }
  return Status::Ok();
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
    case wire::Header::kPullReply: {
      const auto& r = h.pull_reply();
      auto it = pulls_.find(r.clock());
      if (it == pulls_.end()) return;  // answer to a pull we already completed (a resend)
      PendingPull& p = it->second;
      if (static_cast<size_t>(r.chunks_size()) != m.frames.size()) {
        p.error = InvalidArgument("server " + std::to_string(shards_[shard].id) + " sent a malformed pull reply");
        return;
      }
      for (int i = 0; i < r.chunks_size(); ++i) {
        const auto& d = r.chunks(i);
        if (d.chunk_id() >= p.got.size() || map_.owner[d.chunk_id()] != shards_[shard].id) {
          p.error = InvalidArgument("server " + std::to_string(shards_[shard].id) + " sent chunk " +
                                    std::to_string(d.chunk_id()) + " it does not own");
          return;
        }
        if (d.num_elems() != map_.layout.Size(d.chunk_id())) {
          p.error = InvalidArgument("server sent chunk " + std::to_string(d.chunk_id()) + " with " +
                                    std::to_string(d.num_elems()) + " values, expected " +
                                    std::to_string(map_.layout.Size(d.chunk_id())));
          return;
        }
        Status s =
            compression::CheckPayloadSize(compression::PayloadInfo::FromWire(d), d.num_elems(), m.frames[i].size());
        if (!s.ok()) {
          p.error = s.Annotate("pull reply from server " + std::to_string(shards_[shard].id));
          return;
        }
        if (p.got[d.chunk_id()]) continue;  // duplicate answer to a resent request
        p.got[d.chunk_id()] = true;
        --p.remaining;
        if (p.dest) {
          Status s = Decode(p, d, m.frames[i]);
          if (!s.ok()) p.error = s;
        } else {
          p.data.emplace_back(d, std::move(m.frames[i]));
        }
      }
      p.max_held_us = std::max<uint64_t>(p.max_held_us, r.held_us());
      p.max_hold_us = std::max<uint64_t>(p.max_hold_us, r.hold_us());
      p.last_reply = clock_->Now();
      {
        // Passive link estimate: the reply's time on the path is the time
        // since the request, less the server's hold and the path's least
        // round trip; bytes so far over it are a throughput sample when the
        // transfer, not the latency, made most of it.
        Shard& sh = shards_[shard];
        if (p.reply_bytes.size() != shards_.size()) p.reply_bytes.assign(shards_.size(), 0);
        for (const auto& f : m.frames) p.reply_bytes[shard] += f.size();
        double path_s = Seconds(p.last_reply - p.requested) - static_cast<double>(r.hold_us()) * 1e-6;
        if (path_s > 0 && (sh.min_rtt_s < 0 || path_s < sh.min_rtt_s)) sh.min_rtt_s = path_s;
        double transfer_s = path_s - sh.min_rtt_s;
        if (transfer_s > 0.002 && transfer_s > 0.2 * path_s && p.reply_bytes[shard] >= (64u << 10)) {
          double mbit = static_cast<double>(p.reply_bytes[shard]) * 8 / transfer_s / 1e6;
          sh.mbit_ema = sh.mbit_samples == 0 ? mbit : 0.8 * sh.mbit_ema + 0.2 * mbit;
          ++sh.mbit_samples;
        }
      }
      if (p.min_clock < 0 || r.min_clock() < p.min_clock) p.min_clock = r.min_clock();
      p.last_progress = clock_->Now();
      return;
    }
    case wire::Header::kPushAck: {
      auto it = pushes_.find(h.request_id());
      if (it == pushes_.end()) return;  // ack of a resend we already counted
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
      pushes_.erase(it);
      return;
    }
    case wire::Header::kInitAck: {
      inits_.erase(h.request_id());
      return;
    }
    case wire::Header::kErrorReply: {
      Status err(transport::FromWire(h.error_reply().code()),
                 "server " + std::to_string(shards_[shard].id) + ": " + h.error_reply().message());
      if (auto it = pushes_.find(h.request_id()); it != pushes_.end()) {
        if (h.error_reply().reason() == wire::REFUSAL_MOVED) {
          // A chunk of it moved to another shard (a migration): nothing was
          // applied; the push stays pending and goes to the new owner once
          // we hold the new map (SwitchMap), or here again after the retry.
          it->second.sent = clock_->Now();
          ++moved_refusals_;
          return;
        }
        // The server refused the push whole; nothing of it was applied.
        ++pushes_refused_;
        if (options_.ledger)
          options_.ledger->AddRefused(static_cast<uint64_t>(it->second.header.push_request().chunks_size()));
        GD_LOG(ERROR) << "push at clock " << it->second.clock << " refused: " << err;
        pushes_.erase(it);
        return;
      }
      if (inits_.erase(h.request_id())) {
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
      return;
    }
    default:
      GD_LOG(WARNING) << "unexpected " << transport::BodyName(h) << " from server " << shards_[shard].id;
  }
}

std::vector<std::vector<uint32_t>> PsClient::Batches(const std::vector<uint32_t>& chunks) const {
  std::vector<std::vector<uint32_t>> out;
  int64_t bytes = 0;
  for (uint32_t c : chunks) {
    int64_t size = static_cast<int64_t>(map_.layout.Size(c) * sizeof(float));
    if (out.empty() || bytes + size > options_.wire.message_bytes) {
      out.emplace_back();
      bytes = 0;
    }
    out.back().push_back(c);
    bytes += size;
  }
  return out;
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
      inits_[id] = PendingPush{static_cast<int>(si), -1, std::move(h), std::move(payloads), clock_->Now()};
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
  p.request_ids.assign(shards_.size(), 0);
  for (size_t si = 0; si < shards_.size(); ++si) {
    if (shards_[si].chunks.empty()) continue;
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
  const Duration retry = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(options_.retry_after_s));
  for (auto& [clock, p] : pulls_) {
    if (p.remaining == 0 || now - p.last_progress < retry) continue;
    for (size_t si = 0; si < shards_.size(); ++si) {
      bool missing = false;
      for (uint32_t c : shards_[si].chunks) missing |= !p.got[c];
      if (missing) (void)SendPullRequest(p, si, clock < 0);
    }
    p.last_progress = now;
  }
  for (auto* pending : {&pushes_, &inits_})
    for (auto& [id, push] : *pending) {
      if (now - push.sent < retry) continue;
      GD_LOG(WARNING) << "server " << shards_[push.shard].id << " (" << shards_[push.shard].endpoint
                      << ") has not acknowledged our "
                      << (pending == &inits_ ? std::string("init") : "push at clock " + std::to_string(push.clock))
                      << " for " << static_cast<int>(Seconds(now - push.sent)) << " s; resending";
      (void)shards_[push.shard].socket->Send(push.header, push.payloads);
      push.sent = now;
    }
}

StatusOr<PullTiming> PsClient::WaitPull(int64_t clock, bool final, float* params, const std::atomic<bool>* stop,
                                        const std::function<std::string()>& describe,
                                        std::vector<PulledChunk>* borrowed) {
  if (!params && !borrowed) return InvalidArgument("WaitPull needs a destination or a borrowed list");
  int64_t key = final ? -1 : clock;
  auto it = pulls_.find(key);
  if (it == pulls_.end()) return FailedPrecondition("no pull requested for clock " + std::to_string(clock));
  TimePoint entered = clock_->Now();
  TimePoint deadline = entered + std::chrono::seconds(options_.timing.rpc_timeout_s);
  WaitReporter report(clock_, std::chrono::seconds(options_.timing.report_after_s));
  {
    // From here on chunks are copied in as they arrive, overlapping the
    // copy with the rest of the transfer.
    PendingPull& p = it->second;
    p.dest = params;
    if (params) {
      for (auto& [d, frame] : p.data) GD_RETURN_IF_ERROR(Decode(p, d, frame));
      p.data.clear();
    }
  }
  while (it->second.remaining > 0 && it->second.error.ok()) {
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
      for (size_t si = 0; si < shards_.size(); ++si) {
        bool missing = false;
        for (uint32_t c : shards_[si].chunks) missing |= !q.got[c];
        if (missing) GD_RETURN_IF_ERROR(SendPullRequest(q, si, final));
      }
    }
  }
  PendingPull p = std::move(it->second);
  pulls_.erase(it);
  if (!p.error.ok()) return p.error;
  if (borrowed) {
    borrowed->clear();
    for (auto& [d, frame] : p.data) {
      // Borrowed values are read in place: only fp32 frames qualify.
      GD_RETURN_IF_ERROR(compression::CheckPayloadSize(d.codec(), d.num_elems(), frame.size()));
      if (d.codec() != wire::FP32 || d.zstd() || d.delta())
        return InvalidArgument("zero-copy pulls need plain fp32 values");
      uint64_t first = 0;
      if (size_t bad = compression::CountNonFinite(static_cast<const float*>(frame.data()), d.num_elems(), &first))
        return InvalidArgument("server sent chunk " + std::to_string(d.chunk_id()) + " with " + std::to_string(bad) +
                               " non-finite values (first at index " + std::to_string(first) + ")");
      versions_[d.chunk_id()] = d.version();
      borrowed->push_back(PulledChunk{d.chunk_id(), d.version(), std::move(frame)});
    }
  }
  TimePoint done = clock_->Now();
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

Status PsClient::Push(int64_t clock, const float* grad, std::shared_ptr<const void> owner) {
  TimePoint now = clock_->Now();
  if (options_.local_momentum > 0) {
    // Momentum correction: push velocities, held in a fresh buffer that the
    // sends own. The masking after a sparse encode is done in EncodeChunks.
    const float mu = static_cast<float>(options_.local_momentum);
    const uint64_t total = map_.layout.num_params();
    velocity_out_ = std::make_shared<std::vector<float>>(total);
    for (uint32_t c = 0; c < map_.layout.num_chunks(); ++c) {
      const uint64_t n = map_.layout.Size(c), b = map_.layout.Begin(c);
      std::vector<float>& v = velocity_[c];
      if (v.size() != n) v.assign(n, 0.0f);
      float* out = velocity_out_->data() + b;
      for (uint64_t i = 0; i < n; ++i) out[i] = v[i] = mu * v[i] + grad[b + i];
    }
    grad = velocity_out_->data();
    owner = std::shared_ptr<const void>(velocity_out_, velocity_out_->data());
  }
  bool lossy = false;
  for (const Shard& s : shards_) lossy |= static_cast<bool>(s.encoder);
  if (lossy) PrepareLossyPush(clock, grad);
  for (size_t si = 0; si < shards_.size(); ++si) {
    Shard& s = shards_[si];
    for (const auto& batch : Batches(s.chunks)) {
      wire::Header h;
      uint64_t id = next_request_++;
      h.set_request_id(id);
      auto* req = h.mutable_push_request();
      req->set_clock(clock);
      std::vector<transport::Payload> payloads;
      if (!s.encoder) {
        AddChunks(batch, grad, owner, req->mutable_chunks(), &payloads);  // fp32, zero-copy
      } else {
        GD_RETURN_IF_ERROR(EncodeChunks(s, clock, batch, req->mutable_chunks(), &payloads));
      }
      // Counted before it can leave: a kill right after the send must not
      // leave a chunk a shard took that no ledger says was pushed.
      if (options_.ledger) options_.ledger->AddPushed(static_cast<uint64_t>(req->chunks_size()));
      GD_RETURN_IF_ERROR(s.socket->Send(h, payloads).Annotate("push to server " + std::to_string(s.id)));
      pushes_[id] = PendingPush{static_cast<int>(si), clock, std::move(h), std::move(payloads), now};
    }
  }
  return Status::Ok();
}

double PsClient::SparseFraction(const compression::CodecSpec& spec, int64_t clock) const {
  // Sparsity warm-up: from 25% of the values down to the codec's fraction.
  double f = spec.fraction;
  const int64_t w = options_.sparsity_warmup_steps;
  if (w > 0 && clock < w && f < 0.25)
    f = 0.25 * std::pow(f / 0.25, static_cast<double>(clock) / static_cast<double>(w));
  return std::max(f, spec.fraction);
}

void PsClient::PrepareLossyPush(int64_t clock, const float* grad) {
  const uint64_t total = map_.layout.num_params();
  corrected_all_.resize(total);
  sent_all_.resize(total);
  // Error feedback first: what each chunk would send if nothing were dropped.
  for (const Shard& s : shards_) {
    if (!s.encoder) continue;
    const bool feedback = options_.error_feedback && s.push.lossy();
    for (uint32_t c : s.chunks) {
      const uint64_t n = map_.layout.Size(c), b = map_.layout.Begin(c);
      if (feedback)
        feedback_.Correct(c, grad + b, n, corrected_all_.data() + b);
      else
        std::memcpy(corrected_all_.data() + b, grad + b, n * sizeof(float));
    }
  }
  // Top-k picks its values across the whole model, not chunk by chunk: one
  // threshold for every top-k chunk, so a small layer with large gradients
  // (the classifier) is not starved by sharing a chunk's quota. Each chunk
  // then sends what is above the threshold (at least one value).
  topk_fraction_.clear();
  magnitudes_.clear();
  uint64_t budget = 0;
  for (const Shard& s : shards_) {
    if (!s.encoder || s.push.codec != wire::TOPK) continue;
    const double f = SparseFraction(s.push, clock);
    for (uint32_t c : s.chunks) {
      const uint64_t n = map_.layout.Size(c), b = map_.layout.Begin(c);
      budget += static_cast<uint64_t>(std::ceil(f * static_cast<double>(n)));
      for (uint64_t i = 0; i < n; ++i) magnitudes_.push_back(std::fabs(corrected_all_[b + i]));
    }
  }
  if (magnitudes_.empty()) return;
  budget = std::clamp<uint64_t>(budget, 1, magnitudes_.size());
  // An exact order statistic up to a few million values, a sample's beyond.
  std::vector<float>& pool = magnitudes_;
  if (pool.size() > (uint64_t{1} << 22)) {
    const uint64_t stride = pool.size() >> 20;
    size_t w = 0;
    for (size_t i = 0; i < pool.size(); i += stride) pool[w++] = pool[i];
    budget = std::max<uint64_t>(1, budget / stride);
    pool.resize(w);
  }
  auto nth = pool.begin() + static_cast<std::ptrdiff_t>(pool.size() - budget);
  std::nth_element(pool.begin(), nth, pool.end());
  const float threshold = *nth;
  for (const Shard& s : shards_) {
    if (!s.encoder || s.push.codec != wire::TOPK) continue;
    for (uint32_t c : s.chunks) {
      const uint64_t n = map_.layout.Size(c), b = map_.layout.Begin(c);
      uint64_t above = 0;
      for (uint64_t i = 0; i < n; ++i) above += std::fabs(corrected_all_[b + i]) >= threshold;
      topk_fraction_[c] = static_cast<double>(std::max<uint64_t>(above, 1)) / static_cast<double>(n);
    }
  }
}

Status PsClient::EncodeChunks(Shard& s, int64_t clock, const std::vector<uint32_t>& batch,
                              google::protobuf::RepeatedPtrField<wire::ChunkData>* descriptors,
                              std::vector<transport::Payload>* payloads) {
  const bool feedback = options_.error_feedback && s.push.lossy();
  if (s.push.codec == wire::RANDK) {
    double f = SparseFraction(s.push, clock);
    if (f != s.encoder_fraction) {
      compression::CodecSpec spec = s.push;
      spec.fraction = f;
      s.encoder = std::make_unique<compression::Encoder>(spec, options_.seed * 0x9E3779B97F4A7C15ull +
                                                                   static_cast<uint64_t>(options_.id) * 31 + s.id +
                                                                   static_cast<uint64_t>(clock));
      s.encoder_fraction = f;
    }
  }
  for (uint32_t c : batch) {
    const uint64_t n = map_.layout.Size(c), b = map_.layout.Begin(c);
    const float* values = corrected_all_.data() + b;
    float* sent = sent_all_.data() + b;
    compression::Encoder* encoder = s.encoder.get();
    std::unique_ptr<compression::Encoder> own;
    if (s.push.codec == wire::TOPK) {
      compression::CodecSpec spec = s.push;
      spec.fraction = std::min(1.0, topk_fraction_[c]);
      own = std::make_unique<compression::Encoder>(spec, options_.seed + c);
      encoder = own.get();
    }
    auto bytes = std::make_shared<std::vector<uint8_t>>();
    compression::PayloadInfo info;
    GD_RETURN_IF_ERROR(encoder->Encode(values, n, bytes.get(), &info, feedback ? sent : nullptr)
                           .Annotate("chunk " + std::to_string(c)));
    if (feedback) feedback_.Remember(c, values, sent, n);
    if (options_.local_momentum > 0 && s.push.sparse() && feedback) {
      // Momentum factor masking (DGC): where a value went out, its momentum
      // starts over, so a sent coordinate is not pushed again by momentum alone.
      std::vector<float>& v = velocity_[c];
      for (uint64_t i = 0; i < n; ++i)
        if (sent[i] != 0.0f) v[i] = 0.0f;
    }
    auto* d = descriptors->Add();
    d->set_chunk_id(c);
    d->set_num_elems(n);
    d->set_version(versions_[c]);
    info.ToWire(d);
    payloads->push_back(
        transport::Payload{bytes->data(), bytes->size(), std::shared_ptr<const void>(bytes, bytes->data())});
  }
  return Status::Ok();
}

Status PsClient::PushSkipped(int64_t clock) {
  TimePoint now = clock_->Now();
  for (size_t si = 0; si < shards_.size(); ++si) {
    if (shards_[si].chunks.empty()) continue;
    wire::Header h;
    uint64_t id = next_request_++;
    h.set_request_id(id);
    h.mutable_push_request()->set_clock(clock);
    h.mutable_push_request()->set_skipped(true);
    GD_RETURN_IF_ERROR(shards_[si].socket->Send(h, {}));
    pushes_[id] = PendingPush{static_cast<int>(si), clock, std::move(h), {}, now};
  }
  return Status::Ok();
}

StatusOr<double> PsClient::WaitAcks(size_t max_unacked_clocks, const std::atomic<bool>* stop) {
  auto unacked_clocks = [&] {
    std::vector<int64_t> clocks;
    for (const auto& [id, p] : pushes_) clocks.push_back(p.clock);
    std::sort(clocks.begin(), clocks.end());
    return static_cast<size_t>(std::unique(clocks.begin(), clocks.end()) - clocks.begin());
  };
  Poll(0);
  if (unacked_clocks() <= max_unacked_clocks) return 0.0;
  TimePoint entered = clock_->Now();
  TimePoint deadline = entered + std::chrono::seconds(options_.timing.rpc_timeout_s);
  WaitReporter report(clock_, std::chrono::seconds(options_.timing.report_after_s));
  while (unacked_clocks() > max_unacked_clocks) {
    if (stop->load()) return Cancelled("stopped while waiting for push acknowledgements");
    if (clock_->Now() > deadline)
      return DeadlineExceeded(std::to_string(pushes_.size()) + " push message(s) unacknowledged after " +
                              std::to_string(options_.timing.rpc_timeout_s) + " s");
    if (report.Due()) {
      std::map<int, int> per_shard;
      for (const auto& [id, p] : pushes_) per_shard[shards_[p.shard].id]++;
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
