// Elastic jobs at the shards: each chunk applies each data unit once,
// whichever worker pushes it, and the count of units every chunk has taken
// follows pushes, checkpoints and migrated chunks.
#include <gtest/gtest.h>

#include <vector>

#include "server/shard.h"

namespace geodesic::server {
namespace {

TEST(ElasticShardTest, EachChunkTakesEachUnitOnceFromWhicheverWorkerPushesIt) {
  cluster::ChunkLayout layout(20, 10);
  ShardOptions o;
  o.staleness_bound = 2;
  o.total_units = 5;
  o.optimizer.lr = 1;
  ShardState s(o, layout, {0, 1});
  std::vector<float> zero(10, 0.f), one(10, 1.f);
  ASSERT_TRUE(s.Init(0, zero.data()) && s.Init(1, zero.data()));
  EXPECT_EQ(s.Push(0, 0, 0, 0, one.data(), 2, 3).result, wire::APPLIED);
  // Worker 0 died after this; worker 1 computed unit 3 again.
  EXPECT_EQ(s.Push(1, 4, 0, 0, one.data(), 2, 3).result, wire::DUPLICATE);
  EXPECT_EQ(s.Push(1, 4, 1, 0, one.data(), 2, 3).result, wire::APPLIED);  // chunk 1 had not taken it
  EXPECT_LT(s.Read(0).values[0], 0.f);
  EXPECT_EQ(s.Read(0).values[0], s.Read(1).values[0]);  // one update each
  EXPECT_EQ(s.Read(0).version, 1u);
  EXPECT_EQ(s.unit_duplicates(), 1u);
  EXPECT_EQ(s.UnitsComplete(), 1);
  // The set survives a checkpoint.
  ShardState back(o, layout, {0, 1});
  ASSERT_TRUE(back.Restore(s.ToCheckpoint(0)).ok());
  EXPECT_EQ(back.UnitsComplete(), 1);
  EXPECT_EQ(back.Push(2, 9, 1, 1, one.data(), 2, 3).result, wire::DUPLICATE);
  wire::ShardCheckpoint bad = s.ToCheckpoint(0);
  bad.mutable_chunks(0)->set_units_taken("");
  ASSERT_TRUE(ShardState(o, layout, {0, 1}).Restore(bad).ok());  // none taken
  bad.mutable_chunks(0)->set_units_taken(std::string(1, '\0') + "x");
  ASSERT_TRUE(ShardState(o, layout, {0, 1}).Restore(bad).ok());
  o.total_units = 64;  // a bit set too short for the job
  EXPECT_EQ(ShardState(o, layout, {0, 1}).Restore(s.ToCheckpoint(0)).status().code(), Code::kDataLoss);
}

// UnitsComplete is kept as pushes take units (it scanned every unit and
// chunk on each stats write); it follows chunks that migrate in and out.
TEST(ElasticShardTest, UnitsCompleteFollowsPushesAndMigratedChunks) {
  cluster::ChunkLayout layout(30, 10);
  ShardOptions o;
  o.staleness_bound = 2;
  o.total_units = 4;
  ShardState s(o, layout, {0, 1});
  std::vector<float> zero(10, 0.f), one(10, 1.f);
  ASSERT_TRUE(s.Init(0, zero.data()) && s.Init(1, zero.data()));
  ASSERT_EQ(s.Push(0, 0, 0, 0, one.data(), 1, 2).result, wire::APPLIED);
  EXPECT_EQ(s.UnitsComplete(), 0);  // chunk 1 has not taken unit 2
  ASSERT_EQ(s.Push(0, 0, 1, 0, one.data(), 1, 2).result, wire::APPLIED);
  EXPECT_EQ(s.UnitsComplete(), 1);
  // Chunk 2 arrives from another shard without unit 2: unit 2 is no longer
  // taken by every chunk here.
  ShardState other(o, layout, {2});
  ASSERT_TRUE(other.Init(2, zero.data()));
  auto exported = other.ExportChunk(2);
  ASSERT_TRUE(exported.ok());
  ASSERT_TRUE(s.AdoptChunk(*exported).ok());
  EXPECT_EQ(s.UnitsComplete(), 0);
  ASSERT_EQ(s.Push(1, 1, 2, 0, one.data(), 1, 2).result, wire::APPLIED);
  EXPECT_EQ(s.UnitsComplete(), 1);
  s.DropChunk(2);
  EXPECT_EQ(s.UnitsComplete(), 1);
}

}  // namespace
}  // namespace geodesic::server
