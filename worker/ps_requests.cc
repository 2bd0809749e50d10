#include "worker/ps_requests.h"

#include <algorithm>
#include <limits>

namespace geodesic::worker {

bool PendingPull::Misses(const std::vector<uint32_t>& chunks) const {
  return std::any_of(chunks.begin(), chunks.end(), [&](uint32_t c) { return !got[c]; });
}

PsRequests::PsRequests(transport::RetryPolicy retry) {
  pushes_.set_policy(retry);
  inits_.set_policy(retry);
}

PendingPull& PsRequests::StartPull(int64_t key, int64_t asked_clock, const cluster::ChunkLayout& layout, size_t shards,
                                   const std::optional<cluster::ChunkRange>& only, TimePoint now) {
  PendingPull& p = pulls_[key];
  p = PendingPull{};
  p.clock = key;
  p.asked_clock = asked_clock;
  p.requested = now;
  p.last_progress = now;
  p.got.assign(layout.num_chunks(), false);
  p.remaining = layout.num_chunks();
  if (only) {
    // Chunks outside the range count as arrived: nobody is asked for them.
    for (uint32_t c = 0; c < layout.num_chunks(); ++c) p.got[c] = !only->Contains(c);
    p.remaining = only->end - only->begin;
  }
  p.request_ids.assign(shards, 0);
  return p;
}

PendingPull* PsRequests::FindPull(int64_t key) {
  auto it = pulls_.find(key);
  return it == pulls_.end() ? nullptr : &it->second;
}

PendingPull PsRequests::TakePull(int64_t key) {
  auto it = pulls_.find(key);
  PendingPull p = std::move(it->second);
  pulls_.erase(it);
  return p;
}

std::vector<PendingPull*> PsRequests::StalePulls(TimePoint now) {
  std::vector<PendingPull*> stale;
  for (auto& [key, p] : pulls_) {
    if (p.remaining == 0 || now - p.last_progress < retry().retry_after) continue;
    p.last_progress = now;
    stale.push_back(&p);
  }
  return stale;
}

void PsRequests::FailPullsOf(uint64_t id, const Status& error) {
  for (auto& [key, p] : pulls_)
    for (uint64_t r : p.request_ids)
      if (r == id) p.error = error;
}

size_t PsRequests::UnackedClocks() const {
  std::vector<int64_t> clocks;
  for (const auto& [id, e] : pushes_) clocks.push_back(e.header.push_request().clock());
  std::sort(clocks.begin(), clocks.end());
  return static_cast<size_t>(std::unique(clocks.begin(), clocks.end()) - clocks.begin());
}

int64_t PsRequests::OldestUnackedClock() const {
  int64_t oldest = std::numeric_limits<int64_t>::max();
  for (const auto& [id, e] : pushes_) oldest = std::min(oldest, e.header.push_request().clock());
  return oldest;
}

std::map<size_t, int> PsRequests::UnackedByShard() const {
  std::map<size_t, int> per_shard;
  for (const auto& [id, e] : pushes_) per_shard[static_cast<size_t>(e.dest)]++;
  return per_shard;
}

}  // namespace geodesic::worker
