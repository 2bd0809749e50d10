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
