#include "worker/ps_client.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "common/digest.h"
#include "common/log.h"
#include "common/wait.h"
#include "compression/codec.h"

namespace geodesic::worker {
namespace {

Duration RetryAfter(double seconds) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds));
}

compression::PushCompressorOptions CompressorOptions(const PsClientOptions& o) {
  return {.error_feedback = o.error_feedback,
          .local_momentum = o.local_momentum,
          .sparsity_warmup_steps = o.sparsity_warmup_steps,
          .seed = o.seed,
          .sender = o.id};
}

}  // namespace

PsClient::PsClient(std::unique_ptr<ShardLinks> links, PsClientOptions options, const wire::RegisterReply& assignment,
                   const Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      links_(std::move(links)),
      routes_(assignment, options_.servers_view),
      requests_(transport::RetryPolicy{.retry_after = RetryAfter(options_.retry_after_s)}),
      codec_(CompressorOptions(options_), routes_.layout()),
      monitor_(routes_.size()) {
  for (size_t si = 0; si < routes_.size(); ++si) codec_.SetChunks(si, routes_.chunks(si));
}

Status PsClient::Connect() {
  for (size_t si = 0; si < routes_.size(); ++si) {
    auto it = options_.push_codecs.find(routes_.region(si));
    if (it != options_.push_codecs.end()) {
      GD_ASSIGN_OR_RETURN(compression::CodecSpec spec, compression::ParseCodecSpec(it->second));
      codec_.SetCodec(si, routes_.address(si).id, spec);
    }
    GD_RETURN_IF_ERROR(links_->Connect(si, routes_.address(si)));
  }
  return Status::Ok();
}

void PsClient::FollowRedirects() {
  if (links_->TakeRerouted()) {
    // Our values came from the old route (a regional aggregator's exact
    // values), not from the changes the shards keep a copy for: a change
    // of theirs would apply to the wrong base, so ask for full values.
    std::vector<uint32_t> all(routes_.layout().num_chunks());
    std::iota(all.begin(), all.end(), 0u);
    codec_.ForgetCopies(all);
    for (size_t si = 0; si < routes_.size(); ++si) Resend(si);  // what the old route may have lost
  }
  for (size_t si : routes_.FollowRedirects()) {
    monitor_.Reset(si);
    Status st = links_->Connect(si, routes_.address(si));
    if (!st.ok()) {
      GD_LOG(ERROR) << "reconnecting to server " << routes_.address(si).id << ": " << st;
      continue;
    }
    ++stats_.redirects;
    Resend(si);
  }
}

// The promoted backup holds every push its primary acknowledged; the
// others it answers as duplicates or applies now.
void PsClient::Resend(size_t si) {
  for (auto& [clock, p] : requests_.pulls())
    if (p.remaining > 0 && p.Misses(routes_.chunks(si))) (void)SendPullRequest(p, si);
  const TimePoint now = clock_->Now();
  for (auto* pending : {&requests_.pushes(), &requests_.inits()})
    for (auto& [id, e] : *pending) {
      if (e.dest != static_cast<int>(si)) continue;
      (void)links_->Send(si, e.header, e.payloads);
      e.sent = now;
    }
}

Status PsClient::SwitchMap(const wire::ShardMap& wire_map) {
  const uint64_t before = routes_.map().version;
  GD_ASSIGN_OR_RETURN(std::vector<uint32_t> moved, routes_.Switch(wire_map));
  if (routes_.map().version == before) return Status::Ok();
  for (size_t si = 0; si < routes_.size(); ++si) codec_.SetChunks(si, routes_.chunks(si));
  codec_.ForgetCopies(moved);  // the new owner keeps no copy of ours
  stats_.chunks_rerouted += moved.size();
  GD_LOG(INFO) << "shard map version " << routes_.map().version << ": " << moved.size() << " chunk(s) changed owner";
  ReroutePushes();
  // Pulls still waiting for moved chunks ask their new owners.
  for (auto& [clock, p] : requests_.pulls())
    if (p.remaining > 0) (void)RerequestMissing(p, &moved);
  return Status::Ok();
}

// Pushes not acknowledged yet (none at a barrier, unless one was refused as
// moved): each chunk goes to its owner now, in messages split by owner. The
// descriptors and payload frames are reused as they are; the ledger already
// counted them when they were first sent.
void PsClient::ReroutePushes() {
  transport::Outbox<uint64_t>& pushes = requests_.pushes();
  std::vector<uint64_t> split;
  for (auto& [id, e] : pushes) {
    bool same = true;
    for (const auto& d : e.header.push_request().chunks())
      same &= routes_.OwnerOf(d.chunk_id()) == static_cast<size_t>(e.dest);
    if (!same) split.push_back(id);
  }
  const TimePoint now = clock_->Now();
  for (uint64_t id : split) {
    transport::OutboxEntry push = std::move(*pushes.Find(id));
    pushes.Ack(id);
    const auto& req = push.header.push_request();
    std::map<size_t, transport::OutboxEntry> parts;
    for (int i = 0; i < req.chunks_size(); ++i) {
      transport::OutboxEntry& part = parts[routes_.OwnerOf(req.chunks(i).chunk_id())];
      if (!part.header.has_push_request()) {
        part.header = push.header;
        part.header.mutable_push_request()->clear_chunks();
      }
      *part.header.mutable_push_request()->add_chunks() = req.chunks(i);
      part.payloads.push_back(push.payloads[i]);
    }
    for (auto& [si, part] : parts) {
      const uint64_t nid = requests_.NextId();
      part.header.set_request_id(nid);
      (void)links_->Send(si, part.header, part.payloads);
      pushes.Add(nid, static_cast<int>(si), std::move(part.header), std::move(part.payloads), now);
    }
  }
}

Status PsClient::RerequestMissing(PendingPull& p, const std::vector<uint32_t>* only) {
  Status first;
  for (size_t si = 0; si < routes_.size(); ++si) {
    bool missing = false;
    for (uint32_t c : routes_.chunks(si))
      missing |= !p.got[c] && (!only || std::binary_search(only->begin(), only->end(), c));
    if (!missing) continue;
    Status s = SendPullRequest(p, si);
    if (first.ok()) first = s;
  }
  return first;
}

void PsClient::Poll(int timeout_ms) {
  FollowRedirects();
  links_->Poll(timeout_ms, [this](size_t si, transport::Message& m) { OnMessage(static_cast<int>(si), m); });
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
      OnInitAck(shard, h);
      return;
    case wire::Header::kErrorReply:
      OnErrorReply(shard, h);
      return;
    default:
      GD_LOG(WARNING) << "unexpected " << transport::BodyName(h) << " from server " << routes_.address(shard).id;
  }
}

Status PsClient::CheckPulledChunk(int shard, const transport::Message& m, int i) const {
  const auto& d = m.header.pull_reply().chunks(i);
  const cluster::ShardMap& map = routes_.map();
  const int id = routes_.address(shard).id;
  if (d.chunk_id() >= map.layout.num_chunks() || map.owner[d.chunk_id()] != id)
    return InvalidArgument("server " + std::to_string(id) + " sent chunk " + std::to_string(d.chunk_id()) +
                           " it does not own");
  if (d.num_elems() != map.layout.Size(d.chunk_id()))
    return InvalidArgument("server sent chunk " + std::to_string(d.chunk_id()) + " with " +
                           std::to_string(d.num_elems()) + " values, expected " +
                           std::to_string(map.layout.Size(d.chunk_id())));
  return compression::CheckPayloadSize(compression::PayloadInfo::FromWire(d), d.num_elems(), m.frames[i].size())
      .Annotate("pull reply from server " + std::to_string(id));
}

void PsClient::OnPullReply(int shard, transport::Message& m) {
  const auto& r = m.header.pull_reply();
  PendingPull* found = requests_.FindPull(r.clock());
  if (!found) return;  // answer to a pull we already completed (a resend)
  PendingPull& p = *found;
  if (static_cast<size_t>(r.chunks_size()) != m.frames.size()) {
    p.error = InvalidArgument("server " + std::to_string(routes_.address(shard).id) + " sent a malformed pull reply");
    return;
  }
  for (int i = 0; i < r.chunks_size(); ++i) {
    if (Status s = CheckPulledChunk(shard, m, i); !s.ok()) {
      p.error = s;
      return;
    }
    TakeChunk(shard, p, r.chunks(i), m.frames[i]);
  }
  p.max_held_us = std::max<uint64_t>(p.max_held_us, r.held_us());
  p.max_hold_us = std::max<uint64_t>(p.max_hold_us, r.hold_us());
  p.last_reply = clock_->Now();
  NoteReplyTiming(shard, p, m);
  if (p.min_clock < 0 || r.min_clock() < p.min_clock) p.min_clock = r.min_clock();
  p.last_progress = clock_->Now();
}

void PsClient::TakeChunk(int shard, PendingPull& p, const wire::ChunkData& d, zmq::message_t& frame) {
  if (p.got[d.chunk_id()]) return;  // duplicate answer to a resent request
  p.got[d.chunk_id()] = true;
  --p.remaining;
  monitor_.AddRawReceived(shard, static_cast<uint64_t>(d.num_elems()) * sizeof(float));
  if (p.dest) {
    Status s = Decode(p, d, frame);
    if (!s.ok()) p.error = s;
  } else {
    p.data.emplace_back(d, std::move(frame));
    if (p.borrow)
      if (Status s = ChunkCodec::CheckBorrowable(d, p.data.back().second); !s.ok()) p.error = s;
  }
}

Status PsClient::Decode(PendingPull& p, const wire::ChunkData& d, const zmq::message_t& frame) {
  GD_ASSIGN_OR_RETURN(bool fits, codec_.Decode(p.dest, d, frame));
  if (!fits) {
    p.got[d.chunk_id()] = false;
    ++p.remaining;
    p.resync.push_back(d.chunk_id());
  }
  return Status::Ok();
}

// The reply's time on the path is the time since the request, less the
// server's hold; LinkMonitor takes it with the bytes so far.
void PsClient::NoteReplyTiming(int shard, PendingPull& p, const transport::Message& m) {
  if (p.reply_bytes.size() != routes_.size()) p.reply_bytes.assign(routes_.size(), 0);
  for (const auto& f : m.frames) p.reply_bytes[shard] += f.size();
  double path_s = Seconds(p.last_reply - p.requested) - static_cast<double>(m.header.pull_reply().hold_us()) * 1e-6;
  monitor_.NoteReply(shard, path_s, p.reply_bytes[shard]);
}

void PsClient::OnPushAck(int shard, const wire::Header& h) {
  const transport::OutboxEntry* sent = requests_.pushes().Find(h.request_id());
  if (!sent) return;  // ack of a resend we already counted
  stats_.push_latency.Observe(Seconds(clock_->Now() - sent->first_sent));
  const auto& ack = h.push_ack();
  if (ack.dropped_chunks()) {
    stats_.chunks_dropped += ack.dropped_chunks();
    GD_LOG(WARNING) << "server " << routes_.address(shard).id << " dropped " << ack.dropped_chunks()
                    << " chunk(s) of our push at clock " << ack.clock() << " (its round had closed)";
  }
  if (options_.ledger) {
    options_.ledger->AddAcknowledged(ack.applied_chunks() + ack.duplicate_chunks());
    options_.ledger->AddDropped(ack.dropped_chunks());
  }
  if (options_.on_push_ack) options_.on_push_ack(sent->header.push_request(), ack);
  requests_.pushes().Ack(h.request_id());
}

void PsClient::OnErrorReply(int shard, const wire::Header& h) {
  Status err(transport::FromWire(h.error_reply().code()),
             "server " + std::to_string(routes_.address(shard).id) + ": " + h.error_reply().message());
  if (transport::OutboxEntry* push = requests_.pushes().Find(h.request_id())) {
    OnPushRefused(h, *push, err);
    return;
  }
  if (requests_.inits().Ack(h.request_id())) {
    init_errors_.push_back(err);
    return;
  }
  if (h.error_reply().reason() == wire::REFUSAL_MOVED) {
    ++stats_.moved_refusals;  // asked again of the new owner after SwitchMap (or the retry)
    return;
  }
  requests_.FailPullsOf(h.request_id(), err);
}

// docs/wire.md "Refused pushes": a chunk that moved (a migration) or a
// backup not yet promoted is asked again; any other refusal is final. The
// shard applied nothing of the push and will never complete its clock for
// us, so waiting would stall every worker of a synchronous job: the push
// fails this client (push_error), and every later wait returns that error
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
    if (why == wire::REFUSAL_MOVED) ++stats_.moved_refusals;
    return;
  }
  ++stats_.pushes_refused;
  if (options_.ledger) options_.ledger->AddRefused(static_cast<uint64_t>(push.header.push_request().chunks_size()));
  Status failed =
      err.Annotate("push at clock " + std::to_string(clock) + " refused (" + transport::RefusalName(why) + ")");
  if (why == wire::REFUSAL_NON_FINITE || why == wire::REFUSAL_VALUE_TOO_LARGE)
    failed = Status(failed.code(), failed.message() + ": the model diverged").WithDetail(Detail::kJobFatal);
  GD_LOG(ERROR) << failed;
  if (stats_.push_error.ok()) stats_.push_error = failed;
  requests_.pushes().Ack(h.request_id());
}

Status PsClient::SendTracked(transport::Outbox<uint64_t>& box, size_t si, wire::Header h,
                             std::vector<transport::Payload> payloads) {
  const uint64_t id = requests_.NextId();
  h.set_request_id(id);
  GD_RETURN_IF_ERROR(links_->Send(si, h, payloads));
  box.Add(id, static_cast<int>(si), std::move(h), std::move(payloads), clock_->Now());
  return Status::Ok();
}

Status PsClient::Init(const float* params, const std::atomic<bool>* stop) {
  init_errors_.clear();
  held_initial_.assign(routes_.layout().num_chunks(), false);
  std::vector<std::vector<uint32_t>> offer(routes_.size());
  for (size_t si = 0; si < routes_.size(); ++si) offer[si] = routes_.chunks(si);
  const TimePoint deadline = clock_->Now() + std::chrono::seconds(options_.timing.rpc_timeout_s);
  for (;;) {
    init_send_.assign(routes_.size(), {});
    init_wait_.assign(routes_.size(), {});
    GD_RETURN_IF_ERROR(SendInits(offer, params, true, stop));
    GD_RETURN_IF_ERROR(SendInits(init_send_, params, false, stop));
    size_t waiting = 0;
    for (const auto& w : init_wait_) waiting += w.size();
    if (waiting == 0) return Status::Ok();
    // Another worker holds these chunks' reservation and is sending them.
    if (clock_->Now() > deadline)
      return DeadlineExceeded(std::to_string(waiting) + " chunk(s) reserved by another worker were never set");
    if (stop->load()) return Cancelled("stopped during init");
    Poll(100);
    offer = init_wait_;
  }
}

Status PsClient::SendInits(const std::vector<std::vector<uint32_t>>& chunks, const float* params, bool offer,
                           const std::atomic<bool>* stop) {
  const cluster::ChunkLayout& layout = routes_.layout();
  for (size_t si = 0; si < chunks.size(); ++si) {
    if (chunks[si].empty()) continue;
    for (const auto& batch : cluster::BatchChunks(layout, chunks[si], options_.wire.message_bytes)) {
      wire::Header h;
      std::vector<transport::Payload> payloads;
      auto* req = h.mutable_init_request();
      if (offer) {
        req->set_offer(true);
        for (uint32_t c : batch) {
          auto* d = req->add_chunks();
          d->set_chunk_id(c);
          d->set_num_elems(layout.Size(c));
          req->add_digests(ValuesDigest(params + layout.Begin(c), layout.Size(c)));
        }
      } else {
        // Copied once, and kept for resends (a redirect, a lost answer).
        codec_.AddValues(batch, params, nullptr, req->mutable_chunks(), &payloads);
      }
      GD_RETURN_IF_ERROR(SendTracked(requests_.inits(), si, std::move(h), std::move(payloads)));
    }
  }
  return WaitInits(stop);
}

void PsClient::OnInitAck(int shard, const wire::Header& h) {
  if (!requests_.inits().Ack(h.request_id())) return;  // a duplicate answer
  const wire::InitAck& ack = h.init_ack();
  const size_t si = static_cast<size_t>(shard);
  if (si >= init_send_.size() || held_initial_.empty()) return;
  // Only the shard's own chunks count: an answer naming others is ignored
  // for them (they are then neither sent nor held, and pulled at clock 0).
  const std::vector<uint32_t>& own = routes_.chunks(si);
  auto owned = [&](uint32_t c) { return std::find(own.begin(), own.end(), c) != own.end(); };
  for (uint32_t c : ack.held_chunks())
    if (owned(c)) {
      held_initial_[c] = true;
      codec_.HoldInitial(c);
    }
  for (uint32_t c : ack.send_chunks())
    if (owned(c)) init_send_[si].push_back(c);
  for (uint32_t c : ack.wait_chunks())
    if (owned(c)) init_wait_[si].push_back(c);
}

bool PsClient::HoldsAllInitial() const {
  return !held_initial_.empty() && std::all_of(held_initial_.begin(), held_initial_.end(), [](bool b) { return b; });
}

Status PsClient::WaitInits(const std::atomic<bool>* stop) {
  WaitReporter report(clock_, std::chrono::seconds(options_.timing.report_after_s));
  TimePoint deadline = clock_->Now() + std::chrono::seconds(options_.timing.rpc_timeout_s);
  while (!requests_.inits().empty()) {
    if (stop->load()) return Cancelled("stopped during init");
    if (clock_->Now() > deadline) return DeadlineExceeded("no init acknowledgement from the servers");
    if (report.Due())
      GD_LOG(INFO) << "waiting " << static_cast<int>(report.ElapsedSeconds()) << " s for " << requests_.inits().size()
                   << " init acknowledgement(s)";
    Poll(50);
    ResendStale();
  }
  if (!init_errors_.empty()) return init_errors_.front().Annotate("init");
  return Status::Ok();
}

void PsClient::NoteComputeSeconds(double seconds) {
  compute_ema_ = compute_ema_ == 0 ? seconds : 0.9 * compute_ema_ + 0.1 * seconds;
}

Status PsClient::SendPullRequest(PendingPull& p, size_t si) {
  wire::Header h;
  uint64_t id = requests_.NextId();
  h.set_request_id(id);
  auto* req = h.mutable_pull_request();
  req->set_clock(p.clock);
  req->set_final(p.final());
  req->set_full(p.full);
  if (p.after_own_push) {
    // Reply when our own previous push is in, or when the reply must leave
    // to arrive as our compute ends (with a quarter for jitter).
    double rtt = std::max(0.0, rtt_ema_);
    double hold = p.max_hold_s >= 0 ? p.max_hold_s : std::max(0.0, 1.25 * compute_ema_ - rtt);
    req->set_wait_for_own_push(true);
    req->set_max_hold_us(static_cast<uint64_t>(hold * 1e6));
  }
  for (uint32_t c : routes_.chunks(si))
    if (!p.got[c]) req->add_chunk_ids(c);
  p.request_ids[si] = id;
  return links_->Send(si, h, {});
}

PsClientStats PsClient::Stats() const {
  PsClientStats s = stats_;
  s.resyncs = codec_.resyncs();
  s.residual_norm = codec_.residual_norm();
  s.links = monitor_.Estimates(routes_);
  s.traffic = monitor_.Traffic(routes_, *links_);
  return s;
}

Status PsClient::Pull(int64_t clock, const PullOptions& options) {
  const bool final = options.final;
  PendingPull& p = requests_.StartPull(final ? kFinalPull : clock, clock, routes_.layout(), routes_.size(),
                                       options.only, clock_->Now());
  p.after_own_push = options.after_own_push && !final;
  p.full = options.full || final;
  p.max_hold_s = options.max_hold_s;
  for (size_t si = 0; si < routes_.size(); ++si) {
    if (!p.Misses(routes_.chunks(si))) continue;
    GD_RETURN_IF_ERROR(SendPullRequest(p, si));
  }
  return Status::Ok();
}

std::string PsClient::DescribeShardsMissing(const PendingPull& p) const {
  std::string out;
  for (size_t si = 0; si < routes_.size(); ++si) {
    const auto& chunks = routes_.chunks(si);
    size_t missing = 0;
    for (uint32_t c : chunks) missing += !p.got[c];
    if (!missing) continue;
    const ShardAddress& a = routes_.address(si);
    out += (out.empty() ? "" : ", ") + std::string("server ") + std::to_string(a.id) + " (" + a.endpoint + ", " +
           std::to_string(missing) + "/" + std::to_string(chunks.size()) + " chunks missing)";
  }
  return out;
}

void PsClient::ResendStale() {
  const TimePoint now = clock_->Now();
  // Pulls stay out of the Outbox: a pull is one request per shard whose
  // chunk list shrinks as replies arrive, retried when the pull as a whole
  // makes no progress, not message by message.
  for (PendingPull* p : requests_.StalePulls(now)) (void)RerequestMissing(*p);
  for (auto* pending : {&requests_.pushes(), &requests_.inits()})
    for (auto& [id, push] : pending->Due(now)) {
      const size_t si = static_cast<size_t>(push->dest);
      const ShardAddress& a = routes_.address(si);
      GD_LOG(WARNING) << "server " << a.id << " (" << a.endpoint << ") has not acknowledged our "
                      << (pending == &requests_.inits()
                              ? std::string("init")
                              : "push at clock " + std::to_string(push->header.push_request().clock()))
                      << " for " << static_cast<int>(Seconds(now - push->first_sent)) << " s; resending";
      (void)links_->Send(si, push->header, push->payloads);
    }
}

Status PsClient::Tick() {
  Poll(0);
  ResendStale();
  return stats_.push_error;
}

bool PsClient::PullArrived(int64_t clock) {
  Poll(0);
  const PendingPull* p = requests_.FindPull(clock);
  return p && p->remaining == 0 && p->error.ok() && p->resync.empty();
}

StatusOr<PullTiming> PsClient::WaitPull(int64_t clock, const PullInto& into) {
  if (!into.params && !into.borrowed) return InvalidArgument("WaitPull needs a destination or a borrowed list");
  PendingPull* found = requests_.FindPull(clock);
  if (!found) return FailedPrecondition("no pull requested for clock " + std::to_string(clock));
  const TimePoint entered = clock_->Now();
  GD_RETURN_IF_ERROR(PrepareWait(*found, into));
  GD_RETURN_IF_ERROR(AwaitPull(*found, into));
  PendingPull p = requests_.TakePull(clock);
  if (!p.error.ok()) return p.error;
  if (into.borrowed) Borrow(p, into.borrowed);
  return Finished(p, entered);
}

Status PsClient::PrepareWait(PendingPull& p, const PullInto& into) {
  // From here on chunks are copied in as they arrive, overlapping the
  // copy with the rest of the transfer.
  p.dest = into.params;
  if (into.params) {
    for (auto& [d, frame] : p.data) GD_RETURN_IF_ERROR(Decode(p, d, frame));
    p.data.clear();
    p.borrow = false;
  } else {
    // What arrives from here on is checked on arrival, so that the read
    // of the values overlaps the rest of the transfer.
    for (const auto& [d, frame] : p.data) GD_RETURN_IF_ERROR(ChunkCodec::CheckBorrowable(d, frame));
    p.borrow = true;
  }
  return Status::Ok();
}

PullTiming PsClient::Finished(const PendingPull& p, TimePoint entered) {
  TimePoint done = clock_->Now();
  stats_.pull_latency.Observe(Seconds(p.last_reply - p.requested));
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

Status PsClient::AwaitPull(PendingPull& p, const PullInto& into) {
  TimePoint deadline = clock_->Now() + std::chrono::seconds(options_.timing.rpc_timeout_s);
  WaitReporter report(clock_, std::chrono::seconds(options_.timing.report_after_s));
  while (p.remaining > 0 && p.error.ok()) {
    if (!stats_.push_error.ok()) return stats_.push_error;
    if (into.stop->load()) return Cancelled("stopped while waiting for a pull");
    if (clock_->Now() > deadline)
      return DeadlineExceeded("pull at clock " + std::to_string(p.asked_clock) + " unanswered after " +
                              std::to_string(options_.timing.rpc_timeout_s) + " s by " + DescribeShardsMissing(p));
    if (report.Due()) {
      std::string why = into.describe ? into.describe() : "";
      GD_LOG(INFO) << (options_.role == wire::WORKER ? "worker " : "evaluator ") << options_.id << " waiting "
                   << static_cast<int>(report.ElapsedSeconds()) << " s for pull at clock " << p.asked_clock << " from "
                   << DescribeShardsMissing(p) << (why.empty() ? "" : "; " + why);
    }
    Poll(20);
    ResendStale();
    if (!p.resync.empty()) {
      // Ask the owners of chunks that could not take their change for full values.
      p.resync.clear();
      p.full = true;
      p.after_own_push = false;
      GD_RETURN_IF_ERROR(RerequestMissing(p));
    }
  }
  return Status::Ok();
}

void PsClient::Borrow(PendingPull& p, std::vector<PulledChunk>* borrowed) {
  borrowed->clear();
  // Every frame was checked (CheckBorrowable) when WaitPull began or on arrival since.
  for (auto& [d, frame] : p.data) {
    codec_.Borrowed(d);
    borrowed->push_back(PulledChunk{d.chunk_id(), d.version(), std::move(frame)});
  }
}

Status PsClient::Push(int64_t clock, const PushData& data) {
  if (!data.values) {
    for (size_t si = 0; si < routes_.size(); ++si)
      if (!routes_.chunks(si).empty()) GD_RETURN_IF_ERROR(PushSkippedChunks(clock, si, {}, data.unit));
    return Status::Ok();
  }
  if (!stats_.push_error.ok()) return stats_.push_error;
  std::shared_ptr<const void> owner = data.owner;
  const float* values = codec_.Prepare(clock, data.values, &owner, data.only);
  for (size_t si = 0; si < routes_.size(); ++si) {
    std::vector<uint32_t> pushed, skipped;
    for (uint32_t c : routes_.chunks(si)) (!data.only || data.only->Contains(c) ? pushed : skipped).push_back(c);
    if (!skipped.empty() && data.skip_others) GD_RETURN_IF_ERROR(PushSkippedChunks(clock, si, skipped));
    GD_RETURN_IF_ERROR(PushChunks(clock, si, pushed, values, owner, data));
  }
  return Status::Ok();
}

Status PsClient::PushChunks(int64_t clock, size_t si, const std::vector<uint32_t>& chunks, const float* values,
                            const std::shared_ptr<const void>& owner, const PushData& data) {
  const TimePoint now = clock_->Now();
  for (const auto& batch : cluster::BatchChunks(routes_.layout(), chunks, options_.wire.message_bytes)) {
    wire::Header h;
    uint64_t id = requests_.NextId();
    h.set_request_id(id);
    auto* req = h.mutable_push_request();
    req->set_clock(clock);
    if (data.unit >= 0) req->set_unit(data.unit);
    for (int w : data.covers) req->add_covers(w);
    std::vector<transport::Payload> payloads;
    GD_RETURN_IF_ERROR(codec_.AddPush(si, clock, batch, values, owner, req->mutable_chunks(), &payloads));
    // Counted before it can leave: a kill right after the send must not
    // leave a chunk a shard took that no ledger says was pushed.
    if (options_.ledger) options_.ledger->AddPushed(static_cast<uint64_t>(req->chunks_size()));
    for (uint32_t c : batch) monitor_.AddRawSent(si, routes_.layout().Size(c) * sizeof(float));
    GD_RETURN_IF_ERROR(
        links_->Send(si, h, payloads).Annotate("push to server " + std::to_string(routes_.address(si).id)));
    requests_.pushes().Add(id, static_cast<int>(si), std::move(h), std::move(payloads), now);
  }
  return Status::Ok();
}

Status PsClient::PushSkippedChunks(int64_t clock, size_t si, const std::vector<uint32_t>& ids, int64_t unit) {
  wire::Header h;
  auto* req = h.mutable_push_request();
  req->set_clock(clock);
  req->set_skipped(true);
  if (unit >= 0) req->set_unit(unit);
  for (uint32_t c : ids) {
    auto* d = req->add_chunks();
    d->set_chunk_id(c);
    d->set_num_elems(routes_.layout().Size(c));
  }
  return SendTracked(requests_.pushes(), si, std::move(h), {})
      .Annotate("skipped push to server " + std::to_string(routes_.address(si).id));
}

std::string PsClient::DescribeUnacked() const {
  std::string who;
  for (const auto& [si, n] : requests_.UnackedByShard())
    who += " server " + std::to_string(routes_.address(si).id) + " (" + std::to_string(n) + ")";
  return who;
}

StatusOr<double> PsClient::WaitAcks(size_t max_unacked_clocks, const std::atomic<bool>* stop, Duration max_wait) {
  Poll(0);
  if (!stats_.push_error.ok()) return stats_.push_error;
  if (requests_.UnackedClocks() <= max_unacked_clocks) return 0.0;
  TimePoint entered = clock_->Now();
  TimePoint deadline = entered + std::chrono::seconds(options_.timing.rpc_timeout_s);
  if (max_wait > Duration::zero()) deadline = std::min(deadline, entered + max_wait);
  WaitReporter report(clock_, std::chrono::seconds(options_.timing.report_after_s));
  while (requests_.UnackedClocks() > max_unacked_clocks) {
    if (!stats_.push_error.ok()) return stats_.push_error;
    if (stop->load()) return Cancelled("stopped while waiting for push acknowledgements");
    if (clock_->Now() > deadline)
      return DeadlineExceeded(std::to_string(requests_.pushes().size()) + " push message(s) unacknowledged after " +
                              std::to_string(Seconds(clock_->Now() - entered)) + " s");
    if (report.Due())
      GD_LOG(INFO) << "waiting " << static_cast<int>(report.ElapsedSeconds()) << " s for push acknowledgements from"
                   << DescribeUnacked();
    Poll(20);
    ResendStale();
  }
  return Seconds(clock_->Now() - entered);
}

}  // namespace geodesic::worker
