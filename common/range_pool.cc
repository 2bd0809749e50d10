#include "common/range_pool.h"

#include <algorithm>

namespace geodesic {

RangePool::RangePool(int threads)
    : threads_(threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))) {
  for (int i = 1; i < threads_; ++i) helpers_.emplace_back([this, i] { Helper(i); });
}

RangePool::~RangePool() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  start_.SignalAll();
  for (auto& t : helpers_) t.join();
}

size_t RangePool::PerPiece(size_t n, int pieces) {
  size_t per = (n + pieces - 1) / pieces;
  return (per + kAlign - 1) / kAlign * kAlign;
}

void RangePool::Bounds(size_t n, size_t per, int piece, size_t* begin, size_t* end) {
  *begin = std::min(n, per * static_cast<size_t>(piece));
  *end = std::min(n, *begin + per);
}

int RangePool::Pieces(size_t n, size_t min_piece) const {
  const size_t wanted = n / std::max<size_t>(min_piece, 1);
  int pieces = static_cast<int>(std::clamp<size_t>(wanted, 1, static_cast<size_t>(threads_)));
  if (pieces == 1) return 1;
  // Rounding pieces up to kAlign may leave the last ones empty: drop them.
  const size_t per = PerPiece(n, pieces);
  return static_cast<int>((n + per - 1) / per);
}

void RangePool::Run(size_t n, const std::function<void(int, size_t, size_t)>& fn, size_t min_piece) {
  const int pieces = Pieces(n, min_piece);
  if (pieces <= 1) {
    fn(0, 0, n);
    return;
  }
  const size_t per = PerPiece(n, pieces);
  {
    MutexLock lock(mu_);
    fn_ = &fn;
    n_ = n;
    per_piece_ = per;
    pieces_ = pieces;
    running_ = pieces - 1;
    ++generation_;
  }
  start_.SignalAll();
  size_t begin, end;
  Bounds(n, per, 0, &begin, &end);
  fn(0, begin, end);
  MutexLock lock(mu_);
  while (running_ != 0) done_.Wait(mu_);
  fn_ = nullptr;
}

void RangePool::Helper(int index) {
  unsigned long seen = 0;
  MutexLock lock(mu_);
  for (;;) {
    while (!stopping_ && generation_ == seen) start_.Wait(mu_);
    if (stopping_) return;
    seen = generation_;
    if (index >= pieces_) continue;  // fewer pieces than threads this time
    const auto* fn = fn_;
    size_t begin, end;
    Bounds(n_, per_piece_, index, &begin, &end);
    mu_.Unlock();
    (*fn)(index, begin, end);
    mu_.Lock();
    if (--running_ == 0) done_.Signal();
  }
}

}  // namespace geodesic
