#include "common/range_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace geodesic {
namespace {

// Runs one loop and records every piece it was cut into.
struct Cut {
  int piece;
  size_t begin, end;
  std::thread::id thread;
  bool operator<(const Cut& o) const { return piece < o.piece; }
};

std::vector<Cut> CutsOf(RangePool& pool, size_t n, size_t min_piece) {
  std::mutex mu;
  std::set<Cut> cuts;
  pool.Run(
      n,
      [&](int piece, size_t b, size_t e) {
        std::lock_guard<std::mutex> lock(mu);
        EXPECT_TRUE(cuts.insert({piece, b, e, std::this_thread::get_id()}).second) << "piece " << piece << " twice";
      },
      min_piece);
  return {cuts.begin(), cuts.end()};
}

TEST(RangePoolTest, PiecesCoverTheRangeOnceInOrderAndAligned) {
  RangePool pool(4);
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{15}, size_t{64}, size_t{100}, size_t{1000}, size_t{4099}, size_t{1} << 20}) {
    std::vector<Cut> cuts = CutsOf(pool, n, 16);
    ASSERT_EQ(static_cast<int>(cuts.size()), pool.Pieces(n, 16)) << n;
    size_t next = 0;
    for (size_t i = 0; i < cuts.size(); ++i) {
      EXPECT_EQ(cuts[i].piece, static_cast<int>(i));
      EXPECT_EQ(cuts[i].begin, next) << "n " << n << " piece " << i;
      EXPECT_LT(cuts[i].begin, std::max<size_t>(cuts[i].end, 1)) << "an empty piece, n " << n;
      if (i + 1 < cuts.size()) {
        EXPECT_EQ(cuts[i].end % RangePool::kAlign, 0u) << "n " << n << " piece " << i;
      }
      next = cuts[i].end;
    }
    EXPECT_EQ(next, n);
  }
}

TEST(RangePoolTest, ShortLoopsStayOnTheCaller) {
  RangePool pool(3);
  EXPECT_EQ(pool.Pieces(RangePool::kDefaultMinPiece), 1);
  EXPECT_EQ(pool.Pieces(2 * RangePool::kDefaultMinPiece - 1), 1);
  EXPECT_EQ(pool.Pieces(2 * RangePool::kDefaultMinPiece), 2);
  EXPECT_EQ(pool.Pieces(100 * RangePool::kDefaultMinPiece), 3);
  std::vector<Cut> cuts = CutsOf(pool, 1000, RangePool::kDefaultMinPiece);
  ASSERT_EQ(cuts.size(), 1u);
  EXPECT_EQ(cuts[0].thread, std::this_thread::get_id());
  EXPECT_EQ(cuts[0].end, 1000u);
}

TEST(RangePoolTest, LongLoopsRunOnSeveralThreads) {
  RangePool pool(3);
  std::vector<Cut> cuts = CutsOf(pool, 3000, 16);
  ASSERT_EQ(cuts.size(), 3u);
  EXPECT_EQ(cuts[0].thread, std::this_thread::get_id()) << "the caller runs the first piece";
  std::set<std::thread::id> threads;
  for (const Cut& c : cuts) threads.insert(c.thread);
  EXPECT_EQ(threads.size(), 3u);
}

TEST(RangePoolTest, ManyRunsOfChangingSizesEachCountEveryElementOnce) {
  // Bounded: 2,000 runs of at most 5,000 elements.
  RangePool pool(4);
  std::vector<std::atomic<int>> hits(5000);
  for (int run = 0; run < 2000; ++run) {
    const size_t n = static_cast<size_t>(run * 37 % 5000);
    pool.Run(
        n,
        [&](int, size_t b, size_t e) {
          for (size_t i = b; i < e; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
        },
        8);
  }
  std::vector<int> expected(5000, 0);
  for (int run = 0; run < 2000; ++run)
    for (size_t i = 0; i < static_cast<size_t>(run * 37 % 5000); ++i) ++expected[i];
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), expected[i]) << "element " << i;
}

TEST(RangePoolTest, OneThreadAndOnePerCore) {
  RangePool one(1);
  EXPECT_EQ(one.threads(), 1);
  EXPECT_EQ(CutsOf(one, 1 << 20, 16).size(), 1u);
  RangePool per_core(0);
  EXPECT_EQ(per_core.threads(), std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
}

TEST(RangePoolTest, ForRangesWithoutAPoolIsOnePiece) {
  int calls = 0;
  ForRanges(nullptr, 1 << 22, [&](int piece, size_t b, size_t e) {
    ++calls;
    EXPECT_EQ(piece, 0);
    EXPECT_EQ(b, 0u);
    EXPECT_EQ(e, size_t{1} << 22);
  });
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace geodesic
