// The primary's side of replication, in-process: a fake link to the backup
// (what it was sent; what it answers), a fake reply sink for the workers'
// acknowledgements, and a FakeClock for the resend timers.
#include "server/replicator.h"

#include <gtest/gtest.h>

#include "tests/server/fake_links.h"

namespace geodesic::server {
namespace {

constexpr char kBackup[] = "tcp://backup.example:7000";

JobSpec ReplicatedJob() {
  JobSpec job;
  job.membership.heartbeat_ms = 100;  // at most one gap-triggered resend per 100 ms
  job.membership.lease_ms = 6000;     // an unacknowledged op goes again after 3 s
  return job;
}

class ReplicatorTest : public ::testing::Test {
 protected:
  ReplicatorTest() : replicator_(job_, &clock_, connector_.Get(), &replies_) {
    EXPECT_TRUE(replicator_.Connect(kBackup, "backup-key").ok());
    link_ = connector_.links[kBackup];
  }

  // Worker `w`'s push of `clock`, request `id`, as the shard took it, and
  // the acknowledgement the shard made for it.
  void Push(int w, int64_t clock, uint64_t id) {
    transport::Message m;
    m.peer = "peer-" + std::to_string(w);
    m.header.set_sender_role(wire::WORKER);
    m.header.set_sender_id(w);
    m.header.set_request_id(id);
    m.header.mutable_push_request()->set_clock(clock);
    wire::Header ack;
    ack.set_request_id(id);
    ack.mutable_push_ack()->set_applied_chunks(1);
    replicator_.Replicate(m, std::move(ack));
  }

  // The backup answers.
  void Answer(wire::Header h) {
    link_->inbox.push_back(std::move(h));
    replicator_.Drain();
  }
  void AckThrough(uint64_t seq) {
    wire::Header h;
    h.mutable_replicate_ack()->set_seq(seq);
    Answer(std::move(h));
  }
  void Refuse(wire::Refusal reason) {
    wire::Header h;
    h.mutable_error_reply()->set_reason(reason);
    h.mutable_error_reply()->set_message("refused (test)");
    Answer(std::move(h));
  }

  std::vector<uint64_t> AckedRequests() const {
    std::vector<uint64_t> ids;
    for (const auto& s : replies_.sent) ids.push_back(s.header.request_id());
    return ids;
  }
  stats::ShardStats Stats() const {
    stats::ShardStats s;
    replicator_.AddStats(&s);
    return s;
  }

  JobSpec job_ = ReplicatedJob();
  FakeClock clock_;
  testing::FakeConnector connector_;
  testing::FakeReplies replies_;
  Replicator replicator_;
  testing::FakeLink* link_ = nullptr;
};

TEST_F(ReplicatorTest, ConnectsToTheBackupWithItsKey) {
  ASSERT_NE(link_, nullptr);
  EXPECT_EQ(connector_.keys[kBackup], "backup-key");
  EXPECT_TRUE(replicator_.active());
  EXPECT_EQ(replicator_.pollable(), nullptr) << "a fake link has no socket to wait on";
}

TEST_F(ReplicatorTest, AWorkersAcknowledgementWaitsForTheBackups) {
  Push(0, 5, 11);
  ASSERT_EQ(link_->sent.size(), 1u);
  const auto& op = link_->sent[0].header.replicate_request();
  EXPECT_EQ(op.seq(), 1u);
  EXPECT_EQ(op.worker(), 0);
  EXPECT_EQ(op.request_id(), 11u);
  EXPECT_EQ(op.push().clock(), 5);
  EXPECT_TRUE(replies_.sent.empty()) << "held until the backup has the op";
  AckThrough(1);
  ASSERT_EQ(AckedRequests(), std::vector<uint64_t>{11});
  EXPECT_EQ(replies_.sent[0].peer, "peer-0");
  EXPECT_TRUE(replies_.sent[0].header.has_push_ack());
  EXPECT_EQ(Stats().replication_ops_pending(), 0u);
}

TEST_F(ReplicatorTest, OneAcknowledgementReleasesEveryEarlierOpInOrder) {
  Push(0, 0, 1);
  Push(1, 0, 2);
  Push(0, 1, 3);
  AckThrough(2);
  EXPECT_EQ(AckedRequests(), (std::vector<uint64_t>{1, 2}));
  AckThrough(2);  // a duplicate ack releases nothing twice
  EXPECT_EQ(AckedRequests(), (std::vector<uint64_t>{1, 2}));
  AckThrough(3);
  EXPECT_EQ(AckedRequests(), (std::vector<uint64_t>{1, 2, 3}));
}

TEST_F(ReplicatorTest, UnacknowledgedOpsGoAgainAfterTheRetryTime) {
  Push(0, 0, 1);
  Push(1, 0, 2);
  replicator_.Drain();
  EXPECT_EQ(link_->sent.size(), 2u);
  clock_.Advance(std::chrono::milliseconds(2999));
  replicator_.Drain();
  EXPECT_EQ(link_->sent.size(), 2u) << "half the lease (3 s) has not passed";
  clock_.Advance(std::chrono::milliseconds(1));
  replicator_.Drain();
  ASSERT_EQ(link_->sent.size(), 4u);
  EXPECT_EQ(link_->sent[2].header.replicate_request().seq(), 1u) << "oldest first";
  EXPECT_EQ(link_->sent[3].header.replicate_request().seq(), 2u);
  EXPECT_EQ(Stats().replication_ops_resent(), 2u);
  EXPECT_TRUE(replies_.sent.empty()) << "a resend acknowledges nothing";
}

TEST_F(ReplicatorTest, AGapGetsTheOpsAgainAtOnceButAtMostOncePerHeartbeat) {
  Push(0, 0, 1);
  Refuse(wire::REFUSAL_REPLICATION_GAP);
  EXPECT_EQ(link_->sent.size(), 2u) << "sent again at once";
  Refuse(wire::REFUSAL_REPLICATION_GAP);
  EXPECT_EQ(link_->sent.size(), 2u) << "a storm of complaints is not a storm of resends";
  clock_.Advance(std::chrono::milliseconds(100));
  Refuse(wire::REFUSAL_REPLICATION_GAP);
  EXPECT_EQ(link_->sent.size(), 3u);
  EXPECT_TRUE(replicator_.fenced().empty());
}

TEST_F(ReplicatorTest, AnOpTheLinkCouldNotQueueStaysPendingAndGoesAgain) {
  link_->full = true;
  Push(0, 0, 1);
  EXPECT_TRUE(link_->sent.empty());
  EXPECT_EQ(Stats().replication_ops_pending(), 1u);
  link_->full = false;
  clock_.Advance(std::chrono::seconds(3));
  replicator_.Drain();
  ASSERT_EQ(link_->sent.size(), 1u);
  AckThrough(1);
  EXPECT_EQ(AckedRequests(), std::vector<uint64_t>{1});
}

TEST_F(ReplicatorTest, APromotedBackupFencesThePrimaryAndNothingHeldIsAcknowledged) {
  Push(0, 0, 1);
  Refuse(wire::REFUSAL_NOT_BACKUP);
  EXPECT_NE(replicator_.fenced().find("promoted"), std::string::npos) << replicator_.fenced();
  EXPECT_TRUE(replies_.sent.empty()) << "the worker sends it again to the new primary";
  EXPECT_EQ(Stats().replication_ops_pending(), 0u);
}

TEST_F(ReplicatorTest, AnOpTheBackupRefusesFencesThePrimary) {
  Push(0, 0, 1);
  Refuse(wire::REFUSAL_WRONG_SHAPE);
  EXPECT_NE(replicator_.fenced().find("refused a replication op"), std::string::npos) << replicator_.fenced();
  EXPECT_TRUE(replies_.sent.empty());
}

TEST_F(ReplicatorTest, DegradedItAcknowledgesWhatItHeldAndStopsReplicating) {
  Push(0, 0, 1);
  Push(1, 0, 2);
  replicator_.Degrade("the coordinator declared the backup dead");
  EXPECT_EQ(AckedRequests(), (std::vector<uint64_t>{1, 2}));
  EXPECT_FALSE(replicator_.active());
  replicator_.ReplicateLive({0}, {1});
  clock_.Advance(std::chrono::seconds(10));
  replicator_.Drain();
  EXPECT_EQ(link_->sent.size(), 2u) << "nothing more goes to a degraded backup";
  EXPECT_TRUE(Stats().replication_degraded());
}

TEST_F(ReplicatorTest, TheLiveSetGoesWhenItChangesAndItsAckHoldsNothing) {
  replicator_.ReplicateLive({0, 1}, {3, 3});
  replicator_.ReplicateLive({0, 1}, {3, 3});
  ASSERT_EQ(link_->sent.size(), 1u);
  EXPECT_EQ(link_->sent[0].header.replicate_request().seq(), 1u);
  replicator_.ReplicateLive({0}, {4});
  EXPECT_EQ(link_->sent.size(), 2u);
  AckThrough(2);
  EXPECT_TRUE(replies_.sent.empty());
  EXPECT_EQ(Stats().replication_ops_pending(), 0u);
}

}  // namespace
}  // namespace geodesic::server
