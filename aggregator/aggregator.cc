#include "aggregator/aggregator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/log.h"
#include "common/wire_limits.h"
#include "transport/metrics.h"
#include "worker/process_options.h"
#include "worker/zmq_shard_links.h"

namespace geodesic::aggregator {
namespace {

// Pulls of this many recent clocks stay cached for late or resent requests.
constexpr int64_t kPullsKept = 4;
// How far ahead of the live workers' clock a push may be (as at a shard,
// server/requests.h).
constexpr int64_t kPushWindow = 16;

}  // namespace

Aggregator::Aggregator(AggregatorOptions options, zmq::context_t& ctx, const Clock* clock)
    : options_(std::move(options)), ctx_(ctx), clock_(clock) {
  const JobSpec& job = options_.job;
  first_worker_ = job.FirstWorkerOfRegion(static_cast<size_t>(options_.region));
  num_workers_ = job.regions[static_cast<size_t>(options_.region)].workers;
}

Aggregator::~Aggregator() {
  if (member_) member_->Stop();
}

Status Aggregator::Run(const std::atomic<bool>* stop) {
  const JobSpec& job = options_.job;
  const RegionSpec& region = job.regions[static_cast<size_t>(options_.region)];
  GD_RETURN_IF_ERROR(metrics_.Start(options_.http, [this] { return ready_.load(); }));
  transport::SocketOptions so{.job = job.name,
                              .role = wire::AGGREGATOR,
                              .id = options_.region,
                              .max_message_bytes = job.wire.max_message_bytes,
                              .send_timeout_ms = 0};
  GD_RETURN_IF_ERROR(StartSecurity(&so));
  socket_ = std::make_unique<transport::Socket>(ctx_, zmq::socket_type::router, so, &counters_);
  GD_RETURN_IF_ERROR(socket_->Bind(options_.bind.empty() ? "tcp://" + region.host + ":*" : options_.bind));
  if (!options_.endpoint_file.empty())
    GD_RETURN_IF_ERROR(WriteFileAtomic(options_.endpoint_file, socket_->endpoint(), /*durable=*/false));
  GD_LOG(INFO) << "aggregator of region " << region.name << " (workers " << first_worker_ << ".."
               << first_worker_ + num_workers_ - 1 << ") listening on " << socket_->endpoint()
               << (zap_ ? " (CurveZMQ, public key " + options_.credentials.keys.public_key + ")" : "");
  GD_RETURN_IF_ERROR(Join(stop));
  ready_ = true;
  auto last_stats = clock_->Now();
  while (!stop->load()) {
    if (socket_->WaitReadable(5))
      for (int k = 0; k < 256; ++k) {
        auto in = socket_->Receive();
        if (!in) break;
        if (!in->status.ok()) {
          Refuse(in->message, wire::REFUSAL_MALFORMED, in->status);
          continue;
        }
        Serve(in->message);
      }
    GD_RETURN_IF_ERROR(PollUpstream(stop));
    RefreshView();
    GD_RETURN_IF_ERROR(ForwardReady());
    if (Status e = member_->error(); !e.ok()) return e;
    if (view_.job_finished) break;
    if (clock_->Now() - last_stats > std::chrono::seconds(2)) {
      WriteStats(false);
      last_stats = clock_->Now();
    }
  }
  WriteStats(true);
  member_->Stop();
  if (stop->load()) return Cancelled("stopped");
  GD_LOG(INFO) << "the job finished: " << counts_.clocks_forwarded << " combined pushes, " << counts_.upstream_pulls
               << " pulls for " << counts_.pulls_served << " worker pulls";
  return Status::Ok();
}

Status Aggregator::Join(const std::atomic<bool>* stop) {
  const JobSpec& job = options_.job;
  cluster::MemberOptions mo =
      worker::MemberOptionsFor(job, wire::AGGREGATOR, options_.region, options_.coordinator, {}, options_.credentials);
  mo.region = job.regions[static_cast<size_t>(options_.region)].name;
  mo.endpoint = socket_->endpoint();
  if (zap_) mo.authorize = [this](const wire::HeartbeatReply& r) { Authorize(r); };
  member_ = std::make_unique<cluster::MemberClient>(ctx_, std::move(mo), &member_counters_, clock_);
  GD_ASSIGN_OR_RETURN(wire::RegisterReply assignment, member_->Join(stop));
  worker::PsClientOptions po = worker::PsOptionsFor(job, wire::AGGREGATOR, options_.region);
  if (job.replication.backups > 0) po.servers_view = worker::ServersView(*member_);
  po.on_push_ack = [this](const wire::PushRequest& sent, const wire::PushAck& ack) {
    std::vector<uint32_t> chunks;
    for (const auto& c : sent.chunks()) chunks.push_back(c.chunk_id());
    sums_->Answered(sent.clock(), {sent.covers().begin(), sent.covers().end()}, chunks, ack);
  };
  ps_ = worker::MakePsClient(ctx_, po, assignment, options_.credentials.keys, &upstream_counters_, clock_);
  GD_RETURN_IF_ERROR(ps_->Connect());
  layout_ = ps_->shard_map().layout;
  held_.assign(layout_.num_params(), 0.0f);
  fragment_cuts_ = cluster::FragmentCuts(layout_, options_.job.training.fragments);
  sums_ = std::make_unique<RegionSums>(layout_, first_worker_, num_workers_,
                                       [this](int64_t clock) { return FragmentOf(clock); });
  RefreshView();
  member_->Start([](wire::Heartbeat*) {});
  return Status::Ok();
}

Status Aggregator::StartSecurity(transport::SocketOptions* so) {
  if (!options_.credentials.enabled()) return Status::Ok();
  // Before the ROUTER binds: ZeroMQ asks the context's handler at every
  // handshake, and admits no one until the coordinator lists a key.
  zap_ = std::make_unique<transport::ZapHandler>(ctx_, /*admit_any=*/false);
  GD_RETURN_IF_ERROR(zap_->Start());
  so->curve = {.keys = options_.credentials.keys};
  return Status::Ok();
}

void Aggregator::Authorize(const wire::HeartbeatReply& r) {
  transport::KeyOwners owners(r);
  zap_->SetAllowed(owners.keys());
  MutexLock lock(keys_mu_);
  key_owners_ = std::move(owners);
}

Status Aggregator::CheckSender(const transport::Message& m) const {
  if (!zap_) return Status::Ok();
  MutexLock lock(keys_mu_);
  return key_owners_.Check(m, {wire::WORKER});
}

void Aggregator::Serve(transport::Message& m) {
  if (Status s = CheckSender(m); !s.ok()) {
    ++counts_.unauthorized;
    return Refuse(m, wire::REFUSAL_UNAUTHORIZED, s);
  }
  if (m.header.has_push_request()) return OnPush(m);
  if (m.header.has_pull_request()) return OnPull(m);
  Refuse(m, wire::REFUSAL_UNSUPPORTED_TYPE,
         InvalidArgument("an aggregator serves pushes and training pulls, not " + transport::BodyName(m.header) +
                         " messages (those go to the shards)"));
}

void Aggregator::Refuse(const transport::Message& m, wire::Refusal reason, const Status& status) {
  ++counts_.pushes_refused;
  GD_LOG(WARNING) << "refused " << transport::BodyName(m.header) << " from " << transport::PeerName(m) << " ("
                  << transport::RefusalName(reason) << "): " << status.message();
  if (m.peer.empty()) return;
  wire::Header reply;
  reply.set_request_id(m.header.request_id());
  reply.mutable_error_reply()->set_code(transport::ToWire(status.code()));
  reply.mutable_error_reply()->set_message(status.message());
  reply.mutable_error_reply()->set_reason(reason);
  (void)socket_->Send(std::move(reply), {}, m.peer);
}

Status Aggregator::CheckPush(const transport::Message& m, wire::Refusal* reason) const {
  const auto& req = m.header.push_request();
  const int w = m.header.sender_id();
  *reason = wire::REFUSAL_BAD_SENDER;
  if (m.header.sender_role() != wire::WORKER || w < first_worker_ || w >= first_worker_ + num_workers_)
    return PermissionDenied(transport::PeerName(m) + " is not a worker of this aggregator's region (workers " +
                            std::to_string(first_worker_) + ".." + std::to_string(first_worker_ + num_workers_ - 1) +
                            ")");
  // (The chunks outside a clock's fragment are skipped at the shards.)
  if (req.has_unit() || !req.covers().empty() || req.skipped() == (req.chunks_size() > 0))
    return InvalidArgument(
        "a worker's push to an aggregator names no data unit, covers no one, and either carries chunks or skips a "
        "whole clock");
  *reason = wire::REFUSAL_BAD_CLOCK;
  if (req.clock() < 0 || req.clock() >= options_.job.ClocksPerWorker())
    return OutOfRange("clock " + std::to_string(req.clock()) + " is not one of this job's " +
                      std::to_string(options_.job.ClocksPerWorker()));
  // Each open clock holds a model per worker: a push far ahead of the live
  // workers would hold memory until then (the shards' live window, too).
  if (const int64_t from = WindowStart(); req.clock() > from + kPushWindow)
    return OutOfRange("clock " + std::to_string(req.clock()) + " is beyond the live window (clock " +
                      std::to_string(from) + ", at most " + std::to_string(kPushWindow) + " ahead)");
  *reason = wire::REFUSAL_FRAME_COUNT;
  if (req.chunks_size() != static_cast<int>(m.frames.size()))
    return InvalidArgument(std::to_string(req.chunks_size()) + " chunks and " + std::to_string(m.frames.size()) +
                           " payload frames");
  return CheckChunks(m, reason);
}

Status Aggregator::CheckChunks(const transport::Message& m, wire::Refusal* reason) const {
  const auto& req = m.header.push_request();
  const auto fragment = FragmentOf(req.clock());
  std::set<uint32_t> seen;
  for (int i = 0; i < req.chunks_size(); ++i) {
    const wire::ChunkData& d = req.chunks(i);
    const std::string chunk = "chunk " + std::to_string(d.chunk_id());
    *reason = d.chunk_id() >= layout_.num_chunks() || (fragment && !fragment->Contains(d.chunk_id()))
                  ? wire::REFUSAL_CHUNK_OUT_OF_RANGE
              : !seen.insert(d.chunk_id()).second                   ? wire::REFUSAL_DUPLICATE_CHUNK
              : d.num_elems() != layout_.Size(d.chunk_id())         ? wire::REFUSAL_WRONG_SHAPE
              : d.codec() != wire::FP32                             ? wire::REFUSAL_UNKNOWN_CODEC
              : m.frames[i].size() != d.num_elems() * sizeof(float) ? wire::REFUSAL_BAD_PAYLOAD_SIZE
                                                                    : wire::REFUSAL_UNSPECIFIED;
    if (*reason != wire::REFUSAL_UNSPECIFIED)
      return InvalidArgument(chunk + " is not one of the layout's (and of clock " + std::to_string(req.clock()) +
                             "'s fragment), named once, as plain fp32 of its size (" + transport::RefusalName(*reason) +
                             ")");
    const float* v = static_cast<const float*>(m.frames[i].data());
    for (uint64_t k = 0; k < d.num_elems(); ++k) {
      if (!std::isfinite(v[k]))
        *reason = wire::REFUSAL_NON_FINITE;
      else if (std::fabs(v[k]) > kMaxValueMagnitude)
        *reason = wire::REFUSAL_VALUE_TOO_LARGE;
      if (*reason != wire::REFUSAL_UNSPECIFIED)
        return InvalidArgument(chunk + " value " + std::to_string(k) + " is " + std::to_string(v[k]));
    }
  }
  return Status::Ok();
}

void Aggregator::OnPush(transport::Message& m) {
  wire::Refusal reason = wire::REFUSAL_UNSPECIFIED;
  if (Status s = CheckPush(m, &reason); !s.ok()) return Refuse(m, reason, s);
  const auto& req = m.header.push_request();
  if (req.skipped()) return sums_->Skip(m.header.sender_id(), req.clock());  // the shards answer it
  AckTo to{m.peer, m.header.request_id(), {}};
  std::vector<PushedChunk> chunks;
  for (int i = 0; i < req.chunks_size(); ++i) {
    to.chunks.push_back(req.chunks(i).chunk_id());
    chunks.push_back({req.chunks(i).chunk_id(), static_cast<const float*>(m.frames[i].data())});
  }
  ++counts_.pushes_taken;
  for (const Reply& r : sums_->Take(m.header.sender_id(), req.clock(), std::move(to), chunks)) {
    GD_LOG(INFO) << "worker " << m.header.sender_id() << " sent clock " << r.clock
                 << " again; answered from that clock's answers";
    Acknowledge(r);
  }
}

void Aggregator::RefreshView() {
  view_ = member_->view();
  sums_->SetLive(view_.valid, view_.live, view_.clocks);
}

int64_t Aggregator::WindowStart() const {
  int64_t from = sums_->OldestOpen();
  if (!view_.clocks.empty()) from = std::max(from, *std::min_element(view_.clocks.begin(), view_.clocks.end()));
  return from;
}

Status Aggregator::ForwardReady() {
  for (Forward& f : sums_->TakeReady()) {
    if (f.late) {
      ++counts_.late_forwards;
      GD_LOG(INFO) << "worker " << f.covers.front() << "'s push of clock " << f.clock
                   << " goes to the shards alone (the region's combined push went without it)";
    }
    // The workers told the shards about the chunks outside the fragment.
    GD_RETURN_IF_ERROR(ps_->Push(
        f.clock, {.values = f.sum->data(), .owner = f.sum, .only = f.only, .skip_others = false, .covers = f.covers}));
    ++counts_.clocks_forwarded;
  }
  for (const Reply& r : sums_->TakeAnswered()) {
    if (r.duplicate)
      GD_LOG(INFO) << "the shards had " << r.duplicate << " chunk(s) of a push of clock " << r.clock
                   << " already (answered as duplicates)";
    Acknowledge(r);
  }
  return Status::Ok();
}

void Aggregator::Acknowledge(const Reply& r) {
  wire::Header reply;
  reply.set_request_id(r.to.request_id);
  auto* ack = reply.mutable_push_ack();
  ack->set_clock(r.clock);
  ack->set_result(r.result());
  ack->set_applied_chunks(r.applied);
  ack->set_duplicate_chunks(r.duplicate);
  ack->set_dropped_chunks(r.dropped);
  (void)socket_->Send(std::move(reply), {}, r.to.peer);
}

void Aggregator::OnPull(transport::Message& m) {
  const auto& req = m.header.pull_request();
  const int w = m.header.sender_id();
  if (m.header.sender_role() != wire::WORKER || w < first_worker_ || w >= first_worker_ + num_workers_)
    return Refuse(m, wire::REFUSAL_BAD_SENDER, PermissionDenied(transport::PeerName(m) + " is not a worker here"));
  if (req.final() || req.clock() < 0 || req.clock() > options_.job.ClocksPerWorker())
    return Refuse(m, wire::REFUSAL_BAD_CLOCK,
                  InvalidArgument("an aggregator serves the pulls of training clocks 0.." +
                                  std::to_string(options_.job.ClocksPerWorker())));
  HeldPull h{m.peer, m.header.request_id(), {}, clock_->Now()};
  for (uint32_t c : req.chunk_ids()) {
    if (c >= layout_.num_chunks())
      return Refuse(m, wire::REFUSAL_CHUNK_OUT_OF_RANGE, OutOfRange("chunk " + std::to_string(c)));
    h.chunks.push_back(c);
  }
  // A worker pulls clock c after pushing c - 1, the chunks that clock
  // pushed (its fragment, with training.fragments).
  auto [it, fresh] = pulls_.try_emplace(req.clock());
  ClockPull& p = it->second;
  if (fresh) PullUpstream(req.clock(), p, req.clock() > 0 ? FragmentOf(req.clock() - 1) : std::nullopt);
  if (p.arrived && p.Has(h.chunks)) return Answer(req.clock(), p, h);
  p.waiting.push_back(std::move(h));
  if (p.arrived) AnswerWaiting(req.clock(), p);
}

std::optional<cluster::ChunkRange> Aggregator::FragmentOf(int64_t clock) const {
  return cluster::ClockFragment(fragment_cuts_, clock, options_.job.ClocksPerWorker());
}

bool Aggregator::ClockPull::Has(const std::vector<uint32_t>& ids) const {
  return std::all_of(ids.begin(), ids.end(), [&](uint32_t c) { return versions.count(c) > 0; });
}

// Under a lossy pull codec the shards send changes to the copy they keep
// of held_ (exact values the first time); the workers get exact values of
// held_, as the aggregator has it.
void Aggregator::PullUpstream(int64_t clock, ClockPull& p, std::optional<cluster::ChunkRange> only) {
  Status s = ps_->Pull(clock, {.only = only});
  if (!s.ok()) GD_LOG(WARNING) << "pull of clock " << clock << " from the shards: " << s;
  p.arrived = false;
  p.only = only;
  ++counts_.upstream_pulls;
}

void Aggregator::AnswerWaiting(int64_t clock, ClockPull& p) {
  std::vector<HeldPull> more;
  for (HeldPull& h : p.waiting) {
    if (p.Has(h.chunks))
      Answer(clock, p, h);
    else
      more.push_back(std::move(h));
  }
  p.waiting = std::move(more);
  if (p.waiting.empty() || !p.only) return;
  GD_LOG(INFO) << "a pull of clock " << clock << " asks for chunks outside the fragment pulled for it (a worker "
               << "starting there); pulling every chunk";
  PullUpstream(clock, p, std::nullopt);
}

Status Aggregator::PollUpstream(const std::atomic<bool>* stop) {
  GD_RETURN_IF_ERROR(ps_->Tick());
  for (auto& [clock, p] : pulls_) {
    if (p.arrived || !ps_->PullArrived(clock)) continue;
    GD_ASSIGN_OR_RETURN(worker::PullTiming t, ps_->WaitPull(clock, {.params = held_.data(), .stop = stop}));
    p.min_clock = t.min_clock;
    Snapshot(p);
    p.arrived = true;
    AnswerWaiting(clock, p);
  }
  while (pulls_.size() > static_cast<size_t>(kPullsKept) && pulls_.begin()->second.arrived)
    pulls_.erase(pulls_.begin());
  return Status::Ok();
}

void Aggregator::Snapshot(ClockPull& p) const {
  const cluster::ChunkRange range = p.only.value_or(cluster::ChunkRange{0, layout_.num_chunks()});
  p.versions.clear();
  p.values.reset();
  if (range.empty()) return;
  p.offset = layout_.Begin(range.begin);
  const uint64_t end = layout_.Begin(range.end - 1) + layout_.Size(range.end - 1);
  p.values = std::make_shared<const std::vector<float>>(held_.begin() + static_cast<ptrdiff_t>(p.offset),
                                                        held_.begin() + static_cast<ptrdiff_t>(end));
  for (uint32_t c = range.begin; c < range.end; ++c) p.versions[c] = ps_->HeldVersion(c);
}

void Aggregator::Answer(int64_t clock, const ClockPull& p, const HeldPull& h) {
  ++counts_.pulls_served;
  const uint64_t held_us =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(clock_->Now() - h.since).count());
  for (const auto& batch : cluster::BatchChunks(layout_, h.chunks, options_.job.wire.message_bytes)) {
    wire::Header reply;
    reply.set_request_id(h.request_id);
    auto* r = reply.mutable_pull_reply();
    r->set_clock(clock);
    r->set_min_clock(p.min_clock);
    r->set_held_us(held_us);
    r->set_hold_us(held_us);
    std::vector<transport::Payload> payloads;
    for (uint32_t c : batch) {
      auto* d = r->add_chunks();
      d->set_chunk_id(c);
      d->set_num_elems(layout_.Size(c));
      d->set_version(p.versions.at(c));
      d->set_codec(wire::FP32);
      payloads.push_back(transport::Payload{p.values->data() + (layout_.Begin(c) - p.offset),
                                            layout_.Size(c) * sizeof(float), p.values});
    }
    (void)socket_->Send(std::move(reply), payloads, h.peer);
  }
}

std::vector<prometheus::MetricFamily> Aggregator::Metrics() const {
  const JobSpec& job = options_.job;
  transport::MetricsBuilder b({.job = job.name,
                               .region = job.regions[static_cast<size_t>(options_.region)].name,
                               .role = "aggregator",
                               .id = std::to_string(options_.region)});
  transport::AddTraffic(b, static_cast<double>(counters_.bytes_sent + upstream_counters_.bytes_sent),
                        static_cast<double>(counters_.bytes_received + upstream_counters_.bytes_received));
  const char* pushes = "Worker pushes the aggregator took or refused.";
  b.Counter("aggregator_pushes_total", pushes, counts_.pushes_taken, {{"outcome", "taken"}});
  b.Counter("aggregator_pushes_total", pushes, counts_.pushes_refused, {{"outcome", "refused"}});
  b.Counter("aggregator_clocks_forwarded_total", "Combined pushes sent to the shards, one a clock.",
            counts_.clocks_forwarded);
  b.Counter("aggregator_late_forwards_total",
            "Pushes sent to the shards alone: a worker's push of a clock whose combined push went without it.",
            counts_.late_forwards);
  const char* pulls = "Worker pulls answered, and the pulls sent to the shards for them.";
  b.Counter("aggregator_pulls_total", pulls, counts_.pulls_served, {{"side", "workers"}});
  b.Counter("aggregator_pulls_total", pulls, counts_.upstream_pulls, {{"side", "shards"}});
  const char* bytes = "Bytes the aggregator exchanged with the shards (over the WAN) and with its workers.";
  b.Counter("aggregator_bytes_total", bytes, upstream_counters_.bytes_sent,
            {{"peer", "shards"}, {"direction", "sent"}});
  b.Counter("aggregator_bytes_total", bytes, upstream_counters_.bytes_received,
            {{"peer", "shards"}, {"direction", "received"}});
  b.Counter("aggregator_bytes_total", bytes, counters_.bytes_sent, {{"peer", "workers"}, {"direction", "sent"}});
  b.Counter("aggregator_bytes_total", bytes, counters_.bytes_received,
            {{"peer", "workers"}, {"direction", "received"}});
  const char* unauthorized =
      "Secured jobs: worker messages refused because their connection's CURVE key is not the sender's, and "
      "connections refused at the handshake (a key that is not one of the region's workers').";
  b.Counter("aggregator_unauthorized_total", unauthorized, counts_.unauthorized, {{"stage", "message"}});
  b.Counter("aggregator_unauthorized_total", unauthorized, zap_ ? zap_->refused() : 0, {{"stage", "handshake"}});
  b.Gauge("aggregator_open_clocks", "Clocks the aggregator holds pushes of, not yet acknowledged by the shards.",
          static_cast<double>(sums_->open_clocks() + sums_->forwards_in_flight()));
  return b.Take();
}

void Aggregator::WriteStats(bool final) {
  if (metrics_.serving()) metrics_.Publish(Metrics());
  if (options_.stats_file.empty()) return;
  const nlohmann::json j = {{"region", options_.job.regions[static_cast<size_t>(options_.region)].name},
                            {"final", final},
                            {"pushes_taken", counts_.pushes_taken},
                            {"pushes_refused", counts_.pushes_refused},
                            {"unauthorized", counts_.unauthorized},
                            {"connections_refused", zap_ ? zap_->refused() : 0},
                            {"clocks_forwarded", counts_.clocks_forwarded},
                            {"late_forwards", counts_.late_forwards},
                            {"pulls_served", counts_.pulls_served},
                            {"upstream_pulls", counts_.upstream_pulls},
                            {"upstream_bytes_sent", upstream_counters_.bytes_sent.load()},
                            {"upstream_bytes_received", upstream_counters_.bytes_received.load()},
                            {"workers_bytes_sent", counters_.bytes_sent.load()},
                            {"workers_bytes_received", counters_.bytes_received.load()}};
  if (Status s = WriteFileAtomic(options_.stats_file, j.dump(2) + "\n", /*durable=*/false); !s.ok())
    GD_LOG(WARNING) << s;
}

Status RunAggregator(const AggregatorOptions& options, zmq::context_t& ctx, const std::atomic<bool>* stop) {
  Aggregator a(options, ctx, RealClock::Get());
  Status s = a.Run(stop);
  a.Linger(s.ok());
  return s;
}

}  // namespace geodesic::aggregator
