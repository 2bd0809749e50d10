// A shard's part in re-planning, in-process: a source shard that follows an
// announced migration, exports its moving chunks over fake links, refuses
// requests for what moved and sends again until acknowledged; a destination
// that adopts each chunk once. A FakeClock drives the resend timer.
#include "server/migration.h"

#include <gtest/gtest.h>

#include "tests/server/fake_links.h"

namespace geodesic::server {
namespace {

constexpr uint64_t kChunk = 256;
constexpr char kDest[] = "tcp://shard-1.example:7001";

JobSpec ReplanJob() {
  JobSpec job;
  job.name = "m";
  job.regions = {RegionSpec{.name = "a", .servers = 2, .workers = 1, .max_workers = 1}};
  job.wan.replan = true;
  return job;
}

ShardOptions Bsp(int32_t id) {
  ShardOptions o;
  o.shard_id = id;
  o.staleness_bound = 0;
  return o;
}

// One shard's state and parts (`id` owns `owned` of 4 chunks).
struct ShardUnderTest {
  ShardUnderTest(const JobSpec& job, int id, std::vector<uint32_t> owned, const Clock* clock,
                 transport::PeerConnector connect)
      : shard(Bsp(id), cluster::ChunkLayout(4 * kChunk, kChunk), std::move(owned)),
        pulls(job, id, clock, &replies),
        migration(job, id, clock, std::move(connect)) {
    pulls.Start(&shard, &clocks, 1);
    migration.Start(&shard, &pulls, 1);
  }
  testing::FakeReplies replies;
  ShardState shard;
  ClockTable clocks{0};
  PullService pulls;
  Migration migration;
};

class MigrationTest : public ::testing::Test {
 protected:
  MigrationTest()
      : source_(job_, 0, {0, 1, 2, 3}, &clock_, connector_.Get()), dest_(job_, 1, {}, &clock_, dest_connector_.Get()) {
    for (uint32_t c = 0; c < 4; ++c) {
      std::vector<float> values(kChunk, 1.0f + static_cast<float>(c));
      EXPECT_TRUE(source_.shard.Init(c, values.data()));
    }
  }

  // The coordinator announces migration 1: chunks 2 and 3 go to shard 1.
  cluster::MembershipView Announced(bool transfer = true) const {
    cluster::MembershipView v;
    v.valid = true;
    v.migration.set_id(1);
    v.migration.set_transfer(transfer);
    *v.migration.mutable_new_map() =
        cluster::ShardMap{.layout = cluster::ChunkLayout(4 * kChunk, kChunk), .owner = {0, 0, 1, 1}, .version = 2}
            .ToWire();
    auto* si = v.migration.add_servers();
    si->set_id(1);
    si->set_endpoint(kDest);
    return v;
  }

  // What the source sent to the destination, as the destination's ROUTER
  // would hand it over (the socket stamps the sender).
  static transport::Message Delivered(const testing::SentMessage& s) {
    transport::Message m;
    m.peer = "peer-shard-0";
    m.header = s.header;
    m.header.set_sender_role(wire::SERVER);
    m.header.set_sender_id(0);
    for (const auto& p : s.payloads) m.frames.emplace_back(p.data(), p.size());
    return m;
  }

  static wire::Header AckOf(uint32_t chunk) {
    wire::Header h;
    h.mutable_chunk_transfer_ack()->set_migration_id(1);
    h.mutable_chunk_transfer_ack()->set_chunk_id(chunk);
    return h;
  }

  static wire::Header PullOf(uint32_t chunk) {
    wire::Header h;
    h.mutable_pull_request()->add_chunk_ids(chunk);
    return h;
  }

  JobSpec job_ = ReplanJob();
  FakeClock clock_;
  testing::FakeConnector connector_, dest_connector_;
  ShardUnderTest source_;
  ShardUnderTest dest_;
};

TEST_F(MigrationTest, NothingMovesUntilTheCoordinatorSaysTransfer) {
  source_.migration.Follow(Announced(/*transfer=*/false));
  EXPECT_FALSE(source_.migration.Sync());
  EXPECT_TRUE(connector_.links.empty());
  EXPECT_EQ(source_.shard.owned().size(), 4u);
}

TEST_F(MigrationTest, TheSourceSendsItsMovingChunksAndRefusesRequestsForThem) {
  source_.migration.Follow(Announced());
  EXPECT_FALSE(source_.migration.Sync()) << "not acknowledged yet";
  ASSERT_EQ(connector_.links.count(kDest), 1u);
  const auto& sent = connector_.links[kDest]->sent;
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].header.chunk_transfer().chunk_id(), 2u);
  EXPECT_EQ(sent[1].header.chunk_transfer().chunk_id(), 3u);
  EXPECT_EQ(sent[0].payloads[0].size(), kChunk * sizeof(float));
  EXPECT_EQ(connector_.keys[kDest], "") << "chunk transfers are plaintext";
  EXPECT_EQ(source_.shard.owned(), (std::vector<uint32_t>{0, 1}));
  // Rerouting: a pull naming a moved chunk is refused with where it went.
  auto moved = source_.migration.Moved(PullOf(3));
  ASSERT_TRUE(moved.has_value());
  EXPECT_NE(moved->message().find("moved to server 1"), std::string::npos) << moved->message();
  EXPECT_FALSE(source_.migration.Moved(PullOf(1)).has_value());
}

TEST_F(MigrationTest, UnacknowledgedChunksGoAgainEveryTwoSecondsUntilAcknowledged) {
  source_.migration.Follow(Announced());
  (void)source_.migration.Sync();
  testing::FakeLink* link = connector_.links[kDest];
  clock_.Advance(std::chrono::milliseconds(1999));
  EXPECT_FALSE(source_.migration.Sync());
  EXPECT_EQ(link->sent.size(), 2u);
  clock_.Advance(std::chrono::milliseconds(1));
  EXPECT_FALSE(source_.migration.Sync());
  EXPECT_EQ(link->sent.size(), 4u) << "both sent again";
  link->inbox.push_back(AckOf(2));
  source_.migration.Drain();
  EXPECT_FALSE(source_.migration.Sync());
  clock_.Advance(std::chrono::seconds(2));
  EXPECT_FALSE(source_.migration.Sync());
  ASSERT_EQ(link->sent.size(), 5u) << "only the unacknowledged chunk goes again";
  EXPECT_EQ(link->sent[4].header.chunk_transfer().chunk_id(), 3u);
  link->inbox.push_back(AckOf(3));
  source_.migration.Drain();
  EXPECT_TRUE(source_.migration.Sync()) << "every transfer acknowledged: tell the coordinator";
  EXPECT_EQ(source_.migration.done_for_heartbeat(), 1u);
  EXPECT_FALSE(source_.migration.Sync()) << "once";
}

TEST_F(MigrationTest, TheDestinationAdoptsEachChunkOnceAndAcknowledgesResends) {
  dest_.migration.Follow(Announced());
  source_.migration.Follow(Announced());
  (void)source_.migration.Sync();
  const auto& sent = connector_.links[kDest]->sent;
  for (const auto& s : sent) {
    Handled h = dest_.migration.Adopt(Delivered(s));
    ASSERT_TRUE(h.status.ok()) << h.status;
    EXPECT_EQ(h.reply.chunk_transfer_ack().chunk_id(), s.header.chunk_transfer().chunk_id());
  }
  EXPECT_EQ(dest_.shard.owned(), (std::vector<uint32_t>{2, 3}));
  auto snap = dest_.shard.Read(3);
  EXPECT_EQ(snap.values[0], 4.0f) << "chunk 3's values, as the source had them";
  EXPECT_EQ(snap.values[kChunk - 1], 4.0f);
  Handled again = dest_.migration.Adopt(Delivered(sent[0]));
  EXPECT_TRUE(again.status.ok()) << "a resend is acknowledged again: " << again.status;
  stats::ShardStats st;
  dest_.migration.AddStats(&st);
  EXPECT_EQ(st.migration_chunks_adopted(), 2u) << "and not adopted twice";
}

TEST_F(MigrationTest, TheDestinationRefusesTransfersItMayNotTake) {
  source_.migration.Follow(Announced());
  (void)source_.migration.Sync();
  transport::Message from_worker = Delivered(connector_.links[kDest]->sent[0]);
  from_worker.header.set_sender_role(wire::WORKER);
  EXPECT_EQ(dest_.migration.Adopt(from_worker).reason, wire::REFUSAL_BAD_SENDER);
  transport::Message not_ours = Delivered(connector_.links[kDest]->sent[0]);
  not_ours.header.mutable_chunk_transfer()->set_chunk_id(0);  // the map keeps chunk 0 on shard 0
  EXPECT_EQ(dest_.migration.Adopt(not_ours).reason, wire::REFUSAL_CHUNK_NOT_OWNED);
  transport::Message short_one = Delivered(connector_.links[kDest]->sent[0]);
  short_one.frames.clear();
  EXPECT_EQ(dest_.migration.Adopt(short_one).reason, wire::REFUSAL_WRONG_SHAPE);
  EXPECT_TRUE(dest_.shard.owned().empty());
}

TEST_F(MigrationTest, ADestinationThatCannotBeReachedGetsItsChunksOnceItCan) {
  connector_.refuse[kDest] = true;
  source_.migration.Follow(Announced());
  EXPECT_FALSE(source_.migration.Sync());
  EXPECT_EQ(source_.shard.owned(), (std::vector<uint32_t>{0, 1})) << "dropped here all the same: kept for resending";
  connector_.refuse.erase(kDest);
  clock_.Advance(std::chrono::seconds(2));
  EXPECT_FALSE(source_.migration.Sync());
  ASSERT_EQ(connector_.links.count(kDest), 1u);
  EXPECT_EQ(connector_.links[kDest]->sent.size(), 2u);
  EXPECT_GE(connector_.connects[kDest], 2);
}

}  // namespace
}  // namespace geodesic::server
