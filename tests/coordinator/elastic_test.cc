// Elastic jobs at the coordinator: its unit ledger and its membership (late
// ids, units given back by a worker that dies or leaves, a job that ends
// only when every unit is finished). The shards' side is
// tests/server/elastic_shard_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "coordinator/state.h"
#include "coordinator/unit_ledger.h"

namespace geodesic::coordinator {
namespace {

TEST(UnitLedgerTest, HandsOutEachUnitOnceAndGivesBackTheUnfinishedOnesFirst) {
  UnitLedger l(10);
  EXPECT_EQ(l.Report(0, {}, 3), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(l.Report(1, {}, 2), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(l.unassigned(), 5);
  // Worker 0 finished 0 and 1 and wants three held again.
  EXPECT_EQ(l.Report(0, {0, 1}, 3), (std::vector<int64_t>{2, 5, 6}));
  EXPECT_EQ(l.finished(), 2);
  // Worker 1 dies holding 3 and 4: they go out next, before 7.
  l.Release(1);
  EXPECT_EQ(l.unassigned(), 5);
  EXPECT_EQ(l.Report(2, {}, 3), (std::vector<int64_t>{3, 4, 7}));
  EXPECT_EQ(l.reissued(), 2);
  // A late report of a unit another worker holds finishes it there too.
  EXPECT_EQ(l.Report(1, {3, 99, -1}, 0), std::vector<int64_t>{});
  EXPECT_EQ(l.held(2), (std::vector<int64_t>{4, 7}));
  EXPECT_TRUE(l.IsFinished(3));
  // Duplicated reports change nothing.
  l.Report(0, {0, 1, 2, 5, 6}, 0);
  l.Report(0, {0, 1, 2, 5, 6}, 0);
  l.Report(2, {4, 7}, 5);
  EXPECT_EQ(l.held(2), (std::vector<int64_t>{8, 9}));
  EXPECT_FALSE(l.complete());
  l.Report(2, {8, 9}, 5);
  EXPECT_TRUE(l.complete());
  EXPECT_EQ(l.finished(), 10);
  EXPECT_EQ(l.unassigned(), 0);
}

TEST(UnitLedgerTest, SavedLedgerRestoresWithHeldUnitsHandedOutAgain) {
  UnitLedger l(20);
  l.Report(0, {}, 4);  // 0..3
  l.Report(1, {}, 2);  // 4, 5
  l.Report(0, {0, 2}, 4);
  UnitLedger back(20);
  ASSERT_TRUE(back.Restore(l.Save()).ok());
  EXPECT_EQ(back.finished(), 2);
  EXPECT_TRUE(back.IsFinished(0) && back.IsFinished(2) && !back.IsFinished(1));
  EXPECT_TRUE(back.held(0).empty());
  std::set<int64_t> got;
  for (int64_t u : back.Report(5, {}, 20)) got.insert(u);
  // Nothing finished comes back and nothing unfinished is lost.
  std::set<int64_t> want;
  for (int64_t u = 0; u < 20; ++u)
    if (u != 0 && u != 2) want.insert(u);
  EXPECT_EQ(got, want);
  EXPECT_FALSE(UnitLedger(21).Restore(l.Save()).ok());
  wire::UnitsSnapshot bad = l.Save();
  bad.set_finished("x");
  EXPECT_EQ(UnitLedger(20).Restore(bad).code(), Code::kDataLoss);
  bad = l.Save();
  bad.add_returned(17);  // never handed out
  EXPECT_EQ(UnitLedger(20).Restore(bad).code(), Code::kDataLoss);
}

TEST(UnitLedgerTest, BitsPackAndUnpack) {
  std::vector<bool> bits(19);
  bits[0] = bits[8] = bits[18] = true;
  const std::string packed = PackBits(bits);
  EXPECT_EQ(packed.size(), 3u);
  EXPECT_EQ(UnpackBits(packed, 19).value(), bits);
  EXPECT_FALSE(UnpackBits(packed, 25).ok());
}

CoordinatorOptions ElasticOptions() {
  CoordinatorOptions o;
  o.job_name = "t";
  o.num_servers = 1;
  o.num_workers = 4;  // ids 0, 1 start; 2, 3 may join
  o.late_workers = {false, false, true, true};
  o.total_units = 12;
  o.total_clocks = 12;
  o.chunk_bytes = 40;
  o.membership.heartbeat_ms = 100;
  o.membership.lease_ms = 1000;
  o.expect_evaluator = false;
  return o;
}

wire::RegisterRequest Worker() {
  wire::RegisterRequest r;
  r.mutable_model()->set_name("m");
  r.mutable_model()->set_num_params(95);
  r.mutable_model()->set_layout_digest(7);
  return r;
}

wire::Heartbeat Beat(int64_t clock, std::vector<int64_t> finished, int wanted, bool done = false) {
  wire::Heartbeat hb;
  hb.set_clock(clock);
  for (int64_t u : finished) hb.add_units_finished(u);
  hb.set_units_wanted(wanted);
  hb.set_done(done);
  return hb;
}

std::vector<int64_t> Units(const wire::HeartbeatReply& r) { return {r.units().begin(), r.units().end()}; }

class ElasticCoordinatorTest : public ::testing::Test {
 protected:
  // The shard and worker 0 registered; the rendezvous waits for worker 1.
  void SetUp() override {
    wire::RegisterRequest server;
    server.set_endpoint("tcp://a:1");
    ASSERT_TRUE(st.Register(wire::SERVER, 0, server).ok());
    ASSERT_TRUE(st.Register(wire::WORKER, 0, Worker()).ok());
  }

  FakeClock clock;
  CoordinatorState st{ElasticOptions(), &clock};
};

TEST_F(ElasticCoordinatorTest, LateWorkersJoinAtTheLiveClockAndDeadWorkersUnitsGoBack) {
  EXPECT_EQ(st.WaitingFor(), "worker 1");  // not the late ids
  ASSERT_TRUE(st.Register(wire::WORKER, 1, Worker()).value().ready());
  EXPECT_EQ(Units(st.Heartbeat(wire::WORKER, 0, Beat(0, {}, 3))), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(Units(st.Heartbeat(wire::WORKER, 1, Beat(0, {}, 3))), (std::vector<int64_t>{3, 4, 5}));
  st.Heartbeat(wire::WORKER, 0, Beat(4, {0, 1}, 3));
  st.Heartbeat(wire::WORKER, 1, Beat(3, {3}, 3));
  // A late worker starts at the slowest live worker's clock.
  auto late = st.Register(wire::WORKER, 3, Worker());
  ASSERT_TRUE(late.ok() && late->ready());
  EXPECT_EQ(late->start_clock(), 3);
  // Worker 1 goes silent: its held units are handed out first.
  for (int i = 0; i < 12; ++i) {
    clock.Advance(std::chrono::milliseconds(100));
    st.Heartbeat(wire::WORKER, 0, Beat(5, {}, 3));
    st.Heartbeat(wire::WORKER, 3, Beat(3, {}, 0));
  }
  st.ExpireLeases();
  EXPECT_EQ(Units(st.Heartbeat(wire::WORKER, 3, Beat(3, {}, 3))), (std::vector<int64_t>{4, 5, 8}));
  EXPECT_FALSE(st.job_finished());
  // Everything finished: still not over while a worker is live and not done.
  st.Heartbeat(wire::WORKER, 0, Beat(9, {2, 6, 7, 9, 10, 11}, 3));
  auto r = st.Heartbeat(wire::WORKER, 3, Beat(6, {4, 5, 8}, 3));
  EXPECT_EQ(r.units_finished(), 12);
  EXPECT_EQ(r.units_unassigned(), 0);
  EXPECT_TRUE(Units(r).empty());
  EXPECT_FALSE(st.training_ended());
  st.Heartbeat(wire::WORKER, 0, Beat(9, {}, 0, /*done=*/true));
  st.Leave(wire::WORKER, 3);
  EXPECT_TRUE(st.training_ended());
  EXPECT_TRUE(st.job_finished());  // id 2 never joined: not waited for
  std::vector<std::string> what;
  for (const auto& e : st.membership_events()) what.push_back(std::to_string(e.worker()) + " " + e.what());
  EXPECT_EQ(what, (std::vector<std::string>{"3 joined", "1 died", "0 done", "3 left"}));
  // The restored state has the units and the timeline.
  CoordinatorState back(ElasticOptions(), &clock);
  ASSERT_TRUE(back.Restore(st.Save()).ok());
  EXPECT_TRUE(back.units().complete());
  EXPECT_EQ(back.membership_events().size(), 4u);
}

TEST_F(ElasticCoordinatorTest, AllWorkersGoneWithUnitsLeftIsNotTheEnd) {
  ASSERT_TRUE(st.Register(wire::WORKER, 1, Worker()).ok());
  st.Heartbeat(wire::WORKER, 0, Beat(0, {}, 4));
  st.Leave(wire::WORKER, 0);
  st.Leave(wire::WORKER, 1);
  EXPECT_FALSE(st.training_ended());
  EXPECT_FALSE(st.job_finished());
  // A worker that comes back takes the units where they were left.
  ASSERT_TRUE(st.Register(wire::WORKER, 2, Worker()).ok());
  EXPECT_EQ(Units(st.Heartbeat(wire::WORKER, 2, Beat(0, {}, 2))), (std::vector<int64_t>{0, 1}));
}

}  // namespace
}  // namespace geodesic::coordinator
