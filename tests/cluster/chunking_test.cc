#include "cluster/chunking.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace geodesic::cluster {
namespace {

TEST(ChunkLayoutTest, CoversEveryParameterOnce) {
  ChunkLayout l(1000, 300);
  ASSERT_EQ(l.num_chunks(), 4u);
  EXPECT_EQ(l.Begin(3), 900u);
  EXPECT_EQ(l.Size(0), 300u);
  EXPECT_EQ(l.Size(3), 100u);
  EXPECT_EQ(l.Size(4), 0u);
  uint64_t total = 0;
  for (uint32_t c = 0; c < l.num_chunks(); ++c) total += l.Size(c);
  EXPECT_EQ(total, 1000u);
  EXPECT_EQ(ChunkLayout(300, 300).num_chunks(), 1u);
  EXPECT_EQ(ChunkLayout(0, 300).num_chunks(), 0u);
  EXPECT_EQ(ChunkElemsFor(65536), 16384u);
}

TEST(PlacementTest, BalancesBytesAcrossShards) {
  // The reference CNN: 184,586 floats in 64 KiB chunks, over 2 shards.
  ChunkLayout l(184586, 16384);
  ShardMap m = PlaceChunks(l, 2);
  auto bytes = m.BytesPerServer(2);
  uint64_t hi = std::max(bytes[0], bytes[1]), lo = std::min(bytes[0], bytes[1]);
  EXPECT_LE(hi - lo, 16384u * 4);  // at most one chunk apart
  for (int s : {0, 1}) EXPECT_FALSE(m.ChunksOf(s).empty());
}

TEST(PlacementTest, UnevenChunksGoToTheLeastLoadedShard) {
  ChunkLayout l(10, 4);  // sizes 4, 4, 2
  ShardMap m = PlaceChunks(l, 3);
  EXPECT_EQ(m.owner, (std::vector<int32_t>{0, 1, 2}));
  ShardMap one = PlaceChunks(l, 1);
  EXPECT_EQ(one.owner, (std::vector<int32_t>{0, 0, 0}));
}

TEST(ShardMapTest, WireRoundTripAndValidation) {
  ShardMap m = PlaceChunks(ChunkLayout(100, 10), 3);
  auto back = ShardMap::FromWire(m.ToWire(), 3);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->owner, m.owner);
  EXPECT_EQ(back->layout.num_params(), 100u);
  EXPECT_FALSE(ShardMap::FromWire(m.ToWire(), 2).ok());  // names server 2
  wire::ShardMap w = m.ToWire();
  w.add_owner(0);
  EXPECT_FALSE(ShardMap::FromWire(w, 3).ok());  // too many owners
  w.set_chunk_elems(0);
  EXPECT_FALSE(ShardMap::FromWire(w, 3).ok());
}

TEST(FragmentTest, EvenCutsWithoutBlocks) {
  const ChunkLayout layout(100, 10);  // 10 chunks
  EXPECT_EQ(FragmentCuts(layout, 3), (std::vector<uint32_t>{0, 3, 6, 10}));
  EXPECT_EQ(FragmentCuts(layout, 1), (std::vector<uint32_t>{0, 10}));
  const ChunkRange r = FragmentChunks(layout, 3, 2);
  EXPECT_EQ(r.begin, 6u);
  EXPECT_EQ(r.end, 10u);
}

TEST(FragmentTest, AClockSynchronizesItsFragmentAndTheLastClockEverything) {
  const ChunkLayout layout(100, 10);  // 10 chunks
  EXPECT_FALSE(ClockFragment(layout, 1, 0, 8).has_value()) << "no fragments: every chunk";
  auto f = ClockFragment(layout, 3, 4, 8);  // fragment 4 mod 3 = 1
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->begin, 3u);
  EXPECT_EQ(f->end, 6u);
  EXPECT_FALSE(ClockFragment(layout, 3, 7, 8).has_value()) << "the job's last clock: every chunk";
  // From cuts computed once, the same schedule (the aggregator's).
  for (int fragments : {1, 2, 3}) {
    const std::vector<uint32_t> cuts = FragmentCuts(layout, fragments);
    for (int64_t clock = 0; clock < 8; ++clock) {
      auto a = ClockFragment(layout, fragments, clock, 8), b = ClockFragment(cuts, clock, 8);
      ASSERT_EQ(a.has_value(), b.has_value()) << fragments << " " << clock;
      if (a) {
        EXPECT_EQ(std::pair(a->begin, a->end), std::pair(b->begin, b->end)) << fragments << " " << clock;
      }
    }
  }
}

TEST(FragmentTest, CutsFollowTheBlocksToTheNearestChunk) {
  // Blocks start at 0, 14, 38, 61 and 87 of 100 values in chunks of 10: the
  // chunk boundaries nearest to them are 1, 4, 6 and 9.
  const ChunkLayout layout(100, 10, {0, 14, 38, 61, 87});
  // Two fragments: the even cut is 5; boundaries 4 and 6 are as near, the earlier wins.
  EXPECT_EQ(FragmentCuts(layout, 2), (std::vector<uint32_t>{0, 4, 10}));
  // Three: even cuts 3.3 and 6.7 take 4 and 6.
  EXPECT_EQ(FragmentCuts(layout, 3), (std::vector<uint32_t>{0, 4, 6, 10}));
  // Five: every boundary is a cut, each fragment is one block.
  EXPECT_EQ(FragmentCuts(layout, 5), (std::vector<uint32_t>{0, 1, 4, 6, 9, 10}));
  // Six: fewer boundaries than cuts, so even cuts.
  EXPECT_EQ(FragmentCuts(layout, 6), (std::vector<uint32_t>{0, 1, 3, 5, 6, 8, 10}));
}

TEST(FragmentTest, ALaterCutNeverTakesABoundaryAnEarlierOneNeeds) {
  // Boundaries at chunks 1, 2 and 9 of 10, three cuts (4 fragments): the
  // first cut alone would take 2 (nearest to 2.5), leaving one boundary for
  // two cuts; each cut leaves one boundary for each later cut instead.
  const ChunkLayout layout(100, 10, {0, 10, 20, 90});
  EXPECT_EQ(FragmentCuts(layout, 4), (std::vector<uint32_t>{0, 1, 2, 9, 10}));
}

TEST(FragmentTest, BlocksTravelWithTheShardMapAndBadOnesAreRefused) {
  ShardMap m = PlaceChunks(ChunkLayout(100, 10, {0, 14, 38}), 2);
  auto back = ShardMap::FromWire(m.ToWire(), 2);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->layout.blocks(), (std::vector<uint64_t>{0, 14, 38}));
  EXPECT_EQ(FragmentCuts(back->layout, 2), FragmentCuts(m.layout, 2));
  for (const std::vector<uint64_t>& bad : {std::vector<uint64_t>{5, 14}, {0, 14, 14}, {0, 38, 14}, {0, 100}}) {
    wire::ShardMap w = m.ToWire();
    w.clear_block_starts();
    for (uint64_t b : bad) w.add_block_starts(b);
    auto refused = ShardMap::FromWire(w, 2);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().ToString().find("block"), std::string::npos) << refused.status();
  }
}

TEST(BatchChunksTest, FillsEachBatchUpToTheLimitAndSendsAnOversizedChunkAlone) {
  ChunkLayout layout(10, 4);  // chunks of 16, 16 and 8 bytes
  using Batches = std::vector<std::vector<uint32_t>>;
  EXPECT_EQ(BatchChunks(layout, {0, 1, 2}, 32), (Batches{{0, 1}, {2}}));
  EXPECT_EQ(BatchChunks(layout, {0, 1, 2}, 40), (Batches{{0, 1, 2}}));
  EXPECT_EQ(BatchChunks(layout, {2, 0}, 8), (Batches{{2}, {0}}));
  EXPECT_EQ(BatchChunks(layout, {}, 8), Batches{});
}

}  // namespace
}  // namespace geodesic::cluster
