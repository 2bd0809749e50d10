#include "server/shard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace geodesic::server {
namespace {

ShardOptions Options(int64_t bound, double momentum = 0.0, bool scaling = true) {
  ShardOptions o;
  o.staleness_bound = bound;
  o.staleness_scaling = scaling;
  o.optimizer.name = OptimizerKind::kSgd;
  o.optimizer.lr = 0.5;
  o.optimizer.momentum = momentum;
  return o;
}

std::vector<float> Values(const ShardState& s, uint32_t chunk) {
  auto snap = s.Read(chunk);
  return std::vector<float>(snap.values.get(), snap.values.get() + s.layout().Size(chunk));
}

TEST(ShardTest, InitFirstWinsAndOnlyOwnedChunks) {
  ShardState s(Options(1), cluster::ChunkLayout(6, 3), {1});
  EXPECT_FALSE(s.Owns(0));
  EXPECT_TRUE(s.Owns(1));
  EXPECT_FALSE(s.Owns(7));
  EXPECT_FALSE(s.AllInitialized());
  std::vector<float> a = {1, 2, 3}, b = {9, 9, 9};
  EXPECT_TRUE(s.Init(1, a.data()));
  EXPECT_FALSE(s.Init(1, b.data()));
  EXPECT_TRUE(s.AllInitialized());
  EXPECT_EQ(Values(s, 1), a);
  EXPECT_EQ(s.Read(1).version, 0u);
}

TEST(ShardTest, AsyncAppliesAtOnceWithStalenessScaling) {
  ShardState s(Options(4), cluster::ChunkLayout(2, 2), {0});
  std::vector<float> init = {1, 1}, g = {1, -1};
  s.Init(0, init.data());
  auto r = s.Push(0, 0, 0, /*base_version=*/0, g.data());
  EXPECT_EQ(r.result, wire::APPLIED);
  EXPECT_EQ(r.staleness, 0);
  EXPECT_TRUE(r.clock_completed);
  EXPECT_EQ(Values(s, 0), (std::vector<float>{0.5f, 1.5f}));  // lr 0.5, staleness 0 -> scale 1
  // Worker 1 computed on version 0, but one update landed since: staleness
  // 1, learning rate / 2 (Zhang et al. count the update itself).
  r = s.Push(1, 0, 0, 0, g.data());
  EXPECT_EQ(r.staleness, 1);
  EXPECT_EQ(Values(s, 0), (std::vector<float>{0.25f, 1.75f}));
  // Worker 2 on version 0 with two updates since: lr / 3.
  r = s.Push(2, 0, 0, 0, g.data());
  EXPECT_EQ(r.staleness, 2);
  EXPECT_FLOAT_EQ(Values(s, 0)[0], 0.25f - 0.5f / 3);
  EXPECT_EQ(s.Read(0).version, 3u);
  EXPECT_EQ(s.staleness().total(), 3u);
  EXPECT_EQ(s.staleness().max(), 2);
}

TEST(ShardTest, StalenessScalingCanBeTurnedOff) {
  ShardState s(Options(4, 0, /*scaling=*/false), cluster::ChunkLayout(1, 1), {0});
  float init = 0, g = 1;
  s.Init(0, &init);
  s.Push(0, 0, 0, 0, &g);
  s.Push(1, 0, 0, 0, &g);  // staleness 1
  s.Push(2, 0, 0, 0, &g);  // staleness 2, still full lr
  EXPECT_FLOAT_EQ(Values(s, 0)[0], -1.5f);
}

TEST(ShardTest, DuplicatePushIsNotAppliedTwice) {
  ShardState s(Options(4), cluster::ChunkLayout(1, 1), {0});
  float init = 0, g = 1;
  s.Init(0, &init);
  EXPECT_EQ(s.Push(0, 5, 0, 0, &g).result, wire::APPLIED);
  auto dup = s.Push(0, 5, 0, 0, &g);
  EXPECT_EQ(dup.result, wire::DUPLICATE);
  EXPECT_FALSE(dup.clock_completed);
  EXPECT_EQ(s.Push(0, 4, 0, 0, &g).result, wire::DUPLICATE);  // older clock: already past it
  EXPECT_FLOAT_EQ(Values(s, 0)[0], -0.5f);
  EXPECT_EQ(s.duplicates(), 2u);
  EXPECT_EQ(s.updates_applied(), 1u);
}

TEST(ShardTest, ClockCompletesWhenEveryOwnedChunkArrived) {
  ShardState s(Options(4), cluster::ChunkLayout(4, 1), {0, 2, 3});
  std::vector<float> init = {0, 0, 0, 0};
  for (uint32_t c : {0u, 2u, 3u}) s.Init(c, &init[c]);
  float g = 1;
  EXPECT_FALSE(s.Push(0, 0, 0, 0, &g).clock_completed);
  EXPECT_FALSE(s.Push(0, 0, 3, 0, &g).clock_completed);
  EXPECT_TRUE(s.Push(0, 0, 2, 0, &g).clock_completed);
}

TEST(ShardTest, BspAppliesTheMeanOnceEveryLiveWorkerFinished) {
  ShardState s(Options(0, 0.9), cluster::ChunkLayout(2, 2), {0});
  std::vector<float> init = {0, 0}, g0 = {1, 2}, g1 = {3, 4};
  s.Init(0, init.data());
  ClockTable clocks(0);
  clocks.SetLive({0, 1}, {0, 0});
  EXPECT_EQ(s.Push(0, 0, 0, 0, g0.data()).result, wire::APPLIED);
  clocks.Finished(0, 0);
  EXPECT_EQ(s.CloseRounds(clocks), 0);  // worker 1 missing
  EXPECT_EQ(Values(s, 0), init);
  EXPECT_TRUE(s.HasOpenRounds());
  s.Push(1, 0, 0, 0, g1.data());
  clocks.Finished(1, 0);
  EXPECT_EQ(s.CloseRounds(clocks), 1);
  // mean = (2, 3); momentum buffer starts at the gradient; lr 0.5.
  EXPECT_EQ(Values(s, 0), (std::vector<float>{-1.0f, -1.5f}));
  EXPECT_EQ(s.staleness().NonZero().at(0), 2u);  // BSP: staleness 0
  EXPECT_FALSE(s.HasOpenRounds());
  // A late push for a closed round changes nothing.
  EXPECT_EQ(s.Push(2, 0, 0, 0, g1.data()).result, wire::STALE_DROPPED);
  EXPECT_EQ(Values(s, 0), (std::vector<float>{-1.0f, -1.5f}));
}

TEST(ShardTest, BspRoundClosesWithoutADeadWorker) {
  ShardState s(Options(0), cluster::ChunkLayout(1, 1), {0});
  float init = 0, g = 2;
  s.Init(0, &init);
  ClockTable clocks(0);
  clocks.SetLive({0, 1}, {0, 0});
  s.Push(0, 0, 0, 0, &g);
  clocks.Finished(0, 0);
  EXPECT_EQ(s.CloseRounds(clocks), 0);
  clocks.SetLive({0}, {1});  // worker 1's lease expired
  EXPECT_EQ(s.CloseRounds(clocks), 1);
  EXPECT_FLOAT_EQ(Values(s, 0)[0], -1.0f);  // mean over the one contributor
}

TEST(ShardTest, SkippedClockCompletesWithoutAnUpdate) {
  ShardState s(Options(0), cluster::ChunkLayout(2, 1), {0, 1});
  std::vector<float> init = {0, 0};
  s.Init(0, &init[0]);
  s.Init(1, &init[1]);
  EXPECT_TRUE(s.Skip(0, 0));
  EXPECT_FALSE(s.Skip(0, 0));  // duplicate
  EXPECT_EQ(s.updates_applied(), 0u);
}

// training.fragments: each clock two workers push one of two one-value
// chunks and skip the other. A clock completes only once every chunk was
// pushed or skipped; a round closes on the pushed chunk alone; the
// skipped chunk's clocks close too, so the checkpoint clock keeps up.
TEST(ShardTest, FragmentClocksPushOneChunkAndSkipTheOther) {
  ShardState s(Options(0), cluster::ChunkLayout(2, 1), {0, 1});
  std::vector<float> init = {0, 0};
  s.Init(0, &init[0]);
  s.Init(1, &init[1]);
  ClockTable clocks(0);
  clocks.SetLive({0, 1}, {0, 0});
  const float g0 = 2, g1 = 4;
  for (int64_t clock = 0; clock < 4; ++clock) {
    const uint32_t pushed = static_cast<uint32_t>(clock % 2), skipped = 1 - pushed;
    for (int w = 0; w < 2; ++w) {
      ShardState::PushOutcome skip = s.SkipChunks(w, clock, {skipped});
      EXPECT_EQ(skip.result, wire::APPLIED);
      EXPECT_FALSE(skip.clock_completed) << "worker " << w << " has not pushed chunk " << pushed;
      EXPECT_EQ(s.SkipChunks(w, clock, {skipped}).result, wire::DUPLICATE);
      ShardState::PushOutcome push = s.Push(w, clock, pushed, 0, w == 0 ? &g0 : &g1);
      EXPECT_EQ(push.result, wire::APPLIED);
      ASSERT_TRUE(push.clock_completed) << "clock " << clock << ", worker " << w;
      clocks.Finished(w, clock);
    }
    EXPECT_EQ(s.CloseRounds(clocks), 1) << "only the pushed chunk has a round at clock " << clock;
    EXPECT_FALSE(s.HasOpenRounds());
    EXPECT_EQ(s.CheckpointClock(clocks.MinClock()), clock + 1);
    EXPECT_EQ(s.LastClock(1, skipped), clock);
  }
  // Two rounds each, of the mean gradient 3 at lr 0.5.
  EXPECT_FLOAT_EQ(Values(s, 0)[0], -3.0f);
  EXPECT_FLOAT_EQ(Values(s, 1)[0], -3.0f);
  EXPECT_EQ(s.updates_applied(), 4u);
  // A late push of a clock every live worker finished, from a worker no
  // longer live, is dropped, on a skipped chunk as on a pushed one.
  EXPECT_EQ(s.Push(2, 3, 0, 0, &g0).result, wire::STALE_DROPPED);
  EXPECT_EQ(s.Push(2, 3, 1, 0, &g0).result, wire::STALE_DROPPED);
  EXPECT_FALSE(s.HasOpenRounds());
}

TEST(ShardTest, UpdateWritesANewBufferWhileAReaderHoldsTheOld) {
  ShardState s(Options(4), cluster::ChunkLayout(2, 2), {0});
  std::vector<float> init = {1, 1}, g = {1, 1};
  s.Init(0, init.data());
  auto held = s.Read(0);  // an in-flight pull reply
  s.Push(0, 0, 0, 0, g.data());
  EXPECT_EQ(held.values[0], 1.0f);  // untouched
  EXPECT_EQ(Values(s, 0)[0], 0.5f);
  EXPECT_NE(s.Read(0).values.get(), held.values.get());
  const float* before = s.Read(0).values.get();
  s.Push(1, 0, 0, 1, g.data());  // nobody holds it now: in place
  EXPECT_EQ(s.Read(0).values.get(), before);
}

}  // namespace
// Migration: a chunk exported from one shard and adopted by another goes on
// exactly as it would have where it was: values, version, momentum buffer
// and the per-worker clocks that catch duplicate pushes all travel.
TEST(ShardTest, MigratedChunkContinuesBitForBitAsIfItHadStayed) {
  const cluster::ChunkLayout layout(6, 2);  // chunks 0, 1, 2
  ShardState src(Options(0, 0.9), layout, {0, 1}), dst(Options(0, 0.9), layout, {2}), ref(Options(0, 0.9), layout, {1});
  std::vector<float> init = {0.5f, -0.25f}, g0 = {1, 2}, g1 = {3, -4}, g2 = {0.125f, 7};
  for (ShardState* s : {&src, &ref}) s->Init(1, init.data());
  src.Init(0, init.data());
  dst.Init(2, init.data());
  ClockTable clocks(0);
  clocks.SetLive({0, 1}, {0, 0});
  auto round = [&](ShardState& s, int64_t clock, bool both) {
    s.Push(0, clock, 1, s.Read(1).version, g0.data(), 2);
    if (both) s.Push(1, clock, 1, s.Read(1).version, clock % 2 ? g1.data() : g2.data(), 2);
  };
  round(src, 0, false);
  // An open round would be lost with the chunk: not exported.
  EXPECT_EQ(src.ExportChunk(1).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(src.ExportChunk(2).status().code(), Code::kFailedPrecondition);  // not owned
  src.Push(1, 0, 1, 0, g2.data(), 2);
  round(ref, 0, true);
  clocks.Finished(0, 0);
  clocks.Finished(1, 0);
  EXPECT_EQ(src.CloseRounds(clocks), 1);
  EXPECT_EQ(ref.CloseRounds(clocks), 1);

  auto state = src.ExportChunk(1);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_GE(state->optimizer_arrays_size(), 1);  // the momentum buffer (and SGD's per-clock sum)
  ASSERT_TRUE(dst.AdoptChunk(*state).ok());
  src.DropChunk(1);
  EXPECT_FALSE(src.Owns(1));
  EXPECT_EQ(src.owned(), std::vector<uint32_t>{0});
  EXPECT_EQ(dst.owned(), (std::vector<uint32_t>{1, 2}));
  EXPECT_TRUE(dst.AllInitialized());
  EXPECT_EQ(dst.AdoptChunk(*state).code(), Code::kFailedPrecondition);  // already owned
  EXPECT_EQ(dst.Read(1).version, ref.Read(1).version);
  EXPECT_EQ(Values(dst, 1), Values(ref, 1));
  // A resent push of a clock the chunk took before it moved is a duplicate.
  EXPECT_EQ(dst.Push(0, 0, 1, 0, g0.data(), 2).result, wire::DUPLICATE);

  // Two more rounds on both: the same bits (momentum carried over).
  for (int64_t c = 1; c <= 2; ++c) {
    for (ShardState* s : {&dst, &ref}) {
      round(*s, c, true);
      if (s == &dst) s->Push(0, c, 2, s->Read(2).version, g0.data(), 2), s->Push(1, c, 2, 0, g1.data(), 2);
    }
    clocks.Finished(0, c);
    clocks.Finished(1, c);
    dst.CloseRounds(clocks);
    ref.CloseRounds(clocks);
  }
  EXPECT_EQ(Values(dst, 1), Values(ref, 1));
  EXPECT_EQ(dst.Read(1).version, ref.Read(1).version);
  EXPECT_EQ(dst.LastClock(1, 1), 2);
}

TEST(ShardTest, AdoptRefusesStateThatDoesNotFit) {
  const cluster::ChunkLayout layout(6, 2);
  ShardState src(Options(2, 0.9), layout, {0}), dst(Options(2, 0.9), layout, {1});
  std::vector<float> init = {1, 2};
  src.Init(0, init.data());
  auto state = src.ExportChunk(0);
  ASSERT_TRUE(state.ok());
  wire::ChunkCheckpoint bad = *state;
  bad.set_params("abc");
  EXPECT_EQ(dst.AdoptChunk(bad).code(), Code::kDataLoss);
  bad = *state;
  bad.clear_optimizer_arrays();
  EXPECT_EQ(dst.AdoptChunk(bad).code(), Code::kDataLoss);
  EXPECT_FALSE(dst.Owns(0));
  bad = *state;
  bad.set_chunk_id(9);
  EXPECT_EQ(dst.AdoptChunk(bad).code(), Code::kInvalidArgument);
}

}  // namespace geodesic::server

namespace geodesic::server {
namespace {

// training.shard_threads splits each update over threads: every optimizer,
// BSP and asynchronous, gives the same bits as one thread.
struct SplitCase {
  const char* name;
  OptimizerKind kind;
  double momentum;
  bool nesterov;
  int64_t bound;
};

std::vector<std::vector<float>> TrainSplit(const SplitCase& k, int threads) {
  // Two chunks of 2.7 and 2.4 MiB (each split in 2 on 3 threads), plus an
  // odd tail, three workers, five clocks.
  constexpr uint64_t kParams = 1'300'007, kChunk = 700'001;
  ShardOptions o = Options(k.bound, k.momentum);
  o.optimizer.name = k.kind;
  o.optimizer.nesterov = k.nesterov;
  o.optimizer.lr = k.kind == OptimizerKind::kSgd ? 0.1 : 0.01;
  o.optimizer.weight_decay = 0.01;
  o.threads = threads;
  ShardState s(o, cluster::ChunkLayout(kParams, kChunk), {0, 1});
  ClockTable clocks(3);
  clocks.SetLive({0, 1, 2}, {0, 0, 0});
  std::vector<float> g(kChunk);
  for (uint32_t c = 0; c < 2; ++c) {
    for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.001f * static_cast<float>(i + c));
    EXPECT_TRUE(s.Init(c, g.data()));
  }
  for (int64_t clock = 0; clock < 5; ++clock)
    for (int w = 0; w < 3; ++w) {
      for (uint32_t c = 0; c < 2; ++c) {
        for (size_t i = 0; i < g.size(); ++i) g[i] = std::cos(0.37f * static_cast<float>(i % 977 + w * 13 + clock));
        auto r = s.Push(w, clock, c, s.Read(c).version, g.data(), 3);
        EXPECT_EQ(r.result, wire::APPLIED);
        if (r.clock_completed) clocks.Finished(w, clock);
      }
      s.CloseRounds(clocks);
    }
  EXPECT_EQ(s.updates_applied(), k.bound == 0 ? 10u : 30u);
  return {Values(s, 0), Values(s, 1)};
}

TEST(ShardSplitTest, ThreadsGiveTheSameBitsAsOneThread) {
  const SplitCase cases[] = {
      {"sgd", OptimizerKind::kSgd, 0.0, false, 0},
      {"sgd momentum bsp", OptimizerKind::kSgd, 0.9, false, 0},
      {"sgd momentum async", OptimizerKind::kSgd, 0.9, false, 2},
      {"sgd nesterov", OptimizerKind::kSgd, 0.9, true, 2},
      {"adam", OptimizerKind::kAdam, 0.0, false, 2},
      {"adamw bsp", OptimizerKind::kAdamW, 0.0, false, 0},
  };
  for (const SplitCase& k : cases) {
    auto one = TrainSplit(k, 1), three = TrainSplit(k, 3);
    for (size_t c = 0; c < one.size(); ++c) {
      ASSERT_EQ(one[c].size(), three[c].size());
      EXPECT_EQ(std::memcmp(one[c].data(), three[c].data(), one[c].size() * sizeof(float)), 0)
          << k.name << ", chunk " << c;
      EXPECT_NE(one[c][0], std::sin(0.001f * static_cast<float>(c))) << k.name << ": nothing was applied";
    }
  }
}

}  // namespace
}  // namespace geodesic::server
