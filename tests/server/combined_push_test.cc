// A regional aggregator's combined push (PushRequest.covers) at a BSP
// shard: it lands where the region's own pushes would, to the bit; it
// counts as each covered worker's push; and it is refused whole when it
// cannot be taken as one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "server/requests.h"

namespace geodesic::server {
namespace {

constexpr int kValues = 64;
constexpr int kWorkers = 4;  // workers 0, 1 in region 0; 2, 3 in region 1

// Gradients of magnitudes from 1e-4 to 1e2, so that the order in which they
// are added changes the rounding.
std::vector<float> Grad(int worker, int64_t clock) {
  std::vector<float> g(kValues);
  for (int k = 0; k < kValues; ++k)
    g[k] = static_cast<float>(std::sin(1.7 * k + 0.9 * worker + 0.3 * static_cast<double>(clock)) *
                              std::pow(10.0, (k + worker) % 7 - 4));
  return g;
}

// The workers' gradients added in order, in float, as an aggregator adds them.
std::vector<float> Sum(const std::vector<int>& workers, int64_t clock) {
  std::vector<float> s = Grad(workers.front(), clock);
  for (size_t i = 1; i < workers.size(); ++i) {
    const std::vector<float> g = Grad(workers[i], clock);
    for (int k = 0; k < kValues; ++k) s[k] += g[k];
  }
  return s;
}

transport::Message PushOf(wire::Role role, int id, int64_t clock, const std::vector<float>& values,
                          const std::vector<int>& covers = {}) {
  transport::Message m;
  m.header.set_sender_role(role);
  m.header.set_sender_id(id);
  auto* p = m.header.mutable_push_request();
  p->set_clock(clock);
  for (int w : covers) p->add_covers(w);
  auto* d = p->add_chunks();
  d->set_chunk_id(0);
  d->set_codec(wire::FP32);
  d->set_num_elems(kValues);
  d->set_version(static_cast<uint64_t>(clock));
  m.frames.emplace_back(values.data(), values.size() * sizeof(float));
  return m;
}

transport::Message WorkerPush(int w, int64_t clock) { return PushOf(wire::WORKER, w, clock, Grad(w, clock)); }

transport::Message CombinedPush(int region, const std::vector<int>& covers, int64_t clock) {
  return PushOf(wire::AGGREGATOR, region, clock, Sum(covers, clock), covers);
}

// A BSP shard owning the one chunk of a kValues model, four live workers
// in two regions.
struct Bsp {
  static ShardOptions Options(int64_t bound) {
    ShardOptions o;
    o.staleness_bound = bound;
    o.worker_regions = {0, 0, 1, 1};
    return o;
  }
  explicit Bsp(int64_t bound = 0) : shard(Options(bound), cluster::ChunkLayout(kValues, kValues), {0}), clocks(bound) {
    clocks.SetLive({0, 1, 2, 3}, {0, 0, 0, 0});
    std::vector<float> init(kValues, 0.25f);
    EXPECT_TRUE(shard.Init(0, init.data()));
  }
  ShardContext Ctx() {
    return ShardContext{.shard = &shard,
                        .clocks = &clocks,
                        .server_id = 0,
                        .num_workers = kWorkers,
                        .decoder = &decoder,
                        .total_clocks = 100,
                        .num_regions = 2};
  }
  Handled Take(const transport::Message& m) { return ApplyPush(Ctx(), m); }
  std::vector<float> Values() const {
    ShardState::Snapshot s = shard.Read(0);
    return {s.values.get(), s.values.get() + kValues};
  }

  ShardState shard;
  ClockTable clocks;
  RequestDecoder decoder;
};

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CombinedPushTest, LandsWhereTheRegionsOwnPushesDoToTheBit) {
  // The test means something only if the two orders round differently.
  const std::vector<float> in_turn = Sum({0, 1, 2, 3}, 0);
  std::vector<float> by_region = Sum({0, 1}, 0);
  const std::vector<float> second = Sum({2, 3}, 0);
  for (int k = 0; k < kValues; ++k) by_region[k] += second[k];
  ASSERT_FALSE(SameBits(in_turn, by_region)) << "these gradients round the same in either order";

  Bsp flat, aggregated, mixed;
  for (int64_t clock = 0; clock < 3; ++clock) {
    for (int w = 0; w < kWorkers; ++w) ASSERT_TRUE(flat.Take(WorkerPush(w, clock)).status.ok());
    for (int r = 0; r < 2; ++r) {
      Handled h = aggregated.Take(CombinedPush(r, {2 * r, 2 * r + 1}, clock));
      ASSERT_TRUE(h.status.ok()) << h.status;
      EXPECT_EQ(h.reply.push_ack().applied_chunks(), 1u);
    }
    // Region 1 has no aggregator here; its workers push as in the flat job.
    ASSERT_TRUE(mixed.Take(WorkerPush(3, clock)).status.ok());
    ASSERT_TRUE(mixed.Take(CombinedPush(0, {0, 1}, clock)).status.ok());
    ASSERT_TRUE(mixed.Take(WorkerPush(2, clock)).status.ok());
    EXPECT_EQ(flat.shard.updates_applied(), static_cast<uint64_t>(clock + 1));
  }
  EXPECT_TRUE(SameBits(flat.Values(), aggregated.Values()));
  EXPECT_TRUE(SameBits(flat.Values(), mixed.Values()));
  EXPECT_EQ(aggregated.shard.updates_applied(), 3u);
  // The mean divided by four workers, not two pushes: the first step moved
  // the values by lr * (sum / 4), as the flat job did.
  EXPECT_FALSE(SameBits(flat.Values(), Bsp().Values()));
}

TEST(CombinedPushTest, CountsAsEachCoveredWorkersPush) {
  Bsp s;
  Handled h = s.Take(CombinedPush(0, {0, 1}, 0));
  ASSERT_TRUE(h.status.ok()) << h.status;
  EXPECT_TRUE(h.completed);
  EXPECT_EQ(s.shard.CompletedClock(0), 0);
  EXPECT_EQ(s.shard.CompletedClock(1), 0);
  EXPECT_EQ(s.clocks.ClockOf(0), 1);
  EXPECT_EQ(s.clocks.ClockOf(1), 1);
  EXPECT_EQ(s.shard.updates_applied(), 0u) << "the round waits for region 1";
  // A resend (its ack was lost) changes nothing.
  h = s.Take(CombinedPush(0, {0, 1}, 0));
  ASSERT_TRUE(h.status.ok()) << h.status;
  EXPECT_EQ(h.reply.push_ack().result(), wire::DUPLICATE);
  // Nor does a covered worker's own push of the same clock.
  h = s.Take(WorkerPush(1, 0));
  EXPECT_EQ(h.reply.push_ack().result(), wire::DUPLICATE);
  ASSERT_TRUE(s.Take(CombinedPush(1, {2, 3}, 0)).status.ok());
  EXPECT_EQ(s.shard.updates_applied(), 1u);
  EXPECT_EQ(s.shard.staleness().total(), 4u) << "staleness is counted per worker";
}

TEST(CombinedPushTest, APartlyTakenSumIsRefusedWhole) {
  Bsp s;
  ASSERT_TRUE(s.Take(WorkerPush(0, 0)).status.ok());  // worker 0 pushed directly
  Handled h = s.Take(CombinedPush(0, {0, 1}, 0));
  EXPECT_EQ(h.reason, wire::REFUSAL_PARTLY_TAKEN) << h.status;
  EXPECT_NE(h.status.message().find("took 1 of its 2"), std::string::npos) << h.status;
  EXPECT_EQ(s.shard.CompletedClock(1), -1) << "nothing of the refused sum was taken";
  EXPECT_EQ(s.shard.TakenBy({0, 1}, 0, 0), 1u);
}

TEST(CombinedPushTest, BadCombinedPushesAreRefused) {
  auto refusal = [](Bsp& s, transport::Message m) {
    Handled h = s.Take(m);
    EXPECT_FALSE(h.status.ok());
    return h.reason;
  };
  Bsp s;
  EXPECT_EQ(refusal(s, CombinedPush(2, {0, 1}, 0)), wire::REFUSAL_BAD_SENDER) << "no region 2";
  EXPECT_EQ(refusal(s, CombinedPush(0, {1, 2}, 0)), wire::REFUSAL_BAD_SENDER) << "worker 2 is region 1's";
  EXPECT_EQ(refusal(s, PushOf(wire::AGGREGATOR, 0, 0, Grad(0, 0), {1, 0})), wire::REFUSAL_BAD_SENDER);
  EXPECT_EQ(refusal(s, PushOf(wire::AGGREGATOR, 0, 0, Grad(0, 0), {0, 0})), wire::REFUSAL_BAD_SENDER);
  EXPECT_EQ(refusal(s, PushOf(wire::AGGREGATOR, 0, 0, Grad(0, 0))), wire::REFUSAL_BAD_SENDER) << "covers none";
  EXPECT_EQ(refusal(s, PushOf(wire::WORKER, 0, 0, Grad(0, 0), {0, 1})), wire::REFUSAL_BAD_SENDER)
      << "a worker pushes for itself only";
  EXPECT_EQ(refusal(s, CombinedPush(0, {0, 1}, 100)), wire::REFUSAL_BAD_CLOCK);
  EXPECT_EQ(refusal(s, CombinedPush(0, {0, 1}, 40)), wire::REFUSAL_BAD_CLOCK) << "beyond the live window";
  transport::Message skipped = CombinedPush(0, {0, 1}, 0);
  skipped.header.mutable_push_request()->set_skipped(true);
  EXPECT_EQ(refusal(s, std::move(skipped)), wire::REFUSAL_BAD_SENDER);
  std::vector<float> nan = Sum({0, 1}, 0);
  nan[3] = std::nanf("");
  EXPECT_EQ(refusal(s, PushOf(wire::AGGREGATOR, 0, 0, nan, {0, 1})), wire::REFUSAL_NON_FINITE);
  Bsp bounded(2);
  EXPECT_EQ(refusal(bounded, CombinedPush(0, {0, 1}, 0)), wire::REFUSAL_BAD_SENDER) << "BSP only";
  EXPECT_EQ(s.shard.CompletedClock(0), -1);
  EXPECT_EQ(s.shard.TakenBy({0, 1, 2, 3}, 0, 0), 0u);
}

TEST(CombinedPushTest, ABackupReplaysItAsThePrimaryTookIt) {
  Bsp primary, backup;
  uint64_t applied = 0;
  for (int r = 0; r < 2; ++r) {
    transport::Message m = CombinedPush(r, {2 * r, 2 * r + 1}, 0);
    ASSERT_TRUE(primary.Take(m).status.ok());
    transport::Message op;
    op.header = ReplicateOp(r + 1, m);
    op.header.set_sender_role(wire::SERVER);
    op.header.set_sender_id(0);
    for (const transport::Payload& f : TakeFrames(m)) op.frames.emplace_back(f.data, f.size);
    op.header.set_payload_frames(static_cast<uint32_t>(op.frames.size()));
    Handled h = ApplyReplicate(backup.Ctx(), &applied, op);
    ASSERT_TRUE(h.status.ok()) << h.status;
    EXPECT_EQ(h.taken, 1u);
  }
  EXPECT_EQ(applied, 2u);
  EXPECT_EQ(backup.shard.updates_applied(), 1u);
  EXPECT_TRUE(SameBits(primary.Values(), backup.Values()));
  EXPECT_EQ(backup.shard.CompletedClock(3), 0);
}

TEST(CombinedPushTest, PushedByNamesTheCoveredWorkers) {
  EXPECT_EQ(PushedBy(CombinedPush(1, {2, 3}, 0).header), (std::vector<int>{2, 3}));
  EXPECT_EQ(PushedBy(WorkerPush(3, 0).header), (std::vector<int>{3}));
}

}  // namespace
}  // namespace geodesic::server
