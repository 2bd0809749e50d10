// RegionSums: what an aggregator combines and what it answers its workers,
// without sockets (aggregator/region_sums.h).
#include "aggregator/region_sums.h"

#include <gtest/gtest.h>

namespace geodesic::aggregator {
namespace {

// 2 chunks of 2 values; workers 4..6 are the region's.
const cluster::ChunkLayout kLayout(4, 2);
constexpr int kFirst = 4, kWorkers = 3;

struct Push {
  std::vector<float> values;  // all 4
  std::vector<PushedChunk> Chunks(std::vector<uint32_t> ids = {0, 1}) const {
    std::vector<PushedChunk> out;
    for (uint32_t id : ids) out.push_back({id, values.data() + kLayout.Begin(id)});
    return out;
  }
};

AckTo To(uint64_t id, std::vector<uint32_t> chunks = {0, 1}) { return {"peer", id, std::move(chunks)}; }

wire::PushAck Ack(uint32_t applied, uint32_t duplicate = 0, uint32_t dropped = 0) {
  wire::PushAck a;
  a.set_applied_chunks(applied);
  a.set_duplicate_chunks(duplicate);
  a.set_dropped_chunks(dropped);
  return a;
}

// Answers every chunk of `f` at once with `ack`'s counts.
void Answer(RegionSums& sums, const Forward& f, const wire::PushAck& ack) {
  sums.Answered(f.clock, f.covers, {0, 1}, ack);
}

TEST(RegionSumsTest, AClockGoesOnceEveryLiveWorkerPushedItAndSumsInWorkerOrder) {
  RegionSums sums(kLayout, kFirst, kWorkers);
  sums.SetLive(false, {}, {});
  const Push a{{1e8f, 1, 2, 3}}, b{{-1e8f, 1, 2, 3}}, c{{1, 1, 2, 3}};
  // Arrival order differs from worker order: the sum must not.
  EXPECT_TRUE(sums.Take(6, 0, To(1), c.Chunks()).empty());
  EXPECT_TRUE(sums.Take(4, 0, To(2), a.Chunks()).empty());
  EXPECT_TRUE(sums.TakeReady().empty());
  // A worker sends each shard's chunks over a connection of its own (one
  // per shard link): two peers, one push.
  sums.Take(5, 0, {"link-1", 3, {1}}, b.Chunks({1}));
  EXPECT_TRUE(sums.TakeReady().empty()) << "worker 5 has pushed half its chunks";
  sums.Take(5, 0, {"link-0", 4, {0}}, b.Chunks({0}));
  auto ready = sums.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].covers, (std::vector<int>{4, 5, 6}));
  EXPECT_FALSE(ready[0].late);
  // (1e8 + -1e8) + 1 = 1; in arrival order (1 + 1e8) + -1e8 would be 0.
  EXPECT_EQ((*ready[0].sum)[0], 1.0f);
  EXPECT_EQ((*ready[0].sum)[3], 9.0f);
  EXPECT_TRUE(sums.TakeAnswered().empty());
  sums.Answered(0, {4, 5, 6}, {0}, Ack(1));
  EXPECT_TRUE(sums.TakeAnswered().empty()) << "chunk 1 is not answered yet";
  sums.Answered(0, {4, 5, 6}, {1}, Ack(1));
  auto replies = sums.TakeAnswered();
  ASSERT_EQ(replies.size(), 4u);
  for (const Reply& r : replies) {
    EXPECT_EQ(r.result(), wire::APPLIED);
    EXPECT_EQ(r.applied, r.to.chunks.size());
  }
  EXPECT_EQ(sums.OldestOpen(), 1);
}

// Streaming DiLoCo: even clocks push chunk 0, odd ones chunk 1, the last
// (clock 3) both. A clock goes once every worker pushed its fragment; the
// sum carries only it, and its answers complete it.
TEST(RegionSumsTest, WithFragmentsAClockIsItsFragment) {
  RegionSums sums(kLayout, kFirst, 2, [](int64_t clock) -> std::optional<cluster::ChunkRange> {
    if (clock >= 3) return std::nullopt;
    return cluster::ChunkRange{static_cast<uint32_t>(clock % 2), static_cast<uint32_t>(clock % 2 + 1)};
  });
  sums.SetLive(false, {}, {});
  const Push a{{1, 2, 3, 4}}, b{{10, 20, 30, 40}};
  sums.Take(4, 1, To(1, {1}), a.Chunks({1}));
  EXPECT_TRUE(sums.TakeReady().empty()) << "clock 0 is still open";
  sums.Take(4, 0, To(2, {0}), a.Chunks({0, 1}));  // chunk 1 is not clock 0's: not taken
  sums.Take(5, 0, To(3, {0}), b.Chunks({0}));
  sums.Take(5, 1, To(4, {1}), b.Chunks({1}));
  auto ready = sums.TakeReady();
  ASSERT_EQ(ready.size(), 2u);
  ASSERT_TRUE(ready[0].only.has_value());
  EXPECT_EQ(ready[0].only->begin, 0u);
  EXPECT_EQ(ready[0].only->end, 1u);
  EXPECT_EQ((*ready[0].sum)[0], 11.0f);
  EXPECT_EQ((*ready[0].sum)[2], 0.0f) << "chunk 1 is not clock 0's";
  EXPECT_EQ((*ready[1].sum)[2], 33.0f);
  sums.Answered(0, {4, 5}, {0}, Ack(1));
  EXPECT_EQ(sums.TakeAnswered().size(), 2u) << "chunk 0 was all of clock 0";
  sums.Answered(1, {4, 5}, {1}, Ack(1));
  EXPECT_EQ(sums.TakeAnswered().size(), 2u);
  // The last clock synchronizes every chunk.
  sums.Take(4, 2, To(5, {0}), a.Chunks({0}));
  sums.Take(5, 2, To(6, {0}), b.Chunks({0}));
  sums.Take(4, 3, To(7), a.Chunks({0}));
  sums.Take(5, 3, To(8), b.Chunks());
  ready = sums.TakeReady();
  ASSERT_EQ(ready.size(), 1u) << "worker 4 has not pushed all of clock 3";
  EXPECT_EQ(ready[0].clock, 2);
  sums.Take(4, 3, To(9, {1}), a.Chunks({1}));
  ready = sums.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].clock, 3);
  EXPECT_FALSE(ready[0].only.has_value());
  EXPECT_EQ((*ready[0].sum)[3], 44.0f);
}

TEST(RegionSumsTest, SkippedAndDeadWorkersAreNotWaitedFor) {
  RegionSums sums(kLayout, kFirst, kWorkers);
  sums.SetLive(true, {0, 4, 5, 6}, {0, 0, 0, 0});
  const Push p{{1, 2, 3, 4}};
  sums.Take(4, 0, To(1), p.Chunks());
  sums.Skip(5, 0);
  EXPECT_TRUE(sums.TakeReady().empty());
  sums.SetLive(true, {0, 4, 5}, {0, 0, 0});  // worker 6's lease ran out
  auto ready = sums.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].covers, (std::vector<int>{4}));
}

// The bug this class fixes: a worker that rejoins at a clock its region's
// combined push already went without it was answered "duplicate" and never
// reached the shards, whose round then waited for it forever.
TEST(RegionSumsTest, APushOfAClockThatWentWithoutItsWorkerGoesAlone) {
  RegionSums sums(kLayout, kFirst, kWorkers);
  sums.SetLive(true, {4, 5}, {0, 0});  // 6 is dead
  const Push p{{1, 2, 3, 4}};
  sums.Take(4, 0, To(1), p.Chunks());
  sums.Take(5, 0, To(2), p.Chunks());
  auto ready = sums.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  Answer(sums, ready[0], Ack(2));
  EXPECT_EQ(sums.TakeAnswered().size(), 2u);
  // Worker 6 rejoins at clock 0 (the coordinator's view of the live clock).
  sums.SetLive(true, {4, 5, 6}, {1, 1, 0});
  EXPECT_TRUE(sums.Take(6, 0, To(3), p.Chunks()).empty());
  ready = sums.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].covers, (std::vector<int>{6}));
  EXPECT_TRUE(ready[0].late);
  EXPECT_EQ(*ready[0].sum, p.values);
  // The round had closed at one shard and took it at the other.
  sums.Answered(0, {6}, {0}, Ack(0, 0, 1));
  sums.Answered(0, {6}, {1}, Ack(1));
  auto replies = sums.TakeAnswered();
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].applied, 1u);
  EXPECT_EQ(replies[0].dropped, 1u);
  EXPECT_EQ(replies[0].result(), wire::APPLIED);
  // A resend of it afterwards is answered from the history, alike.
  auto again = sums.Take(6, 0, To(3), p.Chunks());
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].duplicate, 1u);
  EXPECT_EQ(again[0].dropped, 1u);
  EXPECT_TRUE(sums.TakeReady().empty());
}

TEST(RegionSumsTest, ClocksBeforeARejoinedWorkersClockDoNotWaitForIt) {
  RegionSums sums(kLayout, kFirst, kWorkers);
  sums.SetLive(true, {4, 5}, {3, 3});
  sums.SetLive(true, {4, 5, 6}, {3, 3, 5});  // 6 rejoined at clock 5
  const Push p{{1, 2, 3, 4}};
  sums.Take(4, 3, To(1), p.Chunks());
  sums.Take(5, 3, To(2), p.Chunks());
  auto ready = sums.TakeReady();
  ASSERT_EQ(ready.size(), 1u) << "clock 3 waited for a worker that starts at clock 5";
  sums.Take(4, 5, To(3), p.Chunks());
  sums.Take(5, 5, To(4), p.Chunks());
  EXPECT_TRUE(sums.TakeReady().empty()) << "clock 5 must wait for worker 6";
  sums.Take(6, 5, To(5), p.Chunks());
  ready = sums.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].covers, (std::vector<int>{4, 5, 6}));
}

TEST(RegionSumsTest, AResendWhileItsForwardIsInFlightIsAnsweredWithIt) {
  RegionSums sums(kLayout, kFirst, 1);
  sums.SetLive(false, {}, {});
  const Push p{{1, 2, 3, 4}};
  sums.Take(4, 0, To(1), p.Chunks());
  auto ready = sums.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(sums.Take(4, 0, To(1), p.Chunks()).empty());
  EXPECT_TRUE(sums.TakeReady().empty()) << "a resend is not a second forward";
  Answer(sums, ready[0], Ack(2));
  EXPECT_EQ(sums.TakeAnswered().size(), 2u);
}

TEST(RegionSumsTest, AWorkerThatLeftMidPushFinishesAloneOrIsForgotten) {
  RegionSums sums(kLayout, kFirst, 2);
  sums.SetLive(true, {4, 5}, {0, 0});
  const Push p{{1, 2, 3, 4}};
  sums.Take(4, 0, To(1), p.Chunks());
  sums.Take(5, 0, To(2, {0}), p.Chunks({0}));
  sums.SetLive(true, {4}, {1});  // 5 paused past its lease
  auto ready = sums.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].covers, (std::vector<int>{4}));
  // Back, the same process: it finishes its push, which goes alone.
  sums.SetLive(true, {4, 5}, {1, 0});
  sums.Take(5, 0, To(3, {1}), p.Chunks({1}));
  ready = sums.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].covers, (std::vector<int>{5}));
  EXPECT_TRUE(ready[0].late);
  EXPECT_EQ(*ready[0].sum, p.values);
  EXPECT_EQ(sums.OldestOpen(), 0);

  // A live worker's unfinished push is forgotten when it goes.
  sums.SetLive(true, {4, 5}, {1, 1});
  sums.Take(4, 1, To(7), p.Chunks());
  sums.Take(5, 1, To(8, {0}), p.Chunks({0}));
  sums.SetLive(true, {4}, {2});
  ASSERT_EQ(sums.TakeReady().size(), 1u);  // 1 without 5; 5's half moves aside
  sums.SetLive(true, {4, 5}, {2, 1});
  sums.SetLive(true, {4}, {2});  // and 5 goes again
  sums.SetLive(true, {4, 5}, {2, 1});
  sums.Take(5, 1, To(9, {1}), p.Chunks({1}));
  EXPECT_TRUE(sums.TakeReady().empty()) << "chunk 0 of worker 5 was forgotten with it";
}

TEST(RegionSumsTest, HistoryIsKeptForAFixedNumberOfClocks) {
  RegionSums sums(kLayout, kFirst, 1);
  sums.SetLive(false, {}, {});
  const Push p{{1, 2, 3, 4}};
  for (int64_t c = 0; c < RegionSums::kHistory + 10; ++c) {
    sums.Take(4, c, To(static_cast<uint64_t>(c)), p.Chunks());
    for (const Forward& f : sums.TakeReady()) Answer(sums, f, Ack(2));
    ASSERT_EQ(sums.TakeAnswered().size(), 1u);
  }
  EXPECT_EQ(sums.Take(4, 20, To(99), p.Chunks()).size(), 1u) << "a recent clock's resend is answered at once";
  // An old one goes to the shards, which know it is a duplicate.
  EXPECT_TRUE(sums.Take(4, 0, To(98), p.Chunks()).empty());
  auto ready = sums.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].late);
}

}  // namespace
}  // namespace geodesic::aggregator
