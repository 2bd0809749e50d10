#include "server/pull_service.h"

#include <algorithm>

#include "cluster/chunking.h"
#include "common/log.h"

namespace geodesic::server {
namespace {

uint64_t Micros(Duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

// A reply frame's share of its peer's unwritten bytes, given back when
// ZeroMQ frees the frame (on its I/O thread).
class UnreadShare {
 public:
  UnreadShare(std::shared_ptr<const void> owner, std::shared_ptr<std::atomic<int64_t>> unread, int64_t bytes)
      : owner_(std::move(owner)), unread_(std::move(unread)), bytes_(bytes) {
    unread_->fetch_add(bytes_);
  }
  UnreadShare(const UnreadShare&) = delete;
  UnreadShare& operator=(const UnreadShare&) = delete;
  ~UnreadShare() { unread_->fetch_sub(bytes_); }

 private:
  std::shared_ptr<const void> owner_;
  std::shared_ptr<std::atomic<int64_t>> unread_;
  int64_t bytes_;
};

constexpr size_t kPeersTracked = 1024;  // past this, peers with nothing unwritten are forgotten
// The pull compressor's key for aggregator i: below any evaluator's or tool's (-1 - id).
constexpr int kAggregatorKeys = -(1 << 20);

}  // namespace

PullService::PullService(const JobSpec& job, int server_id, const Clock* clock, transport::ReplySink* replies)
    : job_(job), server_id_(server_id), clock_(clock), replies_(replies) {}

Status PullService::LoadCodecs() {
  const std::string& my_region = job_.RegionOfServer(server_id_).name;
  for (int w = 0; w < job_.NumWorkers(); ++w) {
    const std::string& name = job_.PullCodec(job_.RegionOfWorker(w).name, my_region);
    auto spec = compression::ParseCodecSpec(name);
    if (!spec.ok()) return spec.status().Annotate("compression (pull codec for worker " + std::to_string(w) + ")");
    codecs_[w] = *spec;
  }
  for (size_t r = 0; r < job_.regions.size(); ++r) {
    if (!job_.regions[r].aggregator) continue;
    auto spec = compression::ParseCodecSpec(job_.PullCodec(job_.regions[r].name, my_region));
    if (!spec.ok()) return spec.status().Annotate("compression (pull codec for aggregator " + std::to_string(r) + ")");
    aggregator_codecs_[static_cast<int>(r)] = *spec;
  }
  return Status::Ok();
}

void PullService::Start(const ShardState* shard, const ClockTable* clocks, uint64_t seed) {
  shard_ = shard;
  clocks_ = clocks;
  compressor_ = compression::PullCompressor(seed);
  SetUnreadLimit();
}

void PullService::SetUnreadLimit() {
  if (!shard_) return;
  uint64_t bytes = 0;
  for (uint32_t c : shard_->owned()) bytes += shard_->layout().Size(c) * sizeof(float);
  unread_limit_ = std::max<uint64_t>(4 * bytes, 16 << 20);
}

const PullService::Unread& PullService::UnreadOf(const std::string& peer) {
  auto it = unread_.find(peer);
  if (it != unread_.end()) return it->second;
  if (unread_.size() >= kPeersTracked) std::erase_if(unread_, [](const auto& u) { return u.second->load() <= 0; });
  return unread_.emplace(peer, std::make_shared<std::atomic<int64_t>>(0)).first->second;
}

bool PullService::Reading(const HeldPull& p) {
  const int64_t unread = UnreadOf(p.peer)->load();
  if (unread <= static_cast<int64_t>(unread_limit_)) return true;
  ++withheld_;
  replies_->CountDropped();
  uint64_t skipped = 0;
  if (withheld_log_.Due(clock_->Now(), &skipped))
    GD_LOG(WARNING) << "dropped a pull of " << (p.role == wire::WORKER ? "worker " : "puller ") << p.sender_id << ": "
                    << unread / (1 << 20) << " MiB of replies to it are unwritten (it does not read; the limit is "
                    << unread_limit_ / (1 << 20) << " MiB)"
                    << (skipped ? " (and " + std::to_string(skipped) + " more since the last such line)" : "");
  return false;
}

const compression::CodecSpec& PullService::CodecFor(int worker) const {
  auto it = codecs_.find(worker);
  return it == codecs_.end() ? fp32_ : it->second;
}

const compression::CodecSpec& PullService::CodecOf(const HeldPull& p) const {
  if (p.role == wire::WORKER) return CodecFor(p.sender_id);
  if (p.role != wire::AGGREGATOR) return fp32_;
  auto it = aggregator_codecs_.find(p.sender_id);
  return it == aggregator_codecs_.end() ? fp32_ : it->second;
}

void PullService::AssumeHeld(int worker, uint32_t chunk) {
  const ShardState::Snapshot snap = shard_->Read(chunk);
  compressor_.Assume(worker, CodecFor(worker), chunk,
                     compression::ChunkValues{snap.values, shard_->layout().Size(chunk)});
}

void PullService::Take(const transport::Message& m, std::vector<uint32_t> chunks) {
  const auto& req = m.header.pull_request();
  const wire::Role role = m.header.sender_role();
  HeldPull p;
  p.chunks = std::move(chunks);
  p.peer = m.peer;
  p.request_id = m.header.request_id();
  p.sender_id = m.header.sender_id();
  p.role = role;
  p.clock = req.final() ? -1 : req.clock();
  p.since = clock_->Now();
  p.wait_for_own_push = req.wait_for_own_push() && role == wire::WORKER && !req.final();
  p.full = req.full() || req.final();
  p.hold_until = p.since + std::chrono::microseconds(std::min<uint64_t>(req.max_hold_us(), 60'000'000));
  if (CanServe(p)) return Serve(p);
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

bool PullService::BoundAllows(const HeldPull& p) const {
  for (uint32_t c : p.chunks)
    if (!shard_->IsInitialized(c)) return false;
  // A final read (the evaluator's) waits only for rounds still open.
  if (p.clock < 0) return !shard_->HasOpenRounds();
  return clocks_->CanRead(p.clock);
}

bool PullService::CanServe(HeldPull& p) {
  if (!BoundAllows(p)) return false;
  if (!p.bound_met) p.bound_met = clock_->Now();
  if (!p.wait_for_own_push) return true;
  return clocks_->ClockOf(p.sender_id) >= p.clock || clock_->Now() >= p.hold_until;
}

bool PullService::FillReply(const HeldPull& p, const std::vector<uint32_t>& batch, wire::Header* reply,
                            std::vector<transport::Payload>* payloads) {
  auto* r = reply->mutable_pull_reply();
  for (uint32_t c : batch) {
    auto snap = shard_->Read(c);
    auto* d = r->add_chunks();
    d->set_chunk_id(c);
    d->set_num_elems(shard_->layout().Size(c));
    d->set_version(snap.version);
    // Workers and aggregators get their link's pull codec; the evaluator and
    // tools exact values. An aggregator's copies are kept apart from the
    // evaluator's and tools'.
    const int key = p.role == wire::WORKER       ? p.sender_id
                    : p.role == wire::AGGREGATOR ? kAggregatorKeys - p.sender_id
                                                 : -1 - p.sender_id;
    auto payload = compressor_.Encode(key, CodecOf(p), c,
                                      compression::ChunkValues{snap.values, shard_->layout().Size(c)}, p.full, d);
    if (!payload.ok()) {
      GD_LOG(ERROR) << "encoding chunk " << c << " for " << p.sender_id << ": " << payload.status();
      return false;
    }
    auto share =
        std::make_shared<UnreadShare>(std::move(payload->owner), UnreadOf(p.peer), static_cast<int64_t>(payload->size));
    payloads->push_back(transport::Payload{payload->data, payload->size, std::move(share)});
  }
  return true;
}

void PullService::Serve(const HeldPull& p, const std::vector<uint32_t>* only) {
  if (!Reading(p)) return;
  const std::vector<uint32_t>& chunks = only ? *only : p.chunks;
  TimePoint now = clock_->Now();
  int64_t min_clock = clocks_->MinClock();
  if (min_clock == ClockTable::kNoWorkers) min_clock = -1;
  for (const auto& batch : cluster::BatchChunks(shard_->layout(), chunks, job_.wire.message_bytes)) {
    wire::Header reply;
    reply.set_request_id(p.request_id);
    auto* r = reply.mutable_pull_reply();
    r->set_clock(p.clock);
    r->set_min_clock(min_clock);
    r->set_held_us(Micros(p.bound_met.value_or(now) - p.since));
    r->set_hold_us(Micros(now - p.since));
    std::vector<transport::Payload> payloads;
    if (!FillReply(p, batch, &reply, &payloads)) return;
    if (Status s = replies_->Send(std::move(reply), payloads, p.peer); !s.ok()) {
      // The worker asks again (worker/ps_client.h); one line a second at most.
      uint64_t skipped = 0;
      if (failed_reply_log_.Due(clock_->Now(), &skipped))
        GD_LOG(WARNING) << "pull reply to worker " << p.sender_id << " failed: " << s << " (and " << skipped
                        << " more since the last such line)";
      return;
    }
  }
}

void PullService::ServeHeld() {
  if (held_.empty()) return;
  std::vector<HeldPull> still;
  for (auto& p : held_) {
    if (CanServe(p)) {
      Serve(p);
      continue;
    }
    // A pull waiting for its sender's own push pipelines: each chunk goes
    // out as soon as that push has been applied to it, while later chunks
    // are still arriving and being applied.
    if (p.wait_for_own_push && p.bound_met) {
      std::vector<uint32_t> ready, rest;
      for (uint32_t c : p.chunks) (shard_->LastClock(p.sender_id, c) >= p.clock - 1 ? ready : rest).push_back(c);
      if (!ready.empty()) {
        Serve(p, &ready);
        p.chunks = std::move(rest);
      }
      if (p.chunks.empty()) continue;
    }
    still.push_back(std::move(p));
  }
  held_ = std::move(still);
}

int PullService::WaitMs(int max_ms) const {
  // A pull the staleness bound still holds is woken by pushes and
  // membership, not by its hold (which may have long expired: waking for it
  // would spin).
  int wait_ms = max_ms;
  for (const auto& p : held_)
    if (p.wait_for_own_push && p.bound_met) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(p.hold_until - clock_->Now()).count();
      wait_ms = std::clamp<int>(static_cast<int>(left) + 1, 0, wait_ms);
    }
  return wait_ms;
}

void PullService::ReportHeld() {
  TimePoint now = clock_->Now();
  if (now < next_report_ || held_.empty()) return;
  const Duration after = std::chrono::seconds(job_.membership.report_after_s);
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
    int slow = clocks_->SlowestWorker();
    why = "staleness bound " + std::to_string(clocks_->bound()) + " waits for worker " + std::to_string(slow) +
          " at clock " + std::to_string(clocks_->ClockOf(slow));
  }
  GD_LOG(INFO) << "holding " << held_.size() << " pull(s); worker " << oldest->sender_id << " at clock "
               << oldest->clock << " has waited " << static_cast<int>(Seconds(now - oldest->since)) << " s: " << why;
}

}  // namespace geodesic::server
