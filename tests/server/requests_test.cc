#include "server/requests.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "compression/codec.h"

namespace geodesic::server {
namespace {

// One shard owning both chunks (8 values each) of a 16-value model, two workers.
class RequestsTest : public ::testing::Test {
 protected:
  static ShardOptions BoundTwo() {
    ShardOptions o;
    o.staleness_bound = 2;
    return o;
  }
  RequestsTest() : shard_(BoundTwo(), cluster::ChunkLayout(16, 8), {0, 1}) {
    clocks_.SetLive({0, 1}, {0, 0});
    std::vector<float> init(8, 0.5f);
    EXPECT_TRUE(shard_.Init(0, init.data()));
    EXPECT_TRUE(shard_.Init(1, init.data()));
  }

  // A push of worker 0 at `clock`: chunk 0, all values `v`.
  static transport::Message Push(int64_t clock, float v) {
    transport::Message m;
    m.header.set_sender_role(wire::WORKER);
    m.header.set_sender_id(0);
    auto* p = m.header.mutable_push_request();
    p->set_clock(clock);
    auto* d = p->add_chunks();
    d->set_chunk_id(0);
    d->set_codec(wire::FP32);
    d->set_num_elems(8);
    std::vector<float> g(8, v);
    m.frames.emplace_back(g.data(), g.size() * sizeof(float));
    return m;
  }

  // A job of 100 clocks per worker.
  ShardContext Ctx() {
    return ShardContext{.shard = &shard_,
                        .clocks = &clocks_,
                        .server_id = 0,
                        .num_workers = 2,
                        .decoder = &decoder_,
                        .total_clocks = 100};
  }

  static transport::Message Pull(wire::Role role, int id, int64_t clock) {
    transport::Message m;
    m.header.set_sender_role(role);
    m.header.set_sender_id(id);
    m.header.mutable_pull_request()->set_clock(clock);
    return m;
  }

  wire::Refusal PullRefusal(const transport::Message& m) {
    wire::Refusal reason = wire::REFUSAL_UNSPECIFIED;
    std::vector<uint32_t> chunks;
    Status s = ValidatePull(Ctx(), m, &reason, &chunks);
    EXPECT_EQ(s.ok(), reason == wire::REFUSAL_UNSPECIFIED) << s;
    return reason;
  }

  ShardState shard_;
  ClockTable clocks_{2};
  RequestDecoder decoder_;
};

TEST_F(RequestsTest, GoodPushIsApplied) {
  Handled h = ApplyPush(Ctx(), Push(0, 1.0f));
  ASSERT_TRUE(h.status.ok()) << h.status;
  EXPECT_EQ(h.reply.push_ack().result(), wire::APPLIED);
  EXPECT_EQ(shard_.updates_applied(), 1u);
}

// Regression: finite gradients near FLT_MAX overflowed the
// parameters to infinity after a few steps.
TEST_F(RequestsTest, HugeFiniteGradientIsRefusedWhole) {
  for (int clock = 0; clock < 4; ++clock) {
    Handled h = ApplyPush(Ctx(), Push(clock, 3e38f));
    EXPECT_EQ(h.reason, wire::REFUSAL_VALUE_TOO_LARGE) << h.status;
    EXPECT_EQ(h.status.code(), Code::kInvalidArgument);
  }
  EXPECT_EQ(shard_.updates_applied(), 0u);
  EXPECT_EQ(shard_.Read(0).values[0], 0.5f);
}

// The check counts every unusable value and names the first, whichever
// kind it is (the count and the search are separate passes).
TEST_F(RequestsTest, NonFiniteValuesAreCountedAndTheFirstNamed) {
  transport::Message m = Push(0, 1.0f);
  float* g = static_cast<float*>(m.frames[0].data());
  g[3] = std::numeric_limits<float>::quiet_NaN();
  g[5] = -std::numeric_limits<float>::infinity();
  g[6] = 2e18f;
  Handled h = ApplyPush(Ctx(), std::move(m));
  EXPECT_EQ(h.reason, wire::REFUSAL_NON_FINITE) << h.status;
  EXPECT_NE(h.status.message().find("holds 3 values that are not finite or beyond +-1e18 (first at index 3"),
            std::string::npos)
      << h.status;
  m = Push(0, 1.0f);
  static_cast<float*>(m.frames[0].data())[7] = -2e18f;  // the last value only
  h = ApplyPush(Ctx(), std::move(m));
  EXPECT_EQ(h.reason, wire::REFUSAL_VALUE_TOO_LARGE) << h.status;
  EXPECT_NE(h.status.message().find("holds 1 values that are not finite or beyond +-1e18 (first at index 7"),
            std::string::npos)
      << h.status;
  // Mixed, a finite value first: the reason follows it, the count and the
  // wording take the NaN after it too.
  m = Push(0, 1.0f);
  static_cast<float*>(m.frames[0].data())[2] = 5e18f;
  static_cast<float*>(m.frames[0].data())[4] = std::numeric_limits<float>::quiet_NaN();
  h = ApplyPush(Ctx(), std::move(m));
  EXPECT_EQ(h.reason, wire::REFUSAL_VALUE_TOO_LARGE) << h.status;
  EXPECT_NE(h.status.message().find("holds 2 values that are not finite or beyond +-1e18 (first at index 2"),
            std::string::npos)
      << h.status;
  EXPECT_EQ(shard_.updates_applied(), 0u);
  EXPECT_EQ(shard_.Read(0).values[0], 0.5f);
}

// With training.shard_threads the check of a large chunk is split over
// threads: the count sums every piece and the first bad value is still the
// first in the chunk, not in the first piece that found one.
TEST(RequestsSplitCheckTest, ThreadsCountEveryPieceAndNameTheFirstBadValue) {
  constexpr uint32_t n = 1 << 20;  // 4 MiB: 3 pieces on 3 threads
  ShardOptions o;
  o.staleness_bound = 2;
  o.threads = 3;
  ShardState shard(o, cluster::ChunkLayout(n, n), {0});
  ASSERT_NE(shard.pool(), nullptr);
  ASSERT_EQ(shard.pool()->Pieces(n), 3);
  std::vector<float> init(n, 0.5f);
  ASSERT_TRUE(shard.Init(0, init.data()));
  ClockTable clocks(1);
  clocks.SetLive({0}, {0});
  RequestDecoder decoder;
  ShardContext ctx{.shard = &shard, .clocks = &clocks, .server_id = 0, .num_workers = 1, .decoder = &decoder};
  auto push = [&](const std::vector<std::pair<uint32_t, float>>& bad) {
    transport::Message m;
    m.header.set_sender_role(wire::WORKER);
    auto* d = m.header.mutable_push_request()->add_chunks();
    d->set_codec(wire::FP32);
    d->set_num_elems(n);
    std::vector<float> g(n, 1e-3f);
    for (auto [i, v] : bad) g[i] = v;
    m.frames.emplace_back(g.data(), g.size() * sizeof(float));
    return ApplyPush(ctx, std::move(m));
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Handled h = push({{n - 1, 3e18f}, {n / 2, nan}, {n - 9, nan}});  // pieces 2 and 3
  EXPECT_EQ(h.reason, wire::REFUSAL_NON_FINITE) << h.status;
  EXPECT_NE(h.status.message().find("holds 3 values that are not finite or beyond +-1e18 (first at index " +
                                    std::to_string(n / 2)),
            std::string::npos)
      << h.status;
  EXPECT_EQ(shard.updates_applied(), 0u);
  h = push({});
  EXPECT_TRUE(h.status.ok()) << h.status;
  EXPECT_EQ(shard.updates_applied(), 1u);
  EXPECT_FLOAT_EQ(shard.Read(0).values[n - 1], 0.5f - 0.05f * 1e-3f);
}

// A BSP shard keeps each push until its round closes. The check copies
// fp32 values into the kept buffer as it reads them (split over threads
// here) and compressed ones are decoded straight into it: the round must
// come out bit for bit as from the plain Push of the same values, and a
// message refused for its second chunk must leave nothing of its first.
TEST(RequestsKeptPushTest, BspRoundsTakeTheCheckedCopyBitForBit) {
  constexpr uint32_t n = 1 << 20;  // 4 MiB: 3 pieces on 3 threads
  ShardOptions o;
  o.staleness_bound = 0;
  o.threads = 3;
  o.optimizer.momentum = 0.9;
  ShardState via_requests(o, cluster::ChunkLayout(2 * n, n), {0, 1}), direct(o, cluster::ChunkLayout(2 * n, n), {0, 1});
  ASSERT_TRUE(via_requests.HoldsPushes());
  std::vector<float> init(n), g0(n), g1(n);
  for (uint32_t i = 0; i < n; ++i) {
    init[i] = 0.25f + 1e-6f * static_cast<float>(i % 977);
    g0[i] = std::sin(0.001f * static_cast<float>(i));
    g1[i] = std::cos(0.003f * static_cast<float>(i)) - 0.5f;
  }
  for (ShardState* s : {&via_requests, &direct})
    for (uint32_t c : {0u, 1u}) ASSERT_TRUE(s->Init(c, init.data()));
  ClockTable clocks(2);
  clocks.SetLive({0, 1}, {0, 0});
  RequestDecoder decoder;
  ShardContext ctx{.shard = &via_requests, .clocks = &clocks, .server_id = 0, .num_workers = 2, .decoder = &decoder};

  // Worker 1 sends int8: the values a plain Push gets are the decoded ones.
  compression::Encoder int8(*compression::ParseCodecSpec("int8"), 7);
  std::vector<uint8_t> bytes;
  compression::PayloadInfo info;
  std::vector<float> g1_sent(n);
  ASSERT_TRUE(int8.Encode(g1.data(), n, &bytes, &info, g1_sent.data()).ok());
  auto push = [&](int worker, int64_t clock, const std::vector<std::pair<uint32_t, const void*>>& chunks, size_t size,
                  const compression::PayloadInfo* codec) {
    transport::Message m;
    m.header.set_sender_role(wire::WORKER);
    m.header.set_sender_id(worker);
    m.header.mutable_push_request()->set_clock(clock);
    for (auto [id, data] : chunks) {
      auto* d = m.header.mutable_push_request()->add_chunks();
      d->set_chunk_id(id);
      d->set_num_elems(n);
      d->set_codec(wire::FP32);
      if (codec) codec->ToWire(d);
      m.frames.emplace_back(data, size);
    }
    return ApplyPush(ctx, std::move(m));
  };
  // Refused whole for a NaN in its second chunk: the first is not kept.
  std::vector<float> bad = g0;
  bad[n - 3] = std::numeric_limits<float>::quiet_NaN();
  Handled h = push(0, 0, {{0, g0.data()}, {1, bad.data()}}, n * sizeof(float), nullptr);
  EXPECT_EQ(h.reason, wire::REFUSAL_NON_FINITE) << h.status;
  EXPECT_FALSE(via_requests.HasOpenRounds());

  h = push(0, 0, {{0, g0.data()}, {1, g1.data()}}, n * sizeof(float), nullptr);
  ASSERT_TRUE(h.status.ok()) << h.status;
  EXPECT_TRUE(via_requests.HasOpenRounds());
  h = push(1, 0, {{0, bytes.data()}, {1, bytes.data()}}, bytes.size(), &info);
  ASSERT_TRUE(h.status.ok()) << h.status;
  EXPECT_FALSE(via_requests.HasOpenRounds());  // the last push of clock 0 closed its rounds
  direct.Push(0, 0, 0, 0, g0.data(), 2);
  direct.Push(0, 0, 1, 0, g1.data(), 2);
  direct.Push(1, 0, 0, 0, g1_sent.data(), 2);
  direct.Push(1, 0, 1, 0, g1_sent.data(), 2);
  EXPECT_EQ(direct.CloseRounds(clocks), 2);
  for (uint32_t c : {0u, 1u}) {
    auto a = via_requests.Read(c), b = direct.Read(c);
    EXPECT_EQ(a.version, 1u);
    EXPECT_EQ(std::memcmp(a.values.get(), b.values.get(), n * sizeof(float)), 0) << "chunk " << c;
    EXPECT_NE(a.values[5], init[5]);
  }
}

// Regression: clock INT64_MAX overflowed clock + 1 (UB) in
// the clock table.
TEST_F(RequestsTest, ClockBeyondAnyJobIsRefused) {
  Handled h = ApplyPush(Ctx(), Push(INT64_MAX, 1.0f));
  EXPECT_EQ(h.reason, wire::REFUSAL_BAD_CLOCK);
  EXPECT_EQ(shard_.LastClock(0, 0), -1);
}

// Regression: a pull with a negative clock was served as a "final" read,
// skipping the staleness bound.
TEST_F(RequestsTest, PullWithNegativeClockIsRefused) {
  transport::Message m;
  m.header.set_sender_role(wire::WORKER);
  m.header.mutable_pull_request()->set_clock(-5);
  wire::Refusal reason = wire::REFUSAL_UNSPECIFIED;
  std::vector<uint32_t> chunks;
  Status s = ValidatePull(Ctx(), m, &reason, &chunks);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(reason, wire::REFUSAL_BAD_CLOCK);
  m.header.mutable_pull_request()->set_clock(3);
  ASSERT_TRUE(ValidatePull(Ctx(), m, &reason, &chunks).ok());
  EXPECT_EQ(chunks, (std::vector<uint32_t>{0, 1}));
}

// Issue 14: on a plaintext job pulls as workers -7 and 2^31-1 were served
// parameters. Every worker request names a member of the job; Server::Refuse
// counts the refusal under RefusalName(reason).
TEST_F(RequestsTest, PullFromANonMemberIsRefused) {
  for (int id : {-7, 2, INT32_MAX}) {
    EXPECT_EQ(PullRefusal(Pull(wire::WORKER, id, 0)), wire::REFUSAL_BAD_SENDER) << id;
  }
  EXPECT_EQ(PullRefusal(Pull(wire::EVALUATOR, 3, 0)), wire::REFUSAL_BAD_SENDER);
  EXPECT_EQ(PullRefusal(Pull(wire::SERVER, 0, 0)), wire::REFUSAL_BAD_SENDER);
  EXPECT_EQ(transport::RefusalName(wire::REFUSAL_BAD_SENDER), "bad_sender");
  // Members pass.
  EXPECT_EQ(PullRefusal(Pull(wire::WORKER, 1, 0)), wire::REFUSAL_UNSPECIFIED);
  EXPECT_EQ(PullRefusal(Pull(wire::EVALUATOR, kEvaluatorId, 0)), wire::REFUSAL_UNSPECIFIED);
  EXPECT_EQ(PullRefusal(Pull(wire::CLIENT, 12345, 0)), wire::REFUSAL_UNSPECIFIED);
}

// Clocks beyond the job's last are refused: a pull may ask for the state
// after the last clock (100 here), a push only for clocks 0..99.
TEST_F(RequestsTest, ClocksBeyondTheJobAreRefused) {
  EXPECT_EQ(PullRefusal(Pull(wire::WORKER, 0, 100)), wire::REFUSAL_UNSPECIFIED);
  EXPECT_EQ(PullRefusal(Pull(wire::WORKER, 0, 101)), wire::REFUSAL_BAD_CLOCK);
  EXPECT_EQ(PullRefusal(Pull(wire::WORKER, 0, int64_t{1} << 40)), wire::REFUSAL_BAD_CLOCK);
  EXPECT_EQ(PullRefusal(Pull(wire::EVALUATOR, 0, -1)), wire::REFUSAL_BAD_CLOCK);
  Handled h = ApplyPush(Ctx(), Push(100, 1.0f));
  EXPECT_EQ(h.reason, wire::REFUSAL_BAD_CLOCK) << h.status;
  EXPECT_EQ(shard_.updates_applied(), 0u);
  EXPECT_EQ(clocks_.ClockOf(0), 0);
  // Clock 99 once the live window has reached it (CheckPushWindow).
  clocks_.Finished(0, 90);
  clocks_.Finished(1, 90);
  h = ApplyPush(Ctx(), Push(99, 1.0f));
  EXPECT_TRUE(h.status.ok()) << h.status;
}

// A forged push for a far clock was taken: on a BSP shard it held a round
// (memory) until that clock, and on any shard the worker's genuine push of
// that clock was later answered DUPLICATE and dropped. A push may be at
// most kPushWindow clocks beyond the slowest live worker's clock + the bound.
TEST_F(RequestsTest, APushBeyondTheLiveWindowIsRefusedAndShadowsNothing) {
  const int64_t edge = 0 + 2 + kPushWindow;  // slowest live worker at 0, bound 2
  Handled h = ApplyPush(Ctx(), Push(edge + 1, 1e3f));
  EXPECT_EQ(h.reason, wire::REFUSAL_BAD_CLOCK) << h.status;
  EXPECT_NE(h.status.message().find("beyond the live window"), std::string::npos) << h.status;
  EXPECT_EQ(shard_.LastClock(0, 0), -1);
  EXPECT_EQ(clocks_.ClockOf(0), 0);
  EXPECT_TRUE(ApplyPush(Ctx(), Push(edge, 1.0f)).status.ok());
  // A worker's own pushes cannot walk the window: only the slowest live
  // worker moves it.
  for (int64_t c = edge + 1; c < edge + 40; ++c)
    EXPECT_EQ(ApplyPush(Ctx(), Push(c, 1e3f)).reason, wire::REFUSAL_BAD_CLOCK);
  // Once the job gets there, the genuine push of that clock is applied.
  clocks_.Finished(0, edge);
  clocks_.Finished(1, edge);
  ASSERT_EQ(clocks_.MinClock(), edge + 1);
  h = ApplyPush(Ctx(), Push(edge + 1, 1.0f));
  ASSERT_TRUE(h.status.ok()) << h.status;
  EXPECT_EQ(h.reply.push_ack().result(), wire::APPLIED);
}

// A worker that died and rejoins is seeded at the coordinator's view of the
// live clock, which lags the others' pushes here (by hundreds of clocks when
// steps take a millisecond): the window stays where the live set had got
// to, so the others' next pushes are taken (a CI run lost two workers so).
TEST_F(RequestsTest, ARejoinSeededBehindTheLiveClockRefusesNoOnesPush) {
  for (int64_t c = 0; c < 12; ++c) clocks_.Finished(0, c), clocks_.Finished(1, c);
  clocks_.SetLive({0}, {12});  // worker 1 died at clock 12; worker 0 goes on
  for (int64_t c = 12; c < 40; ++c) clocks_.Finished(0, c);
  clocks_.SetLive({0, 1}, {40, 12});  // worker 1 rejoins where it was
  ASSERT_EQ(clocks_.MinClock(), 12);
  Handled h = ApplyPush(Ctx(), Push(40, 1.0f));
  EXPECT_TRUE(h.status.ok()) << h.status;
  h = ApplyPush(Ctx(), Push(40 + 2 + kPushWindow + 1, 1.0f));
  EXPECT_EQ(h.reason, wire::REFUSAL_BAD_CLOCK) << h.status;
}

// Fully asynchronous jobs have no live window; a push may be at most
// kPushWindow clocks beyond the sender's own clock here (or the slowest
// live worker's, for a worker that rejoins at the live clock).
TEST_F(RequestsTest, AnAsynchronousPushIsMeasuredFromItsSendersClock) {
  ClockTable unbounded(kUnboundedStaleness);
  unbounded.SetLive({0, 1}, {0, 0});
  ShardContext ctx = Ctx();
  ctx.clocks = &unbounded;
  EXPECT_EQ(ApplyPush(ctx, Push(kPushWindow + 1, 1.0f)).reason, wire::REFUSAL_BAD_CLOCK);
  EXPECT_TRUE(ApplyPush(ctx, Push(kPushWindow, 1.0f)).status.ok());
  // A fast worker far ahead of a slow one is not held back.
  unbounded.Finished(0, 60);
  EXPECT_TRUE(ApplyPush(ctx, Push(61 + kPushWindow, 1.0f)).status.ok());
  EXPECT_EQ(ApplyPush(ctx, Push(62 + 2 * kPushWindow, 1.0f)).reason, wire::REFUSAL_BAD_CLOCK);
}

// A pull names chunks of this shard: one beyond the model is out of range,
// one another shard owns is not owned (it was labelled out of range).
TEST(RequestsPullTest, AChunkOfAnotherShardIsNotOwnedNotOutOfRange) {
  ShardState shard(ShardOptions{}, cluster::ChunkLayout(16, 8), {0});
  ClockTable clocks(2);
  RequestDecoder decoder;
  ShardContext ctx{.shard = &shard, .clocks = &clocks, .server_id = 0, .num_workers = 1, .decoder = &decoder};
  auto refusal = [&](uint32_t chunk) {
    transport::Message m;
    m.header.set_sender_role(wire::WORKER);
    m.header.mutable_pull_request()->set_clock(0);
    m.header.mutable_pull_request()->add_chunk_ids(chunk);
    wire::Refusal reason = wire::REFUSAL_UNSPECIFIED;
    std::vector<uint32_t> chunks;
    (void)ValidatePull(ctx, m, &reason, &chunks);
    return reason;
  };
  EXPECT_EQ(refusal(0), wire::REFUSAL_UNSPECIFIED);
  EXPECT_EQ(refusal(1), wire::REFUSAL_CHUNK_NOT_OWNED);
  EXPECT_EQ(refusal(2), wire::REFUSAL_CHUNK_OUT_OF_RANGE);
}

TEST_F(RequestsTest, PushesAndInitsFromNonMembersAreRefusedWhole) {
  for (int id : {-7, 2, INT32_MAX}) {
    transport::Message m = Push(0, 1.0f);
    m.header.set_sender_id(id);
    Handled h = ApplyPush(Ctx(), m);
    EXPECT_EQ(h.reason, wire::REFUSAL_BAD_SENDER) << id;
    auto chunks = m.header.push_request().chunks();
    *m.header.mutable_init_request()->mutable_chunks() = chunks;
    h = ApplyInit(Ctx(), m);
    EXPECT_EQ(h.reason, wire::REFUSAL_BAD_SENDER) << id;
  }
  EXPECT_EQ(shard_.updates_applied(), 0u);
  EXPECT_FALSE(clocks_.IsLive(2));
}

}  // namespace
}  // namespace geodesic::server

namespace geodesic::server {
namespace {

// A skipped push that names chunks (training.fragments) skips only those;
// it names each owned chunk once, with its size, and carries no payload.
TEST_F(RequestsTest, SkippedChunksAreCheckedAndSkipOnlyThemselves) {
  auto skip = [](std::vector<std::pair<uint32_t, uint64_t>> chunks) {
    transport::Message m;
    m.header.set_sender_role(wire::WORKER);
    m.header.set_sender_id(0);
    auto* p = m.header.mutable_push_request();
    p->set_clock(0);
    p->set_skipped(true);
    for (auto [id, n] : chunks) {
      auto* d = p->add_chunks();
      d->set_chunk_id(id);
      d->set_num_elems(n);
    }
    return m;
  };
  struct Bad {
    transport::Message m;
    wire::Refusal reason;
  };
  std::vector<Bad> bad;
  bad.push_back({skip({{2, 8}}), wire::REFUSAL_CHUNK_OUT_OF_RANGE});
  bad.push_back({skip({{1, 8}, {1, 8}}), wire::REFUSAL_DUPLICATE_CHUNK});
  bad.push_back({skip({{1, 7}}), wire::REFUSAL_WRONG_SHAPE});
  bad.push_back({skip({{1, 8}}), wire::REFUSAL_FRAME_COUNT});
  std::vector<float> values(8, 1.0f);
  bad.back().m.frames.emplace_back(values.data(), values.size() * sizeof(float));
  for (const Bad& b : bad) {
    Handled h = ApplyPush(Ctx(), b.m);
    EXPECT_EQ(h.reason, b.reason) << h.status;
    EXPECT_FALSE(h.completed);
  }
  EXPECT_EQ(shard_.LastClock(0, 1), -1) << "a refused skip records nothing";

  ShardState other(BoundTwo(), cluster::ChunkLayout(16, 8), {0});
  ShardContext ctx = Ctx();
  ctx.shard = &other;
  EXPECT_EQ(ApplyPush(ctx, skip({{1, 8}})).reason, wire::REFUSAL_CHUNK_NOT_OWNED);

  Handled h = ApplyPush(Ctx(), skip({{1, 8}}));
  ASSERT_TRUE(h.status.ok()) << h.status;
  EXPECT_EQ(h.reply.push_ack().result(), wire::APPLIED);
  EXPECT_FALSE(h.completed) << "chunk 0 is neither pushed nor skipped yet";
  EXPECT_EQ(shard_.LastClock(0, 1), 0);
  EXPECT_EQ(shard_.LastClock(0, 0), -1);
  EXPECT_EQ(ApplyPush(Ctx(), skip({{1, 8}})).reply.push_ack().result(), wire::DUPLICATE);
  h = ApplyPush(Ctx(), Push(0, 1.0f));
  ASSERT_TRUE(h.status.ok()) << h.status;
  EXPECT_TRUE(h.completed) << "chunk 0 pushed, chunk 1 skipped: clock 0 is done";
  EXPECT_EQ(shard_.updates_applied(), 1u);
}

// Elastic jobs: every push names a data unit within the job; other jobs'
// pushes name none. Anything else is refused whole.
TEST_F(RequestsTest, DataUnitsMustMatchTheJob) {
  transport::Message m = Push(0, 1.0f);
  m.header.mutable_push_request()->set_unit(3);
  Handled h = ApplyPush(Ctx(), m);  // not an elastic job
  EXPECT_EQ(h.reason, wire::REFUSAL_BAD_UNIT) << h.status;
  ShardContext elastic = Ctx();
  elastic.total_units = 10;
  h = ApplyPush(elastic, Push(0, 1.0f));  // no unit
  EXPECT_EQ(h.reason, wire::REFUSAL_BAD_UNIT) << h.status;
  for (int64_t unit : {int64_t{10}, int64_t{-1}, INT64_MAX}) {
    m.header.mutable_push_request()->set_unit(unit);
    h = ApplyPush(elastic, m);
    EXPECT_EQ(h.reason, wire::REFUSAL_BAD_UNIT) << unit;
    EXPECT_NE(h.status.message().find("unit"), std::string::npos) << h.status;
  }
  EXPECT_EQ(shard_.updates_applied(), 0u);
  m.header.mutable_push_request()->set_unit(9);
  h = ApplyPush(elastic, m);
  EXPECT_TRUE(h.status.ok()) << h.status;
}

}  // namespace
}  // namespace geodesic::server
