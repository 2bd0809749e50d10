#include "server/shard.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "common/bits.h"
#include "common/digest.h"
#include "common/log.h"

namespace geodesic::server {
namespace {

std::unique_ptr<ChunkOptimizer> NewOptimizer(const ShardOptions& o, size_t n, RangePool* pool) {
  return o.strategy ? MakeStrategyOptimizer(*o.strategy, n) : MakeChunkOptimizer(o.optimizer, n, pool);
}

void AddRange(float* __restrict sum, const float* __restrict g, size_t b, size_t e) {
  for (size_t i = b; i < e; ++i) sum[i] += g[i];
}

}  // namespace

ShardState::ShardState(ShardOptions options, cluster::ChunkLayout layout, std::vector<uint32_t> owned)
    : options_(std::move(options)), layout_(layout), owned_(std::move(owned)) {
  if (options_.threads != 1) pool_ = std::make_unique<RangePool>(options_.threads);
  std::sort(owned_.begin(), owned_.end());
  index_.assign(layout_.num_chunks(), -1);
  chunks_.resize(owned_.size());
  for (size_t i = 0; i < owned_.size(); ++i) {
    GD_CHECK(owned_[i] < layout_.num_chunks()) << "chunk " << owned_[i] << " outside the layout";
    index_[owned_[i]] = static_cast<int32_t>(i);
    Chunk& c = chunks_[i];
    c.id = owned_[i];
    c.size = layout_.Size(c.id);
    c.optimizer = NewOptimizer(options_, c.size, pool_.get());
    c.units_taken.assign(options_.total_units, false);
  }
  uninitialized_ = chunks_.size();
  RecountUnits();
}

bool ShardState::Init(uint32_t id, const float* values) {
  Chunk& c = chunk(id);
  if (c.initialized) return false;
  c.params = std::shared_ptr<float[]>(new float[c.size]);
  std::memcpy(c.params.get(), values, c.size * sizeof(float));
  c.initialized = true;
  --uninitialized_;
  return true;
}

bool ShardState::IsInitialized(uint32_t id) const { return chunk(id).initialized; }

bool ShardState::HoldsInitial(uint32_t id, const float* values) const {
  const Chunk& c = chunk(id);
  return c.initialized && c.version == 0 && std::memcmp(c.params.get(), values, c.size * sizeof(float)) == 0;
}

bool ShardState::HoldsInitial(uint32_t id, uint64_t digest) const {
  const Chunk& c = chunk(id);
  return c.initialized && c.version == 0 && ValuesDigest(c.params.get(), c.size) == digest;
}

void ShardState::Apply(Chunk& c, const float* grad, float grad_scale, float lr_scale, int per_clock) {
  float* in = c.params.get();
  float* out = in;
  std::shared_ptr<float[]> fresh;
  if (c.params.use_count() > 1) {
    // A pull reply still references the current buffer: write a new one.
    fresh.reset(new float[c.size]);
    out = fresh.get();
  }
  if (per_clock == 0)
    c.optimizer->Step(in, out, grad, c.size, grad_scale, lr_scale);
  else
    c.optimizer->StepAsync(in, out, grad, c.size, grad_scale, lr_scale, per_clock);
  if (fresh) c.params = std::move(fresh);
  ++c.version;
  ++updates_applied_;
}

ShardState::PushOutcome ShardState::TakePush(int worker, int64_t clock, uint32_t id, uint64_t base_version,
                                             const float* grad, std::unique_ptr<float[]>* owned, int live_workers,
                                             int64_t unit) {
  Chunk& c = chunk(id);
  PushOutcome out;
  if (worker < 0) worker = 0;
  if (c.last_clock.size() <= static_cast<size_t>(worker)) c.last_clock.resize(worker + 1, -1);
  const bool unit_taken = unit >= 0 && unit < static_cast<int64_t>(c.units_taken.size()) && c.units_taken[unit];
  if (clock <= c.last_clock[worker] || unit_taken) {
    ++duplicates_;
    if (unit_taken && clock > c.last_clock[worker]) ++unit_duplicates_;
    c.last_clock[worker] = std::max(c.last_clock[worker], clock);
    out.result = wire::DUPLICATE;
    out.clock_completed = MarkReceived(worker, clock, id);
    return out;
  }
  c.last_clock[worker] = clock;
  if (unit >= 0 && unit < static_cast<int64_t>(c.units_taken.size())) {
    c.units_taken[unit] = true;  // it was not: unit_taken above
    units_complete_ += ++unit_chunks_[unit] == static_cast<int32_t>(chunks_.size());
  }

  if (options_.staleness_bound == 0) {
    if (clock <= c.closed_through) {
      ++dropped_;
      out.result = wire::STALE_DROPPED;
    } else {
      std::unique_ptr<float[]> kept = owned && *owned ? std::move(*owned) : nullptr;
      if (!kept) {
        kept.reset(new float[c.size]);
        std::memcpy(kept.get(), grad, c.size * sizeof(float));
      }
      c.rounds[clock].contributions.push_back(
          {.worker = worker, .region = RegionOf(worker), .base_version = base_version, .grad = std::move(kept)});
    }
  } else {
    int64_t tau = c.version >= base_version ? static_cast<int64_t>(c.version - base_version) : 0;
    float scale = options_.staleness_scaling ? 1.0f / static_cast<float>(tau + 1) : 1.0f;
    bool scale_grad = c.optimizer->ScalesGradientForStaleness();
    float lr = static_cast<float>(LearningRateFactor(options_.optimizer, clock, options_.total_clocks));
    Apply(c, grad, scale_grad ? scale : 1.0f, lr * (scale_grad ? 1.0f : scale), std::max(1, live_workers));
    staleness_.Add(tau);
    out.staleness = tau;
  }

  out.clock_completed = MarkReceived(worker, clock, id);
  return out;
}

ShardState::PushOutcome ShardState::PushCombined(const std::vector<int>& workers, int64_t clock, uint32_t id,
                                                 uint64_t base_version, std::unique_ptr<float[]> sum) {
  Chunk& c = chunk(id);
  PushOutcome out;
  const size_t taken = TakenBy(workers, clock, id);
  if (taken == workers.size()) {
    ++duplicates_;
    out.result = wire::DUPLICATE;
  } else if (taken > 0 || options_.staleness_bound != 0 || clock <= c.closed_through) {
    ++dropped_;
    out.result = wire::STALE_DROPPED;
    if (taken > 0 || options_.staleness_bound != 0) return out;  // the caller refuses these first
  } else {
    c.rounds[clock].contributions.push_back({.worker = workers.front(),
                                             .region = RegionOf(workers.front()),
                                             .weight = static_cast<int>(workers.size()),
                                             .base_version = base_version,
                                             .grad = std::move(sum)});
  }
  for (int w : workers) {
    if (c.last_clock.size() <= static_cast<size_t>(w)) c.last_clock.resize(w + 1, -1);
    c.last_clock[w] = std::max(c.last_clock[w], clock);
    out.clock_completed |= MarkReceived(w, clock, id);
  }
  return out;
}

size_t ShardState::TakenBy(const std::vector<int>& workers, int64_t clock, uint32_t id) const {
  const Chunk& c = chunk(id);
  size_t n = 0;
  for (int w : workers) n += w >= 0 && static_cast<size_t>(w) < c.last_clock.size() && clock <= c.last_clock[w];
  return n;
}

int ShardState::RegionOf(int worker) const {
  const auto& r = options_.worker_regions;
  return worker >= 0 && static_cast<size_t>(worker) < r.size() ? r[worker] : 0;
}

std::pair<float*, int> ShardState::SumRound(Chunk& c, std::vector<Contribution>& parts) {
  std::sort(parts.begin(), parts.end(), [](const Contribution& a, const Contribution& b) {
    return std::pair(a.region, a.worker) < std::pair(b.region, b.worker);
  });
  // Where each region's contributions start; a region's sum builds up in
  // its first contribution's buffer, the round's in the first region's.
  std::vector<size_t> starts;
  int workers = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    if (k == 0 || parts[k].region != parts[k - 1].region) starts.push_back(k);
    workers += parts[k].weight;
  }
  starts.push_back(parts.size());
  ForRanges(pool_.get(), c.size, [&](int, size_t b, size_t e) {
    for (size_t r = 0; r + 1 < starts.size(); ++r)
      for (size_t k = starts[r] + 1; k < starts[r + 1]; ++k)
        AddRange(parts[starts[r]].grad.get(), parts[k].grad.get(), b, e);  // worker order within the region
    for (size_t r = 1; r + 1 < starts.size(); ++r)
      AddRange(parts.front().grad.get(), parts[starts[r]].grad.get(), b, e);  // then region order
  });
  return {parts.front().grad.get(), workers};
}

bool ShardState::MarkReceived(int worker, int64_t clock, uint32_t id) {
  if (completed_.size() <= static_cast<size_t>(worker)) completed_.resize(worker + 1, -1);
  if (clock <= completed_[worker]) return false;
  std::vector<uint32_t>& got = pending_[{worker, clock}];
  if (std::find(got.begin(), got.end(), id) == got.end()) got.push_back(id);
  if (got.size() < chunks_.size()) return false;
  pending_.erase({worker, clock});
  // Clocks complete in order on one shard (a worker pushes clock c + 1 only
  // after c's pushes were sent), but never move this backwards.
  completed_[worker] = std::max(completed_[worker], clock);
  return true;
}

bool ShardState::Skip(int worker, int64_t clock) {
  if (worker < 0) worker = 0;
  bool any = false;
  for (Chunk& c : chunks_) {
    if (c.last_clock.size() <= static_cast<size_t>(worker)) c.last_clock.resize(worker + 1, -1);
    if (clock <= c.last_clock[worker]) continue;
    c.last_clock[worker] = clock;
    any = true;
  }
  if (!any) {
    ++duplicates_;
    return false;
  }
  pending_.erase({worker, clock});
  if (completed_.size() <= static_cast<size_t>(worker)) completed_.resize(worker + 1, -1);
  completed_[worker] = std::max(completed_[worker], clock);
  return true;
}

ShardState::PushOutcome ShardState::SkipChunks(int worker, int64_t clock, const std::vector<uint32_t>& ids) {
  if (worker < 0) worker = 0;
  PushOutcome out;
  out.result = wire::DUPLICATE;
  for (uint32_t id : ids) {
    Chunk& c = chunk(id);
    if (c.last_clock.size() <= static_cast<size_t>(worker)) c.last_clock.resize(worker + 1, -1);
    if (clock > c.last_clock[worker]) {
      c.last_clock[worker] = clock;
      out.result = wire::APPLIED;
    }
    out.clock_completed |= MarkReceived(worker, clock, id);
  }
  if (out.result == wire::DUPLICATE) ++duplicates_;
  return out;
}

int ShardState::CloseRounds(const ClockTable& clocks) {
  if (options_.staleness_bound != 0) return 0;
  int64_t min_clock = clocks.MinClock();
  int applied = 0;
  for (Chunk& c : chunks_) {
    while (!c.rounds.empty()) {
      auto it = c.rounds.begin();
      // A round closes once every live worker has finished its clock; with no
      // live worker left, whatever arrived is applied.
      if (min_clock != ClockTable::kNoWorkers && min_clock <= it->first) break;
      auto [sum, workers] = SumRound(c, it->second.contributions);
      float scale = 1.0f / static_cast<float>(workers);
      for (const Contribution& p : it->second.contributions)
        staleness_.Add(c.version >= p.base_version ? static_cast<int64_t>(c.version - p.base_version) : 0, p.weight);
      float lr = static_cast<float>(LearningRateFactor(options_.optimizer, it->first, options_.total_clocks));
      Apply(c, sum, scale, lr, 0);
      c.closed_through = it->first;
      c.rounds.erase(it);
      ++applied;
    }
    // Clocks every live worker finished without pushing this chunk (skipped
    // steps, other fragments' clocks) are closed too, so that the
    // checkpoint clock does not lag behind them.
    if (min_clock != ClockTable::kNoWorkers && (c.rounds.empty() || c.rounds.begin()->first >= min_clock))
      c.closed_through = std::max(c.closed_through, min_clock - 1);
  }
  return applied;
}

int64_t ShardState::LastClock(int worker, uint32_t id) const {
  const Chunk& c = chunk(id);
  if (worker < 0 || static_cast<size_t>(worker) >= c.last_clock.size()) return -1;
  return c.last_clock[worker];
}

bool ShardState::HasOpenRounds() const {
  for (const Chunk& c : chunks_)
    if (!c.rounds.empty()) return true;
  return false;
}

int64_t ShardState::CompletedClock(int worker) const {
  if (worker < 0 || static_cast<size_t>(worker) >= completed_.size()) return -1;
  return completed_[worker];
}

int64_t ShardState::CheckpointClock(int64_t min_live_clock) const {
  if (options_.staleness_bound != 0) return min_live_clock == ClockTable::kNoWorkers ? 0 : min_live_clock;
  int64_t clock = std::numeric_limits<int64_t>::max();
  for (const Chunk& c : chunks_) clock = std::min(clock, c.closed_through + 1);
  return chunks_.empty() ? 0 : clock;
}

void ShardState::SaveChunk(const Chunk& c, wire::ChunkCheckpoint* out) const {
  const bool bsp = options_.staleness_bound == 0;
  out->set_chunk_id(c.id);
  out->set_num_elems(c.size);
  out->set_version(c.version);
  out->set_closed_through(c.closed_through);
  // BSP: pushes held in open rounds are not saved, so the chunk has taken
  // exactly the clocks through closed_through from every worker.
  for (int64_t lc : c.last_clock) out->add_last_clock(bsp ? std::min(lc, c.closed_through) : lc);
  out->set_params(reinterpret_cast<const char*>(c.params.get()), c.size * sizeof(float));
  ChunkOptimizer::State st = c.optimizer->Save();
  for (int64_t v : st.counters) out->add_optimizer_counters(v);
  for (const auto& a : st.arrays) out->add_optimizer_arrays(reinterpret_cast<const char*>(a.data()), a.size() * 4);
  if (!c.units_taken.empty()) out->set_units_taken(PackBits(c.units_taken));
}

Status ShardState::TakeUnits(const wire::ChunkCheckpoint& in, Chunk* c, const std::string& where) const {
  if (options_.total_units == 0) return Status::Ok();
  if (in.units_taken().empty()) {  // a checkpoint of the job before it was elastic: nothing taken yet
    c->units_taken.assign(options_.total_units, false);
    return Status::Ok();
  }
  auto bits = UnpackBits(in.units_taken(), options_.total_units);
  if (!bits.ok()) return bits.status().Annotate(where + ": data units");
  c->units_taken = std::move(*bits);
  return Status::Ok();
}

StatusOr<ChunkOptimizer::State> ShardState::CheckChunk(const wire::ChunkCheckpoint& in, uint64_t size,
                                                       const std::string& where) const {
  if (in.num_elems() != size || in.params().size() != size * sizeof(float))
    return DataLoss(where + ": " + std::to_string(in.params().size()) + " bytes of values, expected " +
                    std::to_string(size * sizeof(float)));
  ChunkOptimizer::State st;
  st.counters.assign(in.optimizer_counters().begin(), in.optimizer_counters().end());
  for (const std::string& a : in.optimizer_arrays()) {
    if (a.size() % sizeof(float) != 0)
      return DataLoss(where + ": optimizer array of " + std::to_string(a.size()) + " bytes is not float32");
    std::vector<float> v(a.size() / sizeof(float));
    if (!a.empty()) std::memcpy(v.data(), a.data(), a.size());  // an empty vector's data() may be null
    st.arrays.push_back(std::move(v));
  }
  auto probe = NewOptimizer(options_, size, pool_.get());
  if (!probe->Load(st))
    return DataLoss(where + ": optimizer state does not fit a " + ToString(options_.optimizer.name) + " optimizer of " +
                    std::to_string(size) + " values");
  return st;
}

StatusOr<wire::ChunkCheckpoint> ShardState::ExportChunk(uint32_t id) const {
  if (!Owns(id)) return FailedPrecondition("chunk " + std::to_string(id) + " is not owned here");
  const Chunk& c = chunk(id);
  if (!c.initialized) return FailedPrecondition("chunk " + std::to_string(id) + " has no values yet");
  if (!c.rounds.empty())
    return FailedPrecondition("chunk " + std::to_string(id) + " has " + std::to_string(c.rounds.size()) +
                              " open round(s) from clock " + std::to_string(c.rounds.begin()->first));
  wire::ChunkCheckpoint out;
  SaveChunk(c, &out);
  return out;
}

Status ShardState::AdoptChunk(const wire::ChunkCheckpoint& in) {
  const uint32_t id = in.chunk_id();
  if (id >= layout_.num_chunks()) return InvalidArgument("chunk " + std::to_string(id) + " is outside the layout");
  if (Owns(id)) return FailedPrecondition("chunk " + std::to_string(id) + " is already owned here");
  const uint64_t size = layout_.Size(id);
  GD_ASSIGN_OR_RETURN(ChunkOptimizer::State st, CheckChunk(in, size, "adopted chunk " + std::to_string(id)));
  Chunk c;
  GD_RETURN_IF_ERROR(TakeUnits(in, &c, "adopted chunk " + std::to_string(id)));
  c.id = id;
  c.size = size;
  c.optimizer = NewOptimizer(options_, size, pool_.get());
  GD_CHECK(c.optimizer->Load(st)) << "optimizer state checked above";
  c.params = std::shared_ptr<float[]>(new float[size]);
  std::memcpy(c.params.get(), in.params().data(), size * sizeof(float));
  c.initialized = true;
  c.version = in.version();
  c.closed_through = in.closed_through();
  c.last_clock.assign(in.last_clock().begin(), in.last_clock().end());
  chunks_.push_back(std::move(c));
  owned_.push_back(id);
  Reindex();
  return Status::Ok();
}

void ShardState::DropChunk(uint32_t id) {
  if (!Owns(id)) return;
  const int32_t at = index_[id];
  if (!chunks_[at].initialized) --uninitialized_;
  chunks_.erase(chunks_.begin() + at);
  owned_.erase(std::find(owned_.begin(), owned_.end(), id));
  // A half-received clock of a worker no longer waits for this chunk.
  for (auto& [key, got] : pending_) got.erase(std::remove(got.begin(), got.end(), id), got.end());
  Reindex();
}

void ShardState::Reindex() {
  std::sort(chunks_.begin(), chunks_.end(), [](const Chunk& a, const Chunk& b) { return a.id < b.id; });
  std::sort(owned_.begin(), owned_.end());
  index_.assign(layout_.num_chunks(), -1);
  for (size_t i = 0; i < chunks_.size(); ++i) index_[chunks_[i].id] = static_cast<int32_t>(i);
  RecountUnits();
}

void ShardState::RecountUnits() {
  unit_chunks_.assign(options_.total_units, 0);
  units_complete_ = 0;
  if (options_.total_units == 0) return;
  for (const Chunk& c : chunks_)
    for (int64_t u = 0; u < options_.total_units; ++u) unit_chunks_[u] += c.units_taken[u];
  for (int32_t n : unit_chunks_) units_complete_ += !chunks_.empty() && n == static_cast<int32_t>(chunks_.size());
}

wire::ShardCheckpoint ShardState::ToCheckpoint(int64_t min_live_clock) const {
  wire::ShardCheckpoint ck;
  ck.set_shard_id(options_.shard_id);
  ck.set_clock(CheckpointClock(min_live_clock));
  ck.set_optimizer(ToString(options_.optimizer.name));
  ck.set_staleness_bound(options_.staleness_bound);
  ck.set_num_params(layout_.num_params());
  ck.set_chunk_elems(layout_.chunk_elems());
  ck.set_updates_applied(updates_applied_);
  for (const Chunk& c : chunks_) {
    if (!c.initialized) continue;  // nothing to save yet; a resume initializes it again
    SaveChunk(c, ck.add_chunks());
  }
  return ck;
}

StatusOr<size_t> ShardState::Restore(const wire::ShardCheckpoint& ck) {
  if (ck.num_params() != layout_.num_params() || ck.chunk_elems() != layout_.chunk_elems())
    return FailedPrecondition("checkpoint of shard " + std::to_string(ck.shard_id()) + " is of a model with " +
                              std::to_string(ck.num_params()) + " parameters in chunks of " +
                              std::to_string(ck.chunk_elems()) + "; this job has " +
                              std::to_string(layout_.num_params()) + " in chunks of " +
                              std::to_string(layout_.chunk_elems()));
  if (ck.optimizer() != ToString(options_.optimizer.name))
    return FailedPrecondition("checkpoint of shard " + std::to_string(ck.shard_id()) + " holds " + ck.optimizer() +
                              " state; this job runs " + ToString(options_.optimizer.name));
  // Check every owned chunk first, so that a bad one changes nothing.
  std::vector<std::pair<const wire::ChunkCheckpoint*, ChunkOptimizer::State>> take;
  for (const auto& in : ck.chunks()) {
    if (!Owns(in.chunk_id())) continue;
    const Chunk& c = chunk(in.chunk_id());
    std::string where =
        "checkpoint of shard " + std::to_string(ck.shard_id()) + ", chunk " + std::to_string(in.chunk_id());
    GD_ASSIGN_OR_RETURN(ChunkOptimizer::State st, CheckChunk(in, c.size, where));
    Chunk units;
    GD_RETURN_IF_ERROR(TakeUnits(in, &units, where));
    take.emplace_back(&in, std::move(st));
  }
  for (auto& [in, st] : take) {
    Chunk& c = chunk(in->chunk_id());
    c.params = std::shared_ptr<float[]>(new float[c.size]);
    std::memcpy(c.params.get(), in->params().data(), c.size * sizeof(float));
    if (!c.initialized) --uninitialized_;
    c.initialized = true;
    c.version = in->version();
    c.closed_through = in->closed_through();
    c.rounds.clear();
    c.last_clock.assign(in->last_clock().begin(), in->last_clock().end());
    GD_CHECK(TakeUnits(*in, &c, "").ok()) << "units checked above";
    GD_CHECK(c.optimizer->Load(st)) << "optimizer state checked above";
  }
  RecountUnits();
  // Each worker has completed, here, the clocks every owned chunk has taken.
  completed_.clear();
  pending_.clear();
  if (AllInitialized()) {
    size_t workers = 0;
    for (const Chunk& c : chunks_) workers = std::max(workers, c.last_clock.size());
    completed_.assign(workers, std::numeric_limits<int64_t>::max());
    for (const Chunk& c : chunks_)
      for (size_t w = 0; w < workers; ++w)
        completed_[w] = std::min(completed_[w], w < c.last_clock.size() ? c.last_clock[w] : -1);
  }
  if (ck.shard_id() == options_.shard_id) updates_applied_ = ck.updates_applied();
  return take.size();
}

ShardState::Snapshot ShardState::Read(uint32_t id) const {
  const Chunk& c = chunk(id);
  return {c.params, c.version};
}

}  // namespace geodesic::server
