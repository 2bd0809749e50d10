#include "server/requests.h"

#include <cmath>
#include <set>
#include <vector>

#include "common/range_pool.h"
#include "compression/codec.h"

namespace geodesic::server {
namespace {

// Values that are not finite or beyond kMaxValueMagnitude: how many, and
// the first one's index.
size_t CountRange(const float* v, size_t b, size_t e) {
  size_t bad = 0;
  for (size_t i = b; i < e; ++i) bad += !(std::fabs(v[i]) <= kMaxValueMagnitude);
  return bad;
}

// The same count, copying each value to `dst` as it is read.
size_t CopyCountRange(const float* __restrict v, float* __restrict dst, size_t b, size_t e) {
  size_t bad = 0;
  for (size_t i = b; i < e; ++i) {
    const float x = v[i];
    dst[i] = x;
    bad += !(std::fabs(x) <= kMaxValueMagnitude);
  }
  return bad;
}

size_t CountUnusable(RangePool* pool, const float* v, uint64_t n, uint64_t* first, float* copy_to) {
  // A branch-free count (NaN fails the comparison too) so that the loop
  // vectorizes: a store of the first index inside it kept the compiler to
  // one value at a time, as slow as the optimizer step itself (perf,
  // docs/benchmarks.md). The index is searched only when something failed.
  auto count = [&](size_t b, size_t e) { return copy_to ? CopyCountRange(v, copy_to, b, e) : CountRange(v, b, e); };
  size_t bad = 0;
  if (pool && pool->Pieces(n) > 1) {
    std::vector<size_t> counts(pool->threads(), 0);  // one per piece, summed after
    pool->Run(n, [&](int piece, size_t b, size_t e) { counts[piece] = count(b, e); });
    for (size_t c : counts) bad += c;
  } else {
    bad = count(0, n);
  }
  if (bad == 0) return 0;
  for (uint64_t i = 0; i < n; ++i)
    if (!(std::fabs(v[i]) <= kMaxValueMagnitude)) {
      *first = i;
      break;
    }
  return bad;
}

Handled Refused(wire::Refusal reason, Status status) {
  Handled h;
  h.reason = reason;
  h.status = std::move(status);
  return h;
}

// A described chunk: in the layout, owned here, named once in its request
// (`seen`), with the layout's size.
Status CheckChunk(const ShardState& shard, int server_id, const wire::ChunkData& c, std::set<uint32_t>* seen,
                  wire::Refusal* reason) {
  const std::string name = "chunk " + std::to_string(c.chunk_id());
  if (c.chunk_id() >= shard.layout().num_chunks()) {
    *reason = wire::REFUSAL_CHUNK_OUT_OF_RANGE;
    return OutOfRange(name + " does not exist (the model has " + std::to_string(shard.layout().num_chunks()) +
                      " chunks)");
  }
  if (!shard.Owns(c.chunk_id())) {
    *reason = wire::REFUSAL_CHUNK_NOT_OWNED;
    return OutOfRange(name + " is not owned by server " + std::to_string(server_id));
  }
  if (!seen->insert(c.chunk_id()).second) {
    *reason = wire::REFUSAL_DUPLICATE_CHUNK;
    return InvalidArgument(name + " appears twice");
  }
  const uint64_t expected = shard.layout().Size(c.chunk_id());
  if (c.num_elems() != expected) {
    *reason = wire::REFUSAL_WRONG_SHAPE;
    return InvalidArgument(name + " has " + std::to_string(expected) + " values, message says " +
                           std::to_string(c.num_elems()));
  }
  return Status::Ok();
}

}  // namespace

Status RequestDecoder::ValidateChunks(const ShardState& shard, int server_id, const transport::Message& m,
                                      const google::protobuf::RepeatedPtrField<wire::ChunkData>& chunks,
                                      wire::Refusal* reason, std::vector<const float*>* values, bool keep) {
  values->clear();
  kept_.clear();  // what the last message's pushes did not take
  if (static_cast<size_t>(chunks.size()) != m.frames.size()) {
    *reason = wire::REFUSAL_FRAME_COUNT;
    return InvalidArgument(std::to_string(chunks.size()) + " chunks described but " + std::to_string(m.frames.size()) +
                           " payload frames");
  }
  std::set<uint32_t> seen;
  for (int i = 0; i < chunks.size(); ++i) {
    const wire::ChunkData& c = chunks[i];
    const std::string name = "chunk " + std::to_string(c.chunk_id());
    GD_RETURN_IF_ERROR(CheckChunk(shard, server_id, c, &seen, reason));
    if (c.delta()) {
      *reason = wire::REFUSAL_BAD_PAYLOAD;
      return InvalidArgument(name + ": only pull replies carry deltas");
    }
    const compression::PayloadInfo info = compression::PayloadInfo::FromWire(c);
    const zmq::message_t& frame = m.frames[i];
    Status s = compression::CheckPayloadSize(info, c.num_elems(), frame.size());
    if (!s.ok()) {
      *reason = compression::MaxEncodedBytes(info, c.num_elems()) == 0 ? wire::REFUSAL_UNKNOWN_CODEC
                                                                       : wire::REFUSAL_BAD_PAYLOAD_SIZE;
      return s.Annotate(name);
    }
    const float* v = nullptr;
    float* copy_to = nullptr;
    GD_RETURN_IF_ERROR(ChunkValues(m, i, c, name, keep, &v, &copy_to, reason));
    uint64_t first = 0;
    if (size_t bad = CountUnusable(shard.pool(), v, c.num_elems(), &first, copy_to)) {
      const bool finite = std::isfinite(v[first]);
      *reason = finite ? wire::REFUSAL_VALUE_TOO_LARGE : wire::REFUSAL_NON_FINITE;
      // The count takes both kinds together; the reason follows the first.
      return InvalidArgument(name + " holds " + std::to_string(bad) + " values that are not finite or beyond +-1e18" +
                             " (first at index " + std::to_string(first) + ": " + std::to_string(v[first]) + ")");
    }
    values->push_back(copy_to ? copy_to : v);
  }
  return Status::Ok();
}

Status RequestDecoder::ChunkValues(const transport::Message& m, int i, const wire::ChunkData& c,
                                   const std::string& name, bool keep, const float** v, float** copy_to,
                                   wire::Refusal* reason) {
  const size_t at = static_cast<size_t>(i);
  if (decoded_.size() <= at) decoded_.resize(at + 1);
  if (keep) {
    kept_.resize(at + 1);
    kept_[at].reset(new float[c.num_elems()]);  // not zeroed: every value is written before it is read
  }
  float* own = keep ? kept_[at].get() : nullptr;
  const compression::PayloadInfo info = compression::PayloadInfo::FromWire(c);
  if (info.codec == wire::FP32 && !info.zstd) {
    *v = m.FrameFloats(at, &decoded_[at]);  // in place unless misaligned
    *copy_to = own;
    return Status::Ok();
  }
  float* out = own;
  if (!out) {
    decoded_[at].resize(c.num_elems());
    out = decoded_[at].data();
  }
  // Decoding validates the payload, finite values included.
  const zmq::message_t& frame = m.frames[at];
  Status s = compression::Decode(info, frame.data(), frame.size(), c.num_elems(), out, &zstd_scratch_);
  if (!s.ok()) {
    *reason = s.detail() == Detail::kNonFinite ? wire::REFUSAL_NON_FINITE : wire::REFUSAL_BAD_PAYLOAD;
    return s.Annotate(name + " (" + compression::CodecName(info.codec) + ")");
  }
  *v = out;
  return Status::Ok();
}

Status CheckMember(const ShardContext& ctx, const wire::Header& h, wire::Refusal* reason) {
  const int id = h.sender_id();
  *reason = wire::REFUSAL_BAD_SENDER;
  switch (h.sender_role()) {
    case wire::WORKER:
      if (id >= 0 && id < ctx.num_workers) break;
      return PermissionDenied("worker " + std::to_string(id) + " is not in this job (workers 0.." +
                              std::to_string(ctx.num_workers - 1) + ")");
    case wire::EVALUATOR:
      if (id == kEvaluatorId) break;
      return PermissionDenied("evaluator " + std::to_string(id) + " is not in this job (its evaluator is " +
                              std::to_string(kEvaluatorId) + ")");
    case wire::AGGREGATOR:
      if (id >= 0 && id < ctx.num_regions) break;
      return PermissionDenied("aggregator " + std::to_string(id) + " is not in this job (regions 0.." +
                              std::to_string(ctx.num_regions - 1) + ")");
    default:
      break;  // the body's own check says which roles may send it
  }
  *reason = wire::REFUSAL_UNSPECIFIED;
  return Status::Ok();
}

Status CheckClock(const ShardContext& ctx, int64_t clock, bool inclusive, wire::Refusal* reason) {
  *reason = wire::REFUSAL_BAD_CLOCK;
  if (clock < 0) return InvalidArgument("negative clock " + std::to_string(clock));
  if (clock >= kMaxClock) return InvalidArgument("clock " + std::to_string(clock) + " is beyond any job (2^48)");
  if (ctx.total_clocks > 0 && (inclusive ? clock > ctx.total_clocks : clock >= ctx.total_clocks))
    return OutOfRange("clock " + std::to_string(clock) + " is beyond this job's " + std::to_string(ctx.total_clocks) +
                      " clocks");
  *reason = wire::REFUSAL_UNSPECIFIED;
  return Status::Ok();
}

Status CheckPushWindow(const ShardContext& ctx, int worker, int64_t clock, wire::Refusal* reason) {
  const ClockTable& t = *ctx.clocks;
  // From the highest minimum the live set has reached, not today's: a
  // worker that rejoins is seeded at the coordinator's view of the live
  // clock, which lags the others' pushes here by up to hundreds of clocks.
  const int64_t slowest = t.Frontier();
  if (slowest == ClockTable::kNoWorkers) return Status::Ok();  // no live set yet: nothing to measure from
  // Fully asynchronous: from the sender's own clock here, or the slowest
  // live worker's if that is later (a worker that rejoins at the live clock).
  const bool bounded = t.bound() < kUnboundedStaleness;
  const int64_t from = bounded ? slowest + t.bound() : std::max(slowest, t.ClockOf(worker));
  if (clock - from <= kPushWindow) return Status::Ok();
  *reason = wire::REFUSAL_BAD_CLOCK;
  return OutOfRange(
      "clock " + std::to_string(clock) + " is beyond the live window (" +
      (bounded ? "live workers at clock " + std::to_string(slowest) + ", staleness bound " + std::to_string(t.bound())
               : "worker " + std::to_string(worker) + " at clock " + std::to_string(from)) +
      ", at most " + std::to_string(kPushWindow) + " clocks ahead)");
}

namespace {

// An init or init offer passes this first: from a worker of the job.
Handled InitSender(const ShardContext& ctx, const transport::Message& m, const char* what) {
  if (m.header.sender_role() != wire::WORKER)
    return Refused(wire::REFUSAL_BAD_SENDER, InvalidArgument(std::string("only workers ") + what));
  Handled h;
  h.status = CheckMember(ctx, m.header, &h.reason);
  return h;
}

}  // namespace

Handled ApplyInit(const ShardContext& ctx, const transport::Message& m) {
  const auto& req = m.header.init_request();
  Handled h = InitSender(ctx, m, "send initial values");
  if (!h.status.ok()) return h;
  h.reply.set_request_id(m.header.request_id());
  auto* ack = h.reply.mutable_init_ack();
  if (req.offer()) return h;  // replicated for its order only (ApplyInitOffer answers it)
  std::vector<const float*> values;
  h.status = ctx.decoder->ValidateChunks(*ctx.shard, ctx.server_id, m, req.chunks(), &h.reason, &values);
  if (!h.status.ok()) return h;
  for (int i = 0; i < req.chunks_size(); ++i) {
    const uint32_t c = req.chunks(i).chunk_id();
    if (ctx.shard->Init(c, values[i]))
      ack->set_accepted_chunks(ack->accepted_chunks() + 1);
    else
      ack->set_ignored_chunks(ack->ignored_chunks() + 1);
    if (ctx.shard->HoldsInitial(c, values[i])) ack->add_held_chunks(c);
  }
  return h;
}

Handled ApplyInitOffer(const ShardContext& ctx, InitOffers& offers, const transport::Message& m, TimePoint now) {
  const auto& req = m.header.init_request();
  Handled h = InitSender(ctx, m, "offer initial values");
  if (!h.status.ok()) return h;
  if (!m.frames.empty())
    return Refused(wire::REFUSAL_FRAME_COUNT,
                   InvalidArgument("an init offer carries no payloads, this one " + std::to_string(m.frames.size())));
  if (req.digests_size() != req.chunks_size())
    return Refused(wire::REFUSAL_BAD_PAYLOAD,
                   InvalidArgument("an init offer names " + std::to_string(req.chunks_size()) + " chunks and " +
                                   std::to_string(req.digests_size()) + " digests"));
  std::set<uint32_t> seen;
  for (const wire::ChunkData& c : req.chunks())
    if (Status s = CheckChunk(*ctx.shard, ctx.server_id, c, &seen, &h.reason); !s.ok())
      return Refused(h.reason, s.Annotate("init offer of worker " + std::to_string(m.header.sender_id())));
  h.reply.set_request_id(m.header.request_id());
  offers.Answer(*ctx.shard, m.header.sender_id(), req, now, h.reply.mutable_init_ack());
  return h;
}

namespace {

void CountChunk(wire::PushResult result, wire::PushAck* ack) {
  switch (result) {
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
}

void SetResult(wire::PushAck* ack) {
  ack->set_result(ack->applied_chunks()     ? wire::APPLIED
                  : ack->duplicate_chunks() ? wire::DUPLICATE
                                            : wire::STALE_DROPPED);
}

// The chunks a skipped push names: each in the layout, owned here, named
// once, with the layout's size, and no payload frames.
Status SkippedChunks(const ShardState& shard, int server_id, const transport::Message& m,
                     const google::protobuf::RepeatedPtrField<wire::ChunkData>& chunks, wire::Refusal* reason,
                     std::vector<uint32_t>* ids) {
  if (!m.frames.empty()) {
    *reason = wire::REFUSAL_FRAME_COUNT;
    return InvalidArgument("a skipped push carries no payloads, this one " + std::to_string(m.frames.size()));
  }
  std::set<uint32_t> seen;
  for (const wire::ChunkData& c : chunks) {
    GD_RETURN_IF_ERROR(CheckChunk(shard, server_id, c, &seen, reason));
    ids->push_back(c.chunk_id());
  }
  return Status::Ok();
}

// The checks of a combined push before its chunks: see ApplyPush.
Status CheckCombined(const ShardContext& ctx, const transport::Message& m, wire::Refusal* reason) {
  const auto& req = m.header.push_request();
  const int region = m.header.sender_id();
  *reason = wire::REFUSAL_BAD_SENDER;
  if (region < 0 || region >= ctx.num_regions)
    return PermissionDenied("aggregator " + std::to_string(region) + " is not in this job (regions 0.." +
                            std::to_string(ctx.num_regions - 1) + ")");
  if (!ctx.shard->HoldsPushes())
    return InvalidArgument("a combined push in a job with a staleness bound (combined pushes are BSP's)");
  if (req.covers().empty()) return InvalidArgument("a combined push covers no workers");
  if (req.skipped() || req.has_unit()) return InvalidArgument("a combined push is neither skipped nor of a data unit");
  GD_RETURN_IF_ERROR(CheckClock(ctx, req.clock(), /*inclusive=*/false, reason));
  *reason = wire::REFUSAL_BAD_SENDER;
  for (int i = 0; i < req.covers_size(); ++i) {
    const int w = req.covers(i);
    if (w < 0 || w >= ctx.num_workers || (i > 0 && w <= req.covers(i - 1)))
      return InvalidArgument("a combined push covers workers in increasing order, each in the job; worker " +
                             std::to_string(w) + " is not");
    if (ctx.shard->RegionOf(w) != region)
      return PermissionDenied("aggregator " + std::to_string(region) + " pushed for worker " + std::to_string(w) +
                              " of region " + std::to_string(ctx.shard->RegionOf(w)));
    GD_RETURN_IF_ERROR(CheckPushWindow(ctx, w, req.clock(), reason));
  }
  *reason = wire::REFUSAL_UNSPECIFIED;
  return Status::Ok();
}

Handled ApplyCombinedPush(const ShardContext& ctx, const transport::Message& m) {
  const auto& req = m.header.push_request();
  Handled h;
  h.status = CheckCombined(ctx, m, &h.reason);
  const std::string what = "combined push of aggregator " + std::to_string(m.header.sender_id()) + " at clock " +
                           std::to_string(req.clock());
  if (!h.status.ok()) return Refused(h.reason, h.status.Annotate(what));
  std::vector<const float*> values;
  h.status = ctx.decoder->ValidateChunks(*ctx.shard, ctx.server_id, m, req.chunks(), &h.reason, &values, true);
  if (!h.status.ok()) return Refused(h.reason, h.status.Annotate(what));
  const std::vector<int> workers(req.covers().begin(), req.covers().end());
  for (const auto& c : req.chunks()) {
    if (!ctx.shard->IsInitialized(c.chunk_id()))
      return Refused(wire::REFUSAL_NOT_INITIALIZED,
                     FailedPrecondition("chunk " + std::to_string(c.chunk_id()) + " has no initial value yet"));
    const size_t taken = ctx.shard->TakenBy(workers, req.clock(), c.chunk_id());
    if (taken > 0 && taken < workers.size())
      return Refused(
          wire::REFUSAL_PARTLY_TAKEN,
          FailedPrecondition(what + ": chunk " + std::to_string(c.chunk_id()) + " took " + std::to_string(taken) +
                             " of its " + std::to_string(workers.size()) + " workers' clocks already"));
  }
  h.reply.set_request_id(m.header.request_id());
  auto* ack = h.reply.mutable_push_ack();
  ack->set_clock(req.clock());
  for (int i = 0; i < req.chunks_size(); ++i) {
    const auto& c = req.chunks(i);
    auto out = ctx.shard->PushCombined(workers, req.clock(), c.chunk_id(), c.version(), ctx.decoder->TakeKept(i));
    CountChunk(out.result, ack);
  }
  SetResult(ack);
  for (int w : workers)
    if (ctx.shard->CompletedClock(w) >= req.clock()) {
      ctx.clocks->Finished(w, req.clock());
      h.completed = true;
    }
  if (h.completed) ctx.shard->CloseRounds(*ctx.clocks);
  return h;
}

}  // namespace

std::vector<int> PushedBy(const wire::Header& h) {
  const auto& covers = h.push_request().covers();
  if (covers.empty()) return {h.sender_id()};
  return {covers.begin(), covers.end()};
}

Handled ApplyPush(const ShardContext& ctx, const transport::Message& m) {
  const auto& req = m.header.push_request();
  const int worker = m.header.sender_id();
  if (m.header.sender_role() == wire::AGGREGATOR) return ApplyCombinedPush(ctx, m);
  if (m.header.sender_role() != wire::WORKER)
    return Refused(wire::REFUSAL_BAD_SENDER, InvalidArgument("only workers and aggregators push"));
  if (!req.covers().empty())
    return Refused(wire::REFUSAL_BAD_SENDER, InvalidArgument("a worker's push covers no other workers"));
  Handled h;
  h.status = CheckMember(ctx, m.header, &h.reason);
  if (h.status.ok()) h.status = CheckClock(ctx, req.clock(), /*inclusive=*/false, &h.reason);
  if (h.status.ok()) h.status = CheckPushWindow(ctx, worker, req.clock(), &h.reason);
  if (!h.status.ok()) return h;
  if (req.has_unit() != (ctx.total_units > 0) || (req.has_unit() && (req.unit() < 0 || req.unit() >= ctx.total_units)))
    return Refused(wire::REFUSAL_BAD_UNIT,
                   InvalidArgument(ctx.total_units == 0 ? "a data unit in a job that is not elastic"
                                   : !req.has_unit()    ? "an elastic job's push names no data unit"
                                                        : "data unit " + std::to_string(req.unit()) +
                                                           " is beyond the job's " + std::to_string(ctx.total_units)));
  h.reply.set_request_id(m.header.request_id());
  auto* ack = h.reply.mutable_push_ack();
  ack->set_clock(req.clock());
  if (req.skipped() && req.chunks_size() > 0) {
    // Some chunks skipped (training.fragments): named, with no payloads.
    std::vector<uint32_t> ids;
    if (Status s = SkippedChunks(*ctx.shard, ctx.server_id, m, req.chunks(), &h.reason, &ids); !s.ok())
      return Refused(h.reason, s.Annotate("skipped push of worker " + std::to_string(worker) + " at clock " +
                                          std::to_string(req.clock())));
    ShardState::PushOutcome out = ctx.shard->SkipChunks(worker, req.clock(), ids);
    h.completed = out.clock_completed;
    ack->set_result(out.result);
  } else if (req.skipped()) {
    if (!m.frames.empty())
      return Refused(wire::REFUSAL_FRAME_COUNT, InvalidArgument("a skipped push carries no payloads"));
    h.completed = ctx.shard->Skip(worker, req.clock());
    ack->set_result(h.completed ? wire::APPLIED : wire::DUPLICATE);
  } else {
    std::vector<const float*> values;
    const bool keep = ctx.shard->HoldsPushes();
    h.status = ctx.decoder->ValidateChunks(*ctx.shard, ctx.server_id, m, req.chunks(), &h.reason, &values, keep);
    if (!h.status.ok()) {
      h.status =
          h.status.Annotate("push of worker " + std::to_string(worker) + " at clock " + std::to_string(req.clock()));
      return h;
    }
    for (const auto& c : req.chunks())
      if (!ctx.shard->IsInitialized(c.chunk_id()))
        return Refused(wire::REFUSAL_NOT_INITIALIZED,
                       FailedPrecondition("chunk " + std::to_string(c.chunk_id()) + " has no initial value yet"));
    for (int i = 0; i < req.chunks_size(); ++i) {
      const auto& c = req.chunks(i);
      const int live = static_cast<int>(ctx.clocks->live().size());
      const int64_t unit = req.has_unit() ? req.unit() : -1;
      auto out =
          keep ? ctx.shard->Push(worker, req.clock(), c.chunk_id(), c.version(), ctx.decoder->TakeKept(i), live, unit)
               : ctx.shard->Push(worker, req.clock(), c.chunk_id(), c.version(), values[i], live, unit);
      CountChunk(out.result, ack);
      if (out.staleness >= 0) ack->add_staleness(out.staleness);
      h.completed |= out.clock_completed;
    }
    SetResult(ack);
  }
  if (h.completed) {
    ctx.clocks->Finished(worker, req.clock());
    ctx.shard->CloseRounds(*ctx.clocks);
  }
  return h;
}

wire::Header ReplicateOp(uint64_t seq, const transport::Message& taken) {
  wire::Header h;
  auto* r = h.mutable_replicate_request();
  r->set_seq(seq);
  r->set_worker(taken.header.sender_id());
  r->set_request_id(taken.header.request_id());
  if (taken.header.has_init_request())
    *r->mutable_init() = taken.header.init_request();
  else
    *r->mutable_push() = taken.header.push_request();
  return h;
}

wire::Header ReplicateMembership(uint64_t seq, const std::vector<int>& live, const std::vector<int64_t>& clocks) {
  wire::Header h;
  auto* r = h.mutable_replicate_request();
  r->set_seq(seq);
  auto* mem = r->mutable_membership();
  mem->mutable_live_workers()->Add(live.begin(), live.end());
  mem->mutable_live_worker_clocks()->Add(clocks.begin(), clocks.end());
  return h;
}

std::vector<transport::Payload> TakeFrames(transport::Message& m) {
  std::vector<transport::Payload> out;
  out.reserve(m.frames.size());
  for (auto& f : m.frames) {
    auto owner = std::make_shared<zmq::message_t>(std::move(f));
    out.push_back(transport::Payload{.data = owner->data(), .size = owner->size(), .owner = owner});
  }
  m.frames.clear();
  return out;
}

Handled ApplyReplicate(const ShardContext& ctx, uint64_t* applied_seq, transport::Message& m) {
  const auto& req = m.header.replicate_request();
  if (m.header.sender_role() != wire::SERVER || m.header.sender_id() != ctx.server_id)
    return Refused(wire::REFUSAL_BAD_SENDER, PermissionDenied("only server " + std::to_string(ctx.server_id) +
                                                              "'s primary replicates to this backup"));
  if (req.seq() == 0) return Refused(wire::REFUSAL_BAD_SEQ, InvalidArgument("replication sequence numbers start at 1"));
  Handled h;
  h.reply.set_request_id(m.header.request_id());
  h.reply.mutable_replicate_ack()->set_seq(req.seq());
  if (req.seq() <= *applied_seq) {
    h.reply.mutable_replicate_ack()->set_seq(*applied_seq);
    return h;  // a duplicate: already applied
  }
  if (req.seq() != *applied_seq + 1)
    return Refused(wire::REFUSAL_REPLICATION_GAP,
                   FailedPrecondition("replication op " + std::to_string(req.seq()) + " after op " +
                                      std::to_string(*applied_seq) + " (ops in between are missing)"));
  switch (req.op_case()) {
    case wire::ReplicateRequest::kInit:
    case wire::ReplicateRequest::kPush: {
      transport::Message inner;
      inner.peer = m.peer;
      inner.header.set_protocol(m.header.protocol());
      inner.header.set_job(m.header.job());
      inner.header.set_sender_role(req.has_push() && !req.push().covers().empty() ? wire::AGGREGATOR : wire::WORKER);
      inner.header.set_sender_id(req.worker());
      inner.header.set_request_id(req.request_id());
      inner.header.set_payload_frames(m.header.payload_frames());
      if (req.has_init())
        *inner.header.mutable_init_request() = req.init();
      else
        *inner.header.mutable_push_request() = req.push();
      inner.frames = std::move(m.frames);
      Handled applied = req.has_init() ? ApplyInit(ctx, inner) : ApplyPush(ctx, inner);
      m.frames = std::move(inner.frames);
      if (!applied.status.ok()) {
        applied.status = applied.status.Annotate("replication op " + std::to_string(req.seq()));
        return applied;
      }
      h.completed = applied.completed;
      if (req.has_push()) h.taken = applied.reply.push_ack().applied_chunks();
      break;
    }
    case wire::ReplicateRequest::kMembership: {
      const auto& mem = req.membership();
      if (!m.frames.empty())
        return Refused(wire::REFUSAL_FRAME_COUNT, InvalidArgument("a membership op carries no frames"));
      if (mem.live_workers_size() != mem.live_worker_clocks_size())
        return Refused(wire::REFUSAL_BAD_MEMBERSHIP,
                       InvalidArgument("live_workers and live_worker_clocks differ in length"));
      std::vector<int> live;
      for (int w : mem.live_workers()) {
        if (w < 0 || w >= ctx.num_workers)
          return Refused(wire::REFUSAL_BAD_MEMBERSHIP,
                         OutOfRange("live worker " + std::to_string(w) + " is not in this job"));
        live.push_back(w);
      }
      for (int64_t c : mem.live_worker_clocks())
        if (c < 0 || c >= kMaxClock)
          return Refused(wire::REFUSAL_BAD_CLOCK, InvalidArgument("live worker clock out of range"));
      ctx.clocks->SetLive(live, {mem.live_worker_clocks().begin(), mem.live_worker_clocks().end()});
      h.completed = ctx.shard->CloseRounds(*ctx.clocks) > 0;
      break;
    }
    default:
      return Refused(wire::REFUSAL_BAD_OP, InvalidArgument("a replication request carries no op"));
  }
  *applied_seq = req.seq();
  return h;
}

Status ValidatePull(const ShardContext& ctx, const transport::Message& m, wire::Refusal* reason,
                    std::vector<uint32_t>* chunks) {
  const ShardState& shard = *ctx.shard;
  const auto& req = m.header.pull_request();
  const wire::Role role = m.header.sender_role();
  chunks->clear();
  *reason = wire::REFUSAL_BAD_SENDER;
  if (role != wire::WORKER && role != wire::EVALUATOR && role != wire::CLIENT && role != wire::AGGREGATOR)
    return InvalidArgument("pulls come from workers, aggregators, the evaluator or tools");
  if (req.final() && (role == wire::WORKER || role == wire::AGGREGATOR))
    return InvalidArgument("workers and aggregators may not skip the staleness bound");
  GD_RETURN_IF_ERROR(CheckMember(ctx, m.header, reason));
  if (!req.final()) GD_RETURN_IF_ERROR(CheckClock(ctx, req.clock(), /*inclusive=*/true, reason));
  *reason = wire::REFUSAL_FRAME_COUNT;
  if (!m.frames.empty()) return InvalidArgument("a pull request carries no payload");
  std::set<uint32_t> seen;
  for (uint32_t c : req.chunk_ids()) {
    if (c >= shard.layout().num_chunks()) {
      *reason = wire::REFUSAL_CHUNK_OUT_OF_RANGE;
      return OutOfRange("chunk " + std::to_string(c) + " does not exist (the model has " +
                        std::to_string(shard.layout().num_chunks()) + " chunks)");
    }
    if (!shard.Owns(c)) {
      *reason = wire::REFUSAL_CHUNK_NOT_OWNED;
      return OutOfRange("chunk " + std::to_string(c) + " is not owned by server " + std::to_string(ctx.server_id));
    }
    if (!seen.insert(c).second) {
      *reason = wire::REFUSAL_DUPLICATE_CHUNK;
      return InvalidArgument("chunk " + std::to_string(c) + " asked twice");
    }
    chunks->push_back(c);
  }
  if (chunks->empty()) *chunks = shard.owned();
  *reason = wire::REFUSAL_UNSPECIFIED;
  return Status::Ok();
}

}  // namespace geodesic::server
