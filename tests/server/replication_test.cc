// Replication ops (server/requests.h): a backup that applies a primary's
// ordered op log ends with the primary's exact bytes, and refuses ops from
// anyone but its primary, out of order, or malformed.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "server/requests.h"

namespace geodesic::server {
namespace {

constexpr int kWorkers = 3;

OptimizerSpec Optimizer(const char* name) {
  OptimizerSpec o;
  o.name = *FromString<OptimizerKind>(name);
  o.lr = 0.1;
  o.momentum = 0.9;
  return o;
}

// One shard replica: its state, clocks and decoder.
struct Replica {
  Replica(int64_t bound, const char* optimizer)
      : shard(ShardOptions{.staleness_bound = bound, .optimizer = Optimizer(optimizer), .total_clocks = 100},
              cluster::ChunkLayout(40, 16), {0, 1, 2}),
        clocks(bound) {
    clocks.SetLive({0, 1, 2}, {0, 0, 0});
  }
  ShardContext Ctx() {
    return ShardContext{
        .shard = &shard, .clocks = &clocks, .server_id = 4, .num_workers = kWorkers, .decoder = &decoder};
  }
  std::string Bytes() const { return shard.ToCheckpoint(clocks.MinClock()).SerializeAsString(); }

  ShardState shard;
  ClockTable clocks;
  RequestDecoder decoder;
  uint64_t applied_seq = 0;
};

transport::Message Request(int worker, bool init, int64_t clock, const std::vector<uint32_t>& chunks,
                           std::mt19937& rng) {
  transport::Message m;
  m.header.set_sender_role(wire::WORKER);
  m.header.set_sender_id(worker);
  m.header.set_request_id(rng());
  std::normal_distribution<float> normal;
  for (uint32_t c : chunks) {
    wire::ChunkData* d =
        init ? m.header.mutable_init_request()->add_chunks() : m.header.mutable_push_request()->add_chunks();
    d->set_chunk_id(c);
    d->set_codec(wire::FP32);
    d->set_num_elems(c == 2 ? 8 : 16);
    d->set_version(0);
    std::vector<float> v(d->num_elems());
    for (float& x : v) x = normal(rng);
    m.frames.emplace_back(v.data(), v.size() * sizeof(float));
  }
  if (!init) m.header.mutable_push_request()->set_clock(clock);
  m.header.set_payload_frames(static_cast<uint32_t>(m.frames.size()));
  return m;
}

// What the primary's server loop sends for `op`: the header from the primary
// (server 4) and a copy of the request's frames.
transport::Message Forward(wire::Header op, const std::vector<transport::Payload>& frames) {
  transport::Message m;
  m.header = std::move(op);
  m.header.set_sender_role(wire::SERVER);
  m.header.set_sender_id(4);
  for (const auto& f : frames) m.frames.emplace_back(f.data, f.size);
  m.header.set_payload_frames(static_cast<uint32_t>(m.frames.size()));
  return m;
}

// Runs the same random workload through a primary (as the server loop
// does) and, via ReplicateOp / ApplyReplicate, through a backup: inits,
// pushes in a shuffled order, resent duplicates, a worker that leaves.
void PrimaryAndBackupAgree(int64_t bound, const char* optimizer) {
  Replica primary(bound, optimizer), backup(bound, optimizer);
  std::mt19937 rng(7);
  uint64_t seq = 0;
  auto replicate = [&](wire::Header op, const std::vector<transport::Payload>& frames) {
    transport::Message fwd = Forward(std::move(op), frames);
    Handled h = ApplyReplicate(backup.Ctx(), &backup.applied_seq, fwd);
    ASSERT_TRUE(h.status.ok()) << h.status;
    EXPECT_EQ(h.reply.replicate_ack().seq(), seq);
  };
  for (int w = 0; w < kWorkers; ++w) {
    transport::Message m = Request(w, /*init=*/true, 0, {0, 1, 2}, rng);
    ASSERT_TRUE(ApplyInit(primary.Ctx(), m).status.ok());
    replicate(ReplicateOp(++seq, m), TakeFrames(m));
  }
  std::vector<int> live = {0, 1, 2};
  for (int64_t clock = 0; clock < 12; ++clock) {
    if (clock == 6) {  // worker 2 leaves
      live = {0, 1};
      std::vector<int64_t> clocks = {primary.clocks.ClockOf(0), primary.clocks.ClockOf(1)};
      primary.clocks.SetLive(live, clocks);
      primary.shard.CloseRounds(primary.clocks);
      replicate(ReplicateMembership(++seq, live, clocks), {});
    }
    std::vector<std::pair<int, uint32_t>> pushes;
    for (int w : live)
      for (uint32_t c : {0u, 1u, 2u}) pushes.push_back({w, c});
    std::shuffle(pushes.begin(), pushes.end(), rng);
    for (auto [w, c] : pushes) {
      transport::Message m = Request(w, false, clock, {c}, rng);
      Handled h = ApplyPush(primary.Ctx(), m);
      ASSERT_TRUE(h.status.ok()) << h.status;
      std::vector<transport::Payload> frames = TakeFrames(m);
      replicate(ReplicateOp(++seq, m), frames);
      if (rng() % 4 == 0) {  // the worker resends: a duplicate on both
        transport::Message again;
        again.header = m.header;
        for (const auto& f : frames) again.frames.emplace_back(f.data, f.size);
        Handled d = ApplyPush(primary.Ctx(), again);
        ASSERT_EQ(d.reply.push_ack().result(), wire::DUPLICATE);
        replicate(ReplicateOp(++seq, again), TakeFrames(again));
      }
    }
  }
  EXPECT_GT(primary.shard.updates_applied(), 0u);
  EXPECT_EQ(backup.shard.updates_applied(), primary.shard.updates_applied());
  EXPECT_EQ(backup.shard.duplicates(), primary.shard.duplicates());
  EXPECT_EQ(backup.clocks.MinClock(), primary.clocks.MinClock());
  EXPECT_EQ(backup.Bytes(), primary.Bytes());  // values, optimizer state, versions, clocks: bit for bit
  for (uint32_t c : {0u, 1u, 2u})
    EXPECT_EQ(std::memcmp(backup.shard.Read(c).values.get(), primary.shard.Read(c).values.get(),
                          primary.shard.layout().Size(c) * sizeof(float)),
              0);
}

TEST(ReplicationTest, BspBackupEndsBitIdentical) { PrimaryAndBackupAgree(0, "sgd"); }
TEST(ReplicationTest, AsyncBackupEndsBitIdentical) { PrimaryAndBackupAgree(3, "sgd"); }
TEST(ReplicationTest, AdamBackupEndsBitIdentical) { PrimaryAndBackupAgree(3, "adam"); }

class ReplicationRefusalTest : public ::testing::Test {
 protected:
  ReplicationRefusalTest() : backup_(3, "sgd") {
    std::mt19937 rng(1);
    transport::Message init = Request(0, true, 0, {0, 1, 2}, rng);
    EXPECT_TRUE(ApplyInit(backup_.Ctx(), init).status.ok());
  }
  transport::Message Op(uint64_t seq) {
    std::mt19937 rng(seq);
    transport::Message m = Request(1, false, 0, {1}, rng);
    return Forward(ReplicateOp(seq, m), TakeFrames(m));
  }
  Replica backup_;
};

TEST_F(ReplicationRefusalTest, OnlyThePrimaryMayReplicate) {
  for (auto [role, id] : {std::pair{wire::WORKER, 4}, {wire::SERVER, 3}, {wire::CLIENT, 4}}) {
    transport::Message m = Op(1);
    m.header.set_sender_role(role);
    m.header.set_sender_id(id);
    Handled h = ApplyReplicate(backup_.Ctx(), &backup_.applied_seq, m);
    EXPECT_EQ(h.reason, wire::REFUSAL_BAD_SENDER) << h.status;
    EXPECT_EQ(h.status.code(), Code::kPermissionDenied);
  }
  EXPECT_EQ(backup_.applied_seq, 0u);
  EXPECT_EQ(backup_.shard.LastClock(1, 1), -1);
}

TEST_F(ReplicationRefusalTest, GapIsRefusedAndDuplicateChangesNothing) {
  transport::Message gap = Op(2);
  Handled h = ApplyReplicate(backup_.Ctx(), &backup_.applied_seq, gap);
  EXPECT_EQ(h.reason, wire::REFUSAL_REPLICATION_GAP) << h.status;
  EXPECT_EQ(backup_.shard.updates_applied(), 0u);

  transport::Message first = Op(1);
  ASSERT_TRUE(ApplyReplicate(backup_.Ctx(), &backup_.applied_seq, first).status.ok());
  EXPECT_EQ(backup_.shard.updates_applied(), 1u);
  const std::string bytes = backup_.Bytes();
  transport::Message again = Op(1);
  Handled d = ApplyReplicate(backup_.Ctx(), &backup_.applied_seq, again);
  ASSERT_TRUE(d.status.ok()) << d.status;
  EXPECT_EQ(d.reply.replicate_ack().seq(), 1u);
  EXPECT_EQ(backup_.Bytes(), bytes);
}

TEST_F(ReplicationRefusalTest, BadOpsAreRefusedWhole) {
  transport::Message none = Forward(wire::Header(), {});
  none.header.mutable_replicate_request()->set_seq(1);
  EXPECT_EQ(ApplyReplicate(backup_.Ctx(), &backup_.applied_seq, none).reason, wire::REFUSAL_BAD_OP);

  transport::Message zero = Op(0);
  EXPECT_EQ(ApplyReplicate(backup_.Ctx(), &backup_.applied_seq, zero).reason, wire::REFUSAL_BAD_SEQ);

  transport::Message stranger = Forward(ReplicateMembership(1, {0, 7}, {0, 0}), {});
  EXPECT_EQ(ApplyReplicate(backup_.Ctx(), &backup_.applied_seq, stranger).reason, wire::REFUSAL_BAD_MEMBERSHIP);

  transport::Message uneven = Forward(ReplicateMembership(1, {0, 1}, {0}), {});
  EXPECT_EQ(ApplyReplicate(backup_.Ctx(), &backup_.applied_seq, uneven).reason, wire::REFUSAL_BAD_MEMBERSHIP);

  // A push that fails the shard's checks (a non-finite value) is refused as a worker's would be.
  transport::Message bad = Op(1);
  float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bad.frames[0].data(), &nan, sizeof nan);
  EXPECT_EQ(ApplyReplicate(backup_.Ctx(), &backup_.applied_seq, bad).reason, wire::REFUSAL_NON_FINITE);
  EXPECT_EQ(backup_.applied_seq, 0u);
  EXPECT_EQ(backup_.shard.updates_applied(), 0u);
}

}  // namespace
}  // namespace geodesic::server
