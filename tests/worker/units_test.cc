// Elastic jobs on the worker side: the units' batches cover each epoch's
// samples once, and the queue of held units behaves under lost and repeated
// replies.
#include "worker/units.h"

#include <gtest/gtest.h>

#include <set>

namespace geodesic::worker {
namespace {

TEST(UnitDataTest, AnEpochsUnitsCoverItsSamplesOnceAndEpochsDiffer) {
  UnitData d(1000, 96, 32, 7);  // 10 units of 3 batches per epoch; 40 samples left out each epoch
  EXPECT_EQ(d.units_per_epoch(), 10);
  std::set<int64_t> seen;
  for (int64_t u = 0; u < 10; ++u) {
    auto b = d.Batches(u);
    ASSERT_EQ(b.size(), 3u);
    for (const auto& batch : b) {
      ASSERT_EQ(batch.size(), 32u);
      for (int64_t i : batch) {
        EXPECT_TRUE(i >= 0 && i < 1000);
        EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " twice in epoch 0";
      }
    }
  }
  EXPECT_EQ(seen.size(), 960u);
  EXPECT_NE(d.Batches(0), d.Batches(10));  // epoch 1 is another permutation
  // Out of order and from an epoch no longer cached: the same batches.
  UnitData again(1000, 96, 32, 7);
  EXPECT_EQ(again.Batches(25), d.Batches(25));
  EXPECT_EQ(d.Batches(3), again.Batches(3));
  EXPECT_NE(UnitData(1000, 96, 32, 8).Batches(0), d.Batches(0));  // the job's seed
}

wire::HeartbeatReply Reply(std::vector<int64_t> held, int64_t unassigned) {
  wire::HeartbeatReply r;
  r.set_known(true);
  for (int64_t u : held) r.add_units(u);
  r.set_units_unassigned(unassigned);
  return r;
}

TEST(UnitQueueTest, TakesHeldUnitsInOrderAndReportsFinishedOnesUntilConfirmed) {
  UnitQueue q(2);
  int64_t u = -1;
  EXPECT_EQ(q.Next(&u), UnitQueue::Take::kWait);  // no reply yet
  wire::Heartbeat hb;
  q.Fill(&hb);
  EXPECT_EQ(hb.units_wanted(), 2);
  q.OnReply(Reply({4, 5}, 10));
  ASSERT_EQ(q.Next(&u), UnitQueue::Take::kUnit);
  EXPECT_EQ(u, 4);
  ASSERT_EQ(q.Next(&u), UnitQueue::Take::kUnit);
  EXPECT_EQ(u, 5);
  EXPECT_EQ(q.Next(&u), UnitQueue::Take::kWait);  // more to hand out
  q.Finished(4);
  EXPECT_FALSE(q.AllConfirmed());
  // A reply to a heartbeat sent before the report confirms nothing.
  q.OnReply(Reply({5}, 10));
  EXPECT_FALSE(q.AllConfirmed());
  hb.Clear();
  q.Fill(&hb);
  EXPECT_EQ(hb.units_finished_size(), 1);
  EXPECT_EQ(hb.units_wanted(), 3);  // 5 is being computed, plus two ahead
  // Lost reply: the next heartbeat says it again.
  hb.Clear();
  q.Fill(&hb);
  EXPECT_EQ(hb.units_finished_size(), 1);
  q.OnReply(Reply({5, 6, 7}, 8));
  q.OnReply(Reply({5, 6, 7}, 8));
  EXPECT_TRUE(q.AllConfirmed());
  ASSERT_EQ(q.Next(&u), UnitQueue::Take::kUnit);
  EXPECT_EQ(u, 6);
  EXPECT_EQ(q.ready(), 1);
  // The coordinator handed out everything and holds nothing more for us.
  q.OnReply(Reply({5, 6}, 0));
  EXPECT_EQ(q.Next(&u), UnitQueue::Take::kNoMore);
  EXPECT_EQ(q.finished(), 1);
}

}  // namespace
}  // namespace geodesic::worker
