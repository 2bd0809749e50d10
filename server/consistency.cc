#include "server/consistency.h"

#include <algorithm>

namespace geodesic::server {

void ClockTable::SetLive(const std::vector<int>& live, const std::vector<int64_t>& known_clocks) {
  Advance();
  std::vector<int> before = live_;
  live_ = live;
  std::sort(live_.begin(), live_.end());
  for (size_t i = 0; i < live.size(); ++i) {
    int64_t seed = i < known_clocks.size() ? known_clocks[i] : 0;
    // A live worker's clock here moves only with its pushes: the
    // coordinator's can run ahead of the pushes this shard has received,
    // and trusting it would close a BSP round before that worker's gradient
    // arrived. A worker never heard from, or one coming back into the live
    // set (it died and rejoined), starts where the coordinator started it;
    // it pushes nothing older.
    auto [it, fresh] = clock_.emplace(live[i], seed);
    if (!fresh && !std::binary_search(before.begin(), before.end(), live[i])) it->second = std::max(it->second, seed);
  }
  Advance();
}

void ClockTable::Advance() {
  const int64_t m = MinClock();
  if (m != kNoWorkers && (frontier_ == kNoWorkers || m > frontier_)) frontier_ = m;
}

void ClockTable::Finished(int worker, int64_t clock) {
  int64_t& c = clock_[worker];
  const int64_t before = c;
  c = std::max(c, clock + 1);
  if (c > before && before <= frontier_) Advance();  // a worker above the frontier cannot raise the minimum
}

int64_t ClockTable::MinClock() const {
  int64_t m = kNoWorkers;
  for (int w : live_) m = std::min(m, ClockOf(w));
  return m;
}

bool ClockTable::CanRead(int64_t clock) const {
  int64_t m = MinClock();
  if (m == kNoWorkers) return true;
  // Written to avoid overflow for huge bounds (fully asynchronous).
  return clock - m <= bound_;
}

int ClockTable::SlowestWorker() const {
  int slowest = -1;
  int64_t m = kNoWorkers;
  for (int w : live_) {
    int64_t c = ClockOf(w);
    if (c < m) m = c, slowest = w;
  }
  return slowest;
}

int64_t ClockTable::ClockOf(int worker) const {
  auto it = clock_.find(worker);
  return it == clock_.end() ? 0 : it->second;
}

bool ClockTable::IsLive(int worker) const { return std::binary_search(live_.begin(), live_.end(), worker); }

}  // namespace geodesic::server
