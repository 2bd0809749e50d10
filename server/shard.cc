#include "server/shard.h"

#include <algorithm>
#include <cstring>

#include "common/log.h"

namespace geodesic::server {

ShardState::ShardState(ShardOptions options, ChunkLayout layout, std::vector<uint32_t> owned)
    : options_(std::move(options)), layout_(layout), owned_(std::move(owned)) {
  std::sort(owned_.begin(), owned_.end());
  index_.assign(layout_.num_chunks(), -1);
  chunks_.resize(owned_.size());
  for (size_t i = 0; i < owned_.size(); ++i) {
    GD_CHECK(owned_[i] < layout_.num_chunks()) << "chunk " << owned_[i] << " outside the layout";
    index_[owned_[i]] = static_cast<int32_t>(i);
    Chunk& c = chunks_[i];
    c.id = owned_[i];
    c.size = layout_.Size(c.id);
    c.optimizer = MakeChunkOptimizer(options_.optimizer, c.size);
  }
  uninitialized_ = chunks_.size();
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

ShardState::PushOutcome ShardState::Push(int worker, int64_t clock, uint32_t id, uint64_t base_version,
                                         const float* grad, int live_workers) {
  Chunk& c = chunk(id);
  PushOutcome out;
  if (worker < 0) worker = 0;
  if (c.last_clock.size() <= static_cast<size_t>(worker)) c.last_clock.resize(worker + 1, -1);
  if (clock <= c.last_clock[worker]) {
    ++duplicates_;
    out.result = wire::DUPLICATE;
    return out;
  }
  c.last_clock[worker] = clock;

  if (options_.staleness_bound == 0) {
    if (clock <= c.closed_through) {
      ++dropped_;
      out.result = wire::STALE_DROPPED;
    } else {
      Round& r = c.rounds[clock];
      if (r.sum.empty()) {
        r.sum.assign(grad, grad + c.size);
      } else {
        float* s = r.sum.data();
        for (uint64_t i = 0; i < c.size; ++i) s[i] += grad[i];
      }
      r.contributors.emplace_back(worker, base_version);
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

  size_t& received = pending_[{worker, clock}];
  if (++received == chunks_.size()) {
    pending_.erase({worker, clock});
    out.clock_completed = true;
  }
  return out;
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
  return true;
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
      Round& r = it->second;
      float scale = 1.0f / static_cast<float>(r.contributors.size());
      for (const auto& [w, base] : r.contributors)
        staleness_.Add(c.version >= base ? static_cast<int64_t>(c.version - base) : 0);
      float lr = static_cast<float>(LearningRateFactor(options_.optimizer, it->first, options_.total_clocks));
      Apply(c, r.sum.data(), scale, lr, 0);
      c.closed_through = it->first;
      c.rounds.erase(it);
      ++applied;
    }
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

ShardState::Snapshot ShardState::Read(uint32_t id) const {
  const Chunk& c = chunk(id);
  return {c.params, c.version};
}

}  // namespace geodesic::server
