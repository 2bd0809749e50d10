// RangePool: runs one loop over [0, n) as contiguous pieces on several
// threads at once, for the element-wise passes a parameter-server shard
// makes over a chunk (the push check, the optimizer step). The caller runs
// the first piece itself and returns when every piece has returned.
//
// Pieces start at multiples of kAlign elements (64 bytes of floats, so two
// threads never write one cache line) and hold at least `min_piece`
// elements: a short loop runs on the caller alone, as it would without a
// pool. An element-wise pass gives the same bits however it is split.
//
// One caller at a time (the shard's loop thread); `fn` must not throw.
#pragma once

#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"

namespace geodesic {

class RangePool {
 public:
  static constexpr size_t kAlign = 16;
  // Pieces below this many elements (1 MiB of floats) cost more to hand
  // over than they save.
  static constexpr size_t kDefaultMinPiece = size_t{1} << 18;

  // `threads` >= 1 in all, the caller included; 0 means one per core.
  explicit RangePool(int threads);
  ~RangePool();
  RangePool(const RangePool&) = delete;
  RangePool& operator=(const RangePool&) = delete;

  int threads() const { return threads_; }
  // How many pieces Run(n, min_piece, ...) uses: 1 .. threads().
  int Pieces(size_t n, size_t min_piece = kDefaultMinPiece) const;
  // Calls fn(piece, begin, end) for each piece; the pieces cover [0, n) in
  // order, piece 0 first.
  void Run(size_t n, const std::function<void(int, size_t, size_t)>& fn, size_t min_piece = kDefaultMinPiece);

 private:
  void Helper(int index);
  // [begin, end) of `piece` when n elements are cut into pieces of `per`.
  static void Bounds(size_t n, size_t per, int piece, size_t* begin, size_t* end);
  static size_t PerPiece(size_t n, int pieces);

  const int threads_;
  Mutex mu_;
  CondVar start_, done_;
  const std::function<void(int, size_t, size_t)>* fn_ GD_GUARDED_BY(mu_) = nullptr;
  size_t n_ GD_GUARDED_BY(mu_) = 0;
  int pieces_ GD_GUARDED_BY(mu_) = 0;
  size_t per_piece_ GD_GUARDED_BY(mu_) = 0;
  unsigned long generation_ GD_GUARDED_BY(mu_) = 0;
  int running_ GD_GUARDED_BY(mu_) = 0;
  bool stopping_ GD_GUARDED_BY(mu_) = false;
  std::vector<std::thread> helpers_;  // constructor and destructor only
};

// Runs fn(piece, begin, end) over [0, n) on `pool`, or as one piece on the
// caller when pool is null or n is too short to split. Only a split wraps
// fn in a std::function: the optimizer calls this once per update, and on
// one thread it costs nothing (no allocation).
template <typename Fn>
void ForRanges(RangePool* pool, size_t n, Fn&& fn) {
  if (pool && pool->Pieces(n) > 1)
    pool->Run(n, fn);
  else
    fn(0, size_t{0}, n);
}

}  // namespace geodesic
