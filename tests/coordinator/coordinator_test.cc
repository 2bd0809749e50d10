#include "coordinator/coordinator.h"

#include <gtest/gtest.h>

namespace geodesic::coordinator {
namespace {

CoordinatorOptions Options(int servers, int workers) {
  CoordinatorOptions o;
  o.job_name = "t";
  o.num_servers = servers;
  o.num_workers = workers;
  o.num_regions = 2;
  o.chunk_bytes = 40;  // 10 floats per chunk
  o.membership.heartbeat_ms = 100;
  o.membership.lease_ms = 1000;
  o.total_clocks = 100;
  return o;
}

wire::RegisterRequest ServerReq(const std::string& ep) {
  wire::RegisterRequest r;
  r.set_endpoint(ep);
  return r;
}

wire::RegisterRequest WorkerReq(uint64_t params = 95, uint64_t digest = 7) {
  wire::RegisterRequest r;
  r.mutable_model()->set_name("m");
  r.mutable_model()->set_num_params(params);
  r.mutable_model()->set_layout_digest(digest);
  return r;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  CoordinatorState state_{Options(2, 2), &clock_};

  void StartAll() {
    ASSERT_TRUE(state_.Register(wire::SERVER, 0, ServerReq("tcp://a:1")).ok());
    ASSERT_TRUE(state_.Register(wire::SERVER, 1, ServerReq("tcp://a:2")).ok());
    ASSERT_TRUE(state_.Register(wire::WORKER, 0, WorkerReq()).ok());
    ASSERT_TRUE(state_.Register(wire::WORKER, 1, WorkerReq()).ok());
    ASSERT_TRUE(state_.started());
  }
};

TEST_F(CoordinatorTest, RendezvousWaitsForEveryMemberAndSaysWho) {
  auto r = state_.Register(wire::SERVER, 0, ServerReq("tcp://a:1"));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->ready());
  EXPECT_EQ(r->waiting_for(), "server 1; workers 0,1");
  r = state_.Register(wire::WORKER, 1, WorkerReq());
  EXPECT_EQ(r->waiting_for(), "server 1; worker 0");
  state_.Register(wire::SERVER, 1, ServerReq("tcp://a:2")).value();
  EXPECT_FALSE(state_.started());
  r = state_.Register(wire::WORKER, 0, WorkerReq());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ready());
  EXPECT_TRUE(state_.started());
  // 95 params in chunks of 10: 10 chunks, balanced over 2 servers.
  EXPECT_EQ(r->shard_map().owner_size(), 10);
  ASSERT_EQ(r->servers_size(), 2);
  EXPECT_EQ(r->servers(1).endpoint(), "tcp://a:2");
  EXPECT_EQ(r->start_clock(), 0);
}

TEST_F(CoordinatorTest, RefusesIdsOutsideTheJobAndMismatchedModels) {
  auto r = state_.Register(wire::WORKER, 5, WorkerReq());
  EXPECT_EQ(r.status().code(), Code::kOutOfRange);
  EXPECT_TRUE(state_.Register(wire::WORKER, 0, WorkerReq()).ok());
  r = state_.Register(wire::WORKER, 1, WorkerReq(96));
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("differs from the job's"), std::string::npos);
  EXPECT_FALSE(state_.Register(wire::SERVER, 0, ServerReq("")).ok());
  EXPECT_FALSE(state_.Register(wire::WORKER, 1, wire::RegisterRequest()).ok());
}

TEST_F(CoordinatorTest, ExpiredLeaseLeavesTheLiveSet) {
  StartAll();
  uint64_t epoch = state_.membership_epoch();
  wire::Heartbeat hb;
  hb.set_clock(3);
  clock_.Advance(Millis(600));
  EXPECT_TRUE(state_.Heartbeat(wire::WORKER, 0, hb).known());
  for (int s = 0; s < 2; ++s) state_.Heartbeat(wire::SERVER, s, wire::Heartbeat());
  clock_.Advance(Millis(600));  // worker 1 silent for 1.2 s > lease
  auto deaths = state_.ExpireLeases();
  ASSERT_EQ(deaths.size(), 1u);
  EXPECT_NE(deaths[0].find("worker 1 lease expired"), std::string::npos) << deaths[0];
  EXPECT_GT(state_.membership_epoch(), epoch);
  auto reply = state_.Heartbeat(wire::WORKER, 0, hb);
  ASSERT_EQ(reply.live_workers_size(), 1);
  EXPECT_EQ(reply.live_workers(0), 0);
  EXPECT_EQ(reply.live_worker_clocks(0), 3);
  EXPECT_EQ(reply.dead_workers(), 1);
  // The dead worker's next heartbeat is not known: it must register again.
  EXPECT_FALSE(state_.Heartbeat(wire::WORKER, 1, hb).known());
  auto again = state_.Register(wire::WORKER, 1, WorkerReq());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->ready());
  EXPECT_EQ(state_.Heartbeat(wire::WORKER, 0, hb).live_workers_size(), 2);
}

// A region's aggregator (AGGREGATOR, region index) is a member with a
// lease that the rendezvous does not wait for: it gets the shard map once
// the job started, sees the live workers, and its silence is reported.
TEST_F(CoordinatorTest, AnAggregatorJoinsWithoutHoldingTheRendezvous) {
  auto early = state_.Register(wire::AGGREGATOR, 1, ServerReq("tcp://agg:1"));
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_FALSE(early->ready());
  EXPECT_EQ(early->waiting_for(), "servers 0,1; workers 0,1") << "not waiting for the aggregator";
  StartAll();
  auto r = state_.Register(wire::AGGREGATOR, 1, ServerReq("tcp://agg:1"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ready());
  EXPECT_EQ(r->shard_map().owner_size(), 10);
  EXPECT_EQ(r->servers_size(), 2);
  EXPECT_EQ(state_.Register(wire::AGGREGATOR, 2, ServerReq("tcp://agg:2")).status().code(), Code::kOutOfRange)
      << "two regions: aggregators 0 and 1";
  auto hb = state_.Heartbeat(wire::AGGREGATOR, 1, wire::Heartbeat());
  EXPECT_TRUE(hb.known());
  EXPECT_EQ(hb.live_workers_size(), 2);
  clock_.Advance(Millis(1200));
  for (int w = 0; w < 2; ++w) state_.Heartbeat(wire::WORKER, w, wire::Heartbeat());
  for (int s = 0; s < 2; ++s) state_.Heartbeat(wire::SERVER, s, wire::Heartbeat());
  auto deaths = state_.ExpireLeases();
  ASSERT_EQ(deaths.size(), 1u);
  EXPECT_NE(deaths[0].find("aggregator 1 lease expired"), std::string::npos) << deaths[0];
  EXPECT_FALSE(state_.Heartbeat(wire::AGGREGATOR, 1, wire::Heartbeat()).known());
}

// A restarted coordinator continues from its saved state: same shard map,
// clocks and endings; members that were live keep a lease; the rendezvous
// is not run again.
TEST_F(CoordinatorTest, RestoredStateContinuesTheJob) {
  StartAll();
  wire::Heartbeat hb;
  hb.set_clock(7);
  state_.Heartbeat(wire::WORKER, 0, hb);
  wire::Heartbeat done;
  done.set_clock(9);
  done.set_done(true);
  state_.Heartbeat(wire::WORKER, 1, done);
  clock_.Advance(Millis(2500));
  const wire::CoordinatorSnapshot snap = state_.Save();

  FakeClock later;
  later.Advance(Millis(100000));
  CoordinatorState restored(Options(2, 2), &later);
  EXPECT_FALSE(restored.Status().restored());  // a fresh rendezvous until it takes the saved state
  ASSERT_TRUE(restored.Restore(snap).ok());
  EXPECT_TRUE(restored.Status().restored());  // what the launcher reads of a coordinator it restarted
  EXPECT_FALSE(state_.Status().restored());
  EXPECT_TRUE(restored.started());
  ASSERT_TRUE(restored.shard_map());
  EXPECT_EQ(restored.shard_map()->owner, state_.shard_map()->owner);
  EXPECT_NEAR(restored.training_seconds(), state_.training_seconds(), 1e-6);
  EXPECT_GT(restored.membership_epoch(), state_.membership_epoch());
  // Worker 0 is live at its clock without registering again; worker 1 stays done.
  auto r = restored.Heartbeat(wire::WORKER, 0, hb);
  EXPECT_TRUE(r.known());
  ASSERT_EQ(r.live_workers_size(), 1);
  EXPECT_EQ(r.live_worker_clocks(0), 7);
  EXPECT_EQ(r.done_workers(), 1);
  EXPECT_TRUE(restored.Heartbeat(wire::SERVER, 1, wire::Heartbeat()).known());
  // A worker registering again gets the same map and its own clock.
  auto again = restored.Register(wire::WORKER, 0, WorkerReq());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->ready());
  EXPECT_EQ(again->start_clock(), 7);
  // Members silent for a lease after the restart are dead, as usual.
  later.Advance(Millis(1500));
  restored.Heartbeat(wire::WORKER, 0, hb);
  auto deaths = restored.ExpireLeases();
  EXPECT_EQ(deaths.size(), 2u);  // the two servers

  // Another job's or shape's state is refused and changes nothing.
  CoordinatorState other(Options(3, 2), &later);
  EXPECT_EQ(other.Restore(snap).code(), Code::kFailedPrecondition);
  EXPECT_FALSE(other.started());
  wire::CoordinatorSnapshot wrong = snap;
  wrong.set_job("other");
  CoordinatorState fresh(Options(2, 2), &later);
  EXPECT_EQ(fresh.Restore(wrong).code(), Code::kFailedPrecondition);
  EXPECT_FALSE(fresh.started());
}

TEST_F(CoordinatorTest, JobFinishesWhenWorkersAreDoneOrDeadAndTheEvaluatorLeft) {
  StartAll();
  wire::RegisterRequest ev = WorkerReq();
  ASSERT_TRUE(state_.Register(wire::EVALUATOR, 0, ev).ok());
  wire::Heartbeat done;
  done.set_done(true);
  done.set_clock(10);
  clock_.Advance(Millis(500));
  state_.Heartbeat(wire::WORKER, 0, done);
  state_.Heartbeat(wire::EVALUATOR, 0, wire::Heartbeat());
  for (int s = 0; s < 2; ++s) state_.Heartbeat(wire::SERVER, s, wire::Heartbeat());
  EXPECT_FALSE(state_.job_finished());
  clock_.Advance(Millis(700));  // worker 1 dies
  state_.Heartbeat(wire::WORKER, 0, done);
  state_.Heartbeat(wire::EVALUATOR, 0, wire::Heartbeat());
  for (int s = 0; s < 2; ++s) state_.Heartbeat(wire::SERVER, s, wire::Heartbeat());
  state_.ExpireLeases();
  EXPECT_FALSE(state_.job_finished());  // the evaluator has not read the model yet
  double training = state_.training_seconds();
  EXPECT_NEAR(training, 1.2, 1e-6);
  state_.Leave(wire::EVALUATOR, 0);
  EXPECT_TRUE(state_.job_finished());
  clock_.Advance(Millis(5000));
  EXPECT_NEAR(state_.training_seconds(), training, 1e-6);  // evaluation time excluded
  EXPECT_FALSE(state_.serving_members_left());
  state_.Leave(wire::SERVER, 0);
  state_.Leave(wire::SERVER, 1);
  EXPECT_TRUE(state_.serving_members_left());
}

// A regional aggregator, like a shard, holds the finished coordinator until
// it has left: it learns that the job finished from a heartbeat reply.
TEST_F(CoordinatorTest, AFinishedJobsCoordinatorWaitsForItsAggregatorsToLeave) {
  StartAll();
  ASSERT_TRUE(state_.Register(wire::AGGREGATOR, 1, ServerReq("tcp://agg:1")).ok());
  for (int s = 0; s < 2; ++s) state_.Leave(wire::SERVER, s);
  EXPECT_FALSE(state_.serving_members_left()) << "aggregator 1 is live";
  state_.Leave(wire::AGGREGATOR, 1);
  EXPECT_TRUE(state_.serving_members_left());
}

TEST_F(CoordinatorTest, StatusListsEveryMember) {
  StartAll();
  wire::Heartbeat hb;
  hb.set_clock(4);
  hb.mutable_worker()->set_samples(256);
  state_.Heartbeat(wire::WORKER, 1, hb);
  auto st = state_.Status();
  EXPECT_TRUE(st.training_started());
  ASSERT_EQ(st.workers_size(), 2);
  EXPECT_EQ(st.workers(1).clock(), 4);
  EXPECT_EQ(st.workers(1).progress().samples(), 256);
  EXPECT_EQ(st.min_clock(), 0);
  ASSERT_EQ(st.servers_size(), 2);
  EXPECT_EQ(st.servers(0).endpoint(), "tcp://a:1");
}

TEST_F(CoordinatorTest, SecondProcessClaimingALiveIdIsRefused) {
  StartAll();
  wire::RegisterRequest r = WorkerReq();
  r.set_pid(111);
  ASSERT_TRUE(state_.Register(wire::WORKER, 0, r).ok());
  r.set_pid(222);
  EXPECT_EQ(state_.Register(wire::WORKER, 0, r).status().code(), Code::kAlreadyExists);
}

// Regression: a model signature of 2^60 parameters made
// the coordinator allocate a shard map of that many chunks.
TEST_F(CoordinatorTest, HugeModelIsRefusedNotAllocated) {
  auto r = state_.Register(wire::WORKER, 0, WorkerReq(uint64_t{1} << 60));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("chunks"), std::string::npos) << r.status();
  EXPECT_FALSE(state_.shard_map().has_value());
  EXPECT_TRUE(state_.Register(wire::WORKER, 0, WorkerReq()).ok());
}

TEST_F(CoordinatorTest, AnswerRefusesWhatItDoesNotServe) {
  wire::Header h;
  h.set_sender_role(wire::WORKER);
  h.mutable_push_request();
  bool refused = false;
  auto reply = state_.Answer(h, "", &refused);
  ASSERT_TRUE(reply.has_value());
  EXPECT_TRUE(refused);
  EXPECT_NE(reply->error_reply().message().find("does not serve push_request"), std::string::npos);
  wire::Header leave;
  leave.set_sender_role(wire::WORKER);
  leave.mutable_leave_request();
  EXPECT_FALSE(state_.Answer(leave, "", &refused).has_value());
  EXPECT_FALSE(refused);
}

wire::Header WorkerHeartbeat(int id, int64_t clock) {
  wire::Header h;
  h.set_sender_role(wire::WORKER);
  h.set_sender_id(id);
  h.mutable_heartbeat()->set_clock(clock);
  return h;
}

// Issue 14: heartbeats claiming non-member ids or clock 2^40 were believed
// on a plaintext job. They are refused (BAD_SENDER, BAD_CLOCK; the socket
// shell counts them by reason) and change nothing: the live status keeps
// the members' clocks.
TEST_F(CoordinatorTest, HeartbeatsFromNonMembersOrWithWildClocksAreRefused) {
  StartAll();
  CoordinatorState& state = state_;
  auto refusal = [&](const wire::Header& h) {
    bool refused = false;
    auto reply = state.Answer(h, "", &refused);
    EXPECT_EQ(refused, reply && reply->has_error_reply());
    return refused ? reply->error_reply().reason() : wire::REFUSAL_UNSPECIFIED;
  };
  EXPECT_EQ(refusal(WorkerHeartbeat(-7, 0)), wire::REFUSAL_BAD_SENDER);
  EXPECT_EQ(refusal(WorkerHeartbeat(INT32_MAX, 0)), wire::REFUSAL_BAD_SENDER);
  wire::Header as_client = WorkerHeartbeat(0, 0);
  as_client.set_sender_role(wire::CLIENT);
  EXPECT_EQ(refusal(as_client), wire::REFUSAL_BAD_SENDER);
  wire::Header leave;
  leave.set_sender_role(wire::SERVER);
  leave.set_sender_id(5);
  leave.mutable_leave_request();
  EXPECT_EQ(refusal(leave), wire::REFUSAL_BAD_SENDER);
  EXPECT_EQ(refusal(WorkerHeartbeat(0, int64_t{1} << 40)), wire::REFUSAL_BAD_CLOCK);
  EXPECT_EQ(refusal(WorkerHeartbeat(1, 101)), wire::REFUSAL_BAD_CLOCK);
  EXPECT_EQ(refusal(WorkerHeartbeat(1, -1)), wire::REFUSAL_BAD_CLOCK);
  const wire::StatusReply status = state.Status();
  for (const auto& w : status.workers()) EXPECT_EQ(w.clock(), 0) << w.id();
  // Members within the job's clocks are answered.
  EXPECT_EQ(refusal(WorkerHeartbeat(1, 100)), wire::REFUSAL_UNSPECIFIED);
  EXPECT_EQ(refusal(WorkerHeartbeat(0, 7)), wire::REFUSAL_UNSPECIFIED);
}

// Federated jobs with a client gateway: workers' gateways are listed in
// the status reply, and a status request with a `client` token admits the
// asker's CURVE key, with the id its token names, to the workers' gateways
// (their heartbeat replies); a bad token admits nothing.
TEST(SecureCoordinatorTest, ClientTokensAdmitRealClientsToTheGateways) {
  FakeClock clock;
  CoordinatorOptions o = Options(1, 2);
  o.secret = std::string(64, 'k');
  o.client_gateway = true;
  o.unix_now = [] { return int64_t{1000}; };
  CoordinatorState state(o, &clock);
  auto token = [&](const std::string& role, int id) {
    return transport::MintToken(o.secret, {.job = "t", .role = role, .id = id, .expiry_unix = 2000}).value();
  };
  const std::string kWorkerKey(40, 'W'), kClientA(40, 'A'), kClientB(40, 'B');
  wire::RegisterRequest wreq = WorkerReq();
  wreq.set_token(token("worker", 1));
  wreq.set_endpoint("tcp://127.0.0.1:7001");
  ASSERT_TRUE(state.Register(wire::WORKER, 1, wreq, kWorkerKey).ok());
  auto ask = [&](const std::string& t, const std::string& key) {
    wire::Header h;
    h.set_job("t");
    h.set_sender_role(wire::CLIENT);
    h.mutable_status_request()->set_token(t);
    bool refused = false;
    auto reply = state.Answer(h, key, &refused);
    EXPECT_TRUE(reply.has_value());
    return reply.value_or(wire::Header());
  };
  EXPECT_TRUE(ask(token("worker", 1), kClientA).has_error_reply());  // not a client token
  wire::Header ok = ask(token("client", 17), kClientA);
  ASSERT_TRUE(ok.has_status_reply()) << ok.DebugString();
  EXPECT_EQ(ok.status_reply().workers(1).gateway_endpoint(), "tcp://127.0.0.1:7001");
  EXPECT_EQ(ok.status_reply().workers(1).gateway_key(), kWorkerKey);
  ASSERT_TRUE(ask(token("client", -1), kClientB).has_status_reply());
  wire::Heartbeat hb;
  auto hr = state.Heartbeat(wire::WORKER, 1, hb);
  ASSERT_EQ(hr.authorized_keys_size(), 2);
  EXPECT_EQ(hr.authorized_keys(0), kClientA);
  EXPECT_EQ(hr.authorized_ids(0), 17);
  EXPECT_EQ(hr.authorized_keys(1), kClientB);
  EXPECT_EQ(hr.authorized_ids(1), -1);
  hb.set_keys_epoch(hr.keys_epoch());
  EXPECT_EQ(state.Heartbeat(wire::WORKER, 1, hb).authorized_keys_size(), 0);  // up to date
  ask(token("client", 17), kClientA);                                         // asking again changes nothing
  EXPECT_EQ(state.Heartbeat(wire::WORKER, 1, hb).authorized_keys_size(), 0);
}

// Secured jobs: registration needs a token; a refusal changes nothing; a
// member's key is bound and checked; workers wait until every live shard
// installed their key.
TEST(SecureCoordinatorTest, TokensKeysAndTheKeyInstalledGate) {
  FakeClock clock;
  CoordinatorOptions o = Options(1, 1);
  o.secret = std::string(64, 'k');
  int64_t now = 1000;
  o.unix_now = [&now] { return now; };
  CoordinatorState state(o, &clock);
  auto token = [&](const std::string& role, int id, int64_t expiry) {
    return transport::MintToken(o.secret, {.job = "t", .role = role, .id = id, .expiry_unix = expiry}).value();
  };
  const std::string kServerKey(40, 'S'), kWorkerKey(40, 'W'), kOtherKey(40, 'X');

  wire::RegisterRequest sreq = ServerReq("tcp://a:1");
  auto r = state.Register(wire::SERVER, 0, sreq, kServerKey);
  EXPECT_EQ(r.status().code(), Code::kUnauthenticated);
  sreq.set_token(token("server", 0, 2000));
  EXPECT_EQ(state.Register(wire::SERVER, 0, sreq, "").status().code(), Code::kPermissionDenied);
  ASSERT_TRUE(state.Register(wire::SERVER, 0, sreq, kServerKey).ok());

  wire::RegisterRequest wreq = WorkerReq();
  for (const std::string& bad : {token("worker", 0, 1000), token("worker", 1, 2000), token("evaluator", 0, 2000),
                                 token("server", 0, 2000) + "x"}) {
    wreq.set_token(bad);
    auto refused = state.Register(wire::WORKER, 0, wreq, kWorkerKey);
    EXPECT_EQ(refused.status().code(), Code::kUnauthenticated) << bad;
    EXPECT_FALSE(state.shard_map().has_value()) << "a refused worker fixed the model";
    EXPECT_EQ(state.WaitingFor(), "worker 0");
    EXPECT_FALSE(state.IsMemberKey(kWorkerKey));
  }
  wreq.set_token(token("worker", 0, 2000));
  r = state.Register(wire::WORKER, 0, wreq, kWorkerKey);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(state.started());
  // The shard has not installed the worker's key yet: not ready, and why.
  EXPECT_FALSE(r->ready());
  EXPECT_NE(r->waiting_for().find("server 0 to authorize worker 0's key"), std::string::npos) << r->waiting_for();
  wire::Heartbeat hb;
  auto hr = state.Heartbeat(wire::SERVER, 0, hb);
  ASSERT_EQ(hr.authorized_keys_size(), 1);
  EXPECT_EQ(hr.authorized_keys(0), kWorkerKey);
  EXPECT_EQ(hr.authorized_ids(0), 0);
  hb.set_keys_epoch(hr.keys_epoch());
  hr = state.Heartbeat(wire::SERVER, 0, hb);
  EXPECT_EQ(hr.authorized_keys_size(), 0);  // up to date: no list
  r = state.Register(wire::WORKER, 0, wreq, kWorkerKey);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ready());
  EXPECT_EQ(r->servers(0).curve_public_key(), kServerKey);

  // Requests as worker 0 must come with worker 0's key.
  EXPECT_TRUE(state.CheckKey(wire::WORKER, 0, kWorkerKey).ok());
  EXPECT_EQ(state.CheckKey(wire::WORKER, 0, kOtherKey).code(), Code::kPermissionDenied);
  EXPECT_EQ(state.CheckKey(wire::SERVER, 0, kWorkerKey).code(), Code::kPermissionDenied);
  // Expired by now: re-registering needs a fresh token.
  now = 5000;
  EXPECT_EQ(state.Register(wire::WORKER, 0, wreq, kWorkerKey).status().code(), Code::kUnauthenticated);

  // A coordinator restarted from the saved state keeps every member's key:
  // requests with another key are still refused, the shard is sent the
  // authorized list again (a newer epoch than the one it has), and the
  // worker's key does not have to be installed again.
  CoordinatorState restored(o, &clock);
  ASSERT_TRUE(restored.Restore(state.Save()).ok());
  EXPECT_TRUE(restored.IsMemberKey(kWorkerKey));
  EXPECT_TRUE(restored.IsMemberKey(kServerKey));
  EXPECT_TRUE(restored.CheckKey(wire::WORKER, 0, kWorkerKey).ok());
  EXPECT_EQ(restored.CheckKey(wire::WORKER, 0, kOtherKey).code(), Code::kPermissionDenied);
  EXPECT_EQ(restored.CheckKey(wire::SERVER, 0, kOtherKey).code(), Code::kPermissionDenied);
  hr = restored.Heartbeat(wire::SERVER, 0, hb);
  EXPECT_GT(hr.keys_epoch(), hb.keys_epoch());
  ASSERT_EQ(hr.authorized_keys_size(), 1);
  EXPECT_EQ(hr.authorized_keys(0), kWorkerKey);
}

// Secured jobs with a regional aggregator: it joins with an aggregator
// token for its region and waits, like a worker, for the shard to admit its
// key; its region's workers wait for it to register and to admit theirs,
// and learn its key; the shard's list names it with its role, the
// aggregator's holds its region's workers only.
TEST(SecureCoordinatorTest, AnAggregatorJoinsWithItsOwnTokenAndItsRegionsWorkersWaitForIt) {
  FakeClock clock;
  CoordinatorOptions o = Options(1, 3);
  o.worker_regions = {"us", "us", "eu"};
  o.aggregator_regions = {"us", ""};
  o.secret = std::string(64, 'k');
  o.unix_now = [] { return int64_t{1000}; };
  CoordinatorState state(o, &clock);
  auto token = [&](const std::string& role, int id) {
    return transport::MintToken(o.secret, {.job = "t", .role = role, .id = id, .expiry_unix = 2000}).value();
  };
  const std::string kServer(40, 'S'), kAgg(40, 'A'), kOther(40, 'X');
  const std::vector<std::string> kWorkers = {std::string(40, '0'), std::string(40, '1'), std::string(40, '2')};
  wire::RegisterRequest sreq = ServerReq("tcp://a:1");
  sreq.set_token(token("server", 0));
  ASSERT_TRUE(state.Register(wire::SERVER, 0, sreq, kServer).ok());
  auto register_worker = [&](int w) {
    wire::RegisterRequest r = WorkerReq();
    r.set_token(token("worker", w));
    return state.Register(wire::WORKER, w, r, kWorkers[w]).value();
  };
  for (int w = 0; w < 3; ++w) register_worker(w);
  ASSERT_TRUE(state.started());
  EXPECT_EQ(register_worker(0).waiting_for(), "the aggregator of region us to register (worker 0 connects to it)");

  wire::RegisterRequest areq = ServerReq("tcp://agg:1");
  for (const std::string& bad : {token("worker", 0), token("aggregator", 1), token("server", 0)}) {
    areq.set_token(bad);
    EXPECT_EQ(state.Register(wire::AGGREGATOR, 0, areq, kAgg).status().code(), Code::kUnauthenticated) << bad;
  }
  areq.set_token(token("aggregator", 0));
  auto agg = state.Register(wire::AGGREGATOR, 0, areq, kAgg);
  ASSERT_TRUE(agg.ok()) << agg.status();
  EXPECT_FALSE(agg->ready());
  EXPECT_NE(agg->waiting_for().find("server 0 to authorize aggregator 0's key"), std::string::npos)
      << agg->waiting_for();

  // The shard's list: every worker, and the aggregator with its role.
  wire::Heartbeat shb;
  auto sr = state.Heartbeat(wire::SERVER, 0, shb);
  ASSERT_EQ(sr.authorized_keys_size(), 4);
  ASSERT_EQ(sr.authorized_roles_size(), 4);
  EXPECT_EQ(sr.authorized_keys(3), kAgg);
  EXPECT_EQ(sr.authorized_ids(3), 0);
  EXPECT_EQ(sr.authorized_roles(3), wire::AGGREGATOR);
  EXPECT_EQ(sr.authorized_roles(0), wire::WORKER);
  shb.set_keys_epoch(sr.keys_epoch());
  state.Heartbeat(wire::SERVER, 0, shb);
  EXPECT_TRUE(state.Register(wire::AGGREGATOR, 0, areq, kAgg)->ready());
  EXPECT_TRUE(state.CheckKey(wire::AGGREGATOR, 0, kAgg).ok());
  EXPECT_EQ(state.CheckKey(wire::AGGREGATOR, 0, kOther).code(), Code::kPermissionDenied);

  // Worker 0 now waits for the aggregator to admit its key; worker 2
  // (eu, no aggregator) does not, and is given no aggregator key.
  EXPECT_NE(register_worker(0).waiting_for().find("the aggregator of region us to authorize worker 0's key"),
            std::string::npos);
  auto eu = register_worker(2);
  EXPECT_TRUE(eu.ready()) << eu.waiting_for();
  EXPECT_TRUE(eu.aggregator_curve_public_key().empty());
  // The aggregator's list: its region's workers only.
  wire::Heartbeat ahb;
  auto ar = state.Heartbeat(wire::AGGREGATOR, 0, ahb);
  ASSERT_EQ(ar.authorized_keys_size(), 2);
  EXPECT_EQ(ar.authorized_keys(0), kWorkers[0]);
  EXPECT_EQ(ar.authorized_keys(1), kWorkers[1]);
  EXPECT_EQ(ar.authorized_ids(1), 1);
  ahb.set_keys_epoch(ar.keys_epoch());
  state.Heartbeat(wire::AGGREGATOR, 0, ahb);
  auto us = register_worker(0);
  ASSERT_TRUE(us.ready()) << us.waiting_for();
  EXPECT_EQ(us.aggregator_curve_public_key(), kAgg);

  // A coordinator restarted from its saved state keeps the aggregator's
  // lease and key: it heartbeats on, the shards' list still names it.
  CoordinatorState restored(o, &clock);
  ASSERT_TRUE(restored.Restore(state.Save()).ok());
  EXPECT_TRUE(restored.Heartbeat(wire::AGGREGATOR, 0, ahb).known());
  EXPECT_TRUE(restored.CheckKey(wire::AGGREGATOR, 0, kAgg).ok());
  EXPECT_EQ(restored.CheckKey(wire::AGGREGATOR, 0, kOther).code(), Code::kPermissionDenied);
  auto listed = restored.Heartbeat(wire::SERVER, 0, shb);
  ASSERT_EQ(listed.authorized_keys_size(), 4);
  EXPECT_EQ(listed.authorized_keys(3), kAgg);
  EXPECT_EQ(listed.authorized_roles(3), wire::AGGREGATOR);

  // The aggregator dies: a worker of its region that registers again with
  // a new key waits for the shard only (it will use the shards directly).
  clock.Advance(Millis(1200));
  for (int w = 0; w < 3; ++w) state.Heartbeat(wire::WORKER, w, wire::Heartbeat());
  state.Heartbeat(wire::SERVER, 0, shb);
  ASSERT_EQ(state.ExpireLeases().size(), 1u);
  wire::RegisterRequest again = WorkerReq();
  again.set_token(token("worker", 1));
  auto w1 = state.Register(wire::WORKER, 1, again, kOther);
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_NE(w1->waiting_for().find("server 0 to authorize worker 1's key"), std::string::npos) << w1->waiting_for();
}

}  // namespace
}  // namespace geodesic::coordinator

namespace geodesic::coordinator {
namespace {

// Replicated jobs: backups register as (BACKUP, shard id); a primary whose
// lease expires is replaced by its live backup, and members learn the new
// endpoint from their heartbeat replies.
TEST(ReplicatedCoordinatorTest, RendezvousWaitsForBackupsAndPromotesOnPrimaryDeath) {
  FakeClock clock;
  CoordinatorOptions o = Options(2, 1);
  o.backups = 1;
  CoordinatorState state(o, &clock);
  ASSERT_TRUE(state.Register(wire::SERVER, 0, ServerReq("tcp://p:0")).ok());
  ASSERT_TRUE(state.Register(wire::SERVER, 1, ServerReq("tcp://p:1")).ok());
  auto r = state.Register(wire::WORKER, 0, WorkerReq());
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->ready());
  EXPECT_EQ(r->waiting_for(), "backups of servers 0,1");
  // Before training starts nobody is promoted, whatever the leases say.
  ASSERT_TRUE(state.Register(wire::BACKUP, 0, ServerReq("tcp://b:0")).ok());
  clock.Advance(std::chrono::milliseconds(1100));
  ASSERT_TRUE(state.Register(wire::BACKUP, 0, ServerReq("tcp://b:0")).ok());
  state.ExpireLeases();
  EXPECT_EQ(state.promotions(), 0);
  for (auto [role, id, ep] : {std::tuple{wire::SERVER, 0, "tcp://p:0"}, {wire::SERVER, 1, "tcp://p:1"}})
    ASSERT_TRUE(state.Register(role, id, ServerReq(ep)).ok());
  ASSERT_TRUE(state.Register(wire::WORKER, 0, WorkerReq()).ok());
  ASSERT_TRUE(state.Register(wire::BACKUP, 0, ServerReq("tcp://b:0")).ok());
  EXPECT_FALSE(state.Register(wire::BACKUP, 2, ServerReq("tcp://b:2")).ok());  // no such shard
  ASSERT_TRUE(state.Register(wire::BACKUP, 1, ServerReq("tcp://b:1")).ok());
  ASSERT_TRUE(state.started());
  r = state.Register(wire::SERVER, 0, ServerReq("tcp://p:0"));
  ASSERT_TRUE(r.ok() && r->ready());
  EXPECT_EQ(r->servers(0).endpoint(), "tcp://p:0");
  EXPECT_EQ(r->servers(0).backup_endpoint(), "tcp://b:0");  // where the primary replicates to

  wire::Heartbeat hb;
  const uint64_t epoch = state.servers_epoch();
  // Everyone but server 0 keeps heartbeating; its lease runs out.
  for (int step = 0; step < 12; ++step) {
    clock.Advance(std::chrono::milliseconds(100));
    state.Heartbeat(wire::SERVER, 1, hb);
    state.Heartbeat(wire::BACKUP, 0, hb);
    state.Heartbeat(wire::BACKUP, 1, hb);
    state.Heartbeat(wire::WORKER, 0, hb);
    state.ExpireLeases();
  }
  EXPECT_EQ(state.promotions(), 1);
  EXPECT_GT(state.servers_epoch(), epoch);
  wire::HeartbeatReply b = state.Heartbeat(wire::BACKUP, 0, hb);
  EXPECT_TRUE(b.known());
  EXPECT_TRUE(b.promoted());
  EXPECT_FALSE(state.Heartbeat(wire::BACKUP, 1, hb).promoted());
  hb.set_servers_epoch(epoch);
  wire::HeartbeatReply w = state.Heartbeat(wire::WORKER, 0, hb);
  EXPECT_EQ(w.servers_epoch(), state.servers_epoch());
  ASSERT_EQ(w.servers_size(), 2);
  EXPECT_EQ(w.servers(0).endpoint(), "tcp://b:0");  // redirected
  EXPECT_EQ(w.servers(0).backup_endpoint(), "");    // no replica left
  EXPECT_EQ(w.servers(1).endpoint(), "tcp://p:1");
  hb.set_servers_epoch(state.servers_epoch());
  EXPECT_EQ(state.Heartbeat(wire::WORKER, 0, hb).servers_size(), 0);  // up to date: nothing sent
  // The old primary, restarted, cannot take the shard back; alive after all
  // (a pause), its heartbeat renews nothing and tells it who serves now.
  EXPECT_FALSE(state.Register(wire::SERVER, 0, ServerReq("tcp://p:9")).ok());
  hb.set_servers_epoch(0);
  wire::HeartbeatReply zombie = state.Heartbeat(wire::SERVER, 0, hb);
  ASSERT_EQ(zombie.servers_size(), 2);
  EXPECT_EQ(zombie.servers(0).endpoint(), "tcp://b:0");

  // A backup whose lease expires leaves its primary alone (degraded), not promoted.
  for (int step = 0; step < 12; ++step) {
    clock.Advance(std::chrono::milliseconds(100));
    state.Heartbeat(wire::SERVER, 1, hb);
    state.Heartbeat(wire::BACKUP, 0, hb);
    state.Heartbeat(wire::WORKER, 0, hb);
    state.ExpireLeases();
  }
  EXPECT_EQ(state.promotions(), 1);
  hb.set_servers_epoch(0);
  w = state.Heartbeat(wire::SERVER, 1, hb);
  ASSERT_EQ(w.servers_size(), 2);
  EXPECT_EQ(w.servers(1).endpoint(), "tcp://p:1");
  EXPECT_EQ(w.servers(1).backup_endpoint(), "");
  // The status lists backup 1, dead; backup 0 serves (in `servers`).
  wire::StatusReply st = state.Status();
  ASSERT_EQ(st.backups_size(), 1);
  EXPECT_EQ(st.backups(0).id(), 1);
  EXPECT_FALSE(st.backups(0).live());
  EXPECT_EQ(st.servers(0).endpoint(), "tcp://b:0");
  // Its primary went on alone: it never comes back, so it can never be
  // promoted with the updates it missed.
  auto back = state.Register(wire::BACKUP, 1, ServerReq("tcp://b:1"));
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(back.status().message().find("does not rejoin"), std::string::npos) << back.status();
  EXPECT_FALSE(state.Status().backups(0).live());
}

}  // namespace
wire::LinkEstimate Estimate(const std::string& server_region, double mbit, uint64_t samples) {
  wire::LinkEstimate e;
  e.set_server_region(server_region);
  e.set_mbit(mbit);
  e.set_samples(samples);
  e.set_min_rtt_ms(20);
  return e;
}

TEST(ReplanTest, MeasuredLinksSumsARegionsWorkersAndKeepsTheRest) {
  wan::LinkMatrix planned({"a", "b", "c"});
  for (auto [from, to] : {std::pair{0, 1}, std::pair{1, 0}, std::pair{0, 2}}) {
    planned.at(from, to).declared = true;
    planned.at(from, to).bandwidth_mbit = 100;
    planned.at(from, to).delay_ms = 10;
  }
  std::vector<WorkerLinkReport> reports = {
      {"b", {Estimate("a", 30, 10), Estimate("b", 5, 10)}},  // b -> b: inside a region, ignored
      {"b", {Estimate("a", 25, 10)}},
      {"a", {Estimate("b", 7, 2)}},        // too few samples
      {"c", {Estimate("b", 1, 50)}},       // b -> c: not declared, ignored
      {"nowhere", {Estimate("a", 1, 50)}}  // not a region
  };
  int measured = -1;
  wan::LinkMatrix m = MeasuredLinks(planned, reports, 5, &measured);
  EXPECT_EQ(measured, 1);
  EXPECT_DOUBLE_EQ(m.at(0, 1).bandwidth_mbit, 55);  // both b workers' shares of a -> b
  EXPECT_DOUBLE_EQ(m.at(0, 1).delay_ms, 10);        // the declared delay stays
  EXPECT_DOUBLE_EQ(m.at(1, 0).bandwidth_mbit, 100);
  EXPECT_DOUBLE_EQ(m.at(0, 2).bandwidth_mbit, 100);
  EXPECT_DOUBLE_EQ(m.at(1, 2).bandwidth_mbit, wan::kLoopbackMbit);
  EXPECT_DOUBLE_EQ(m.at(1, 1).bandwidth_mbit, wan::kLoopbackMbit);
  // With a lower threshold a's estimate of b -> a counts too.
  m = MeasuredLinks(planned, reports, 1, &measured);
  EXPECT_EQ(measured, 2);
  EXPECT_DOUBLE_EQ(m.at(1, 0).bandwidth_mbit, 7);
}

TEST(ReplanTest, BarrierIsTheHighestFloorBeforeTheLastClock) {
  EXPECT_EQ(ChooseBarrier({5, 7, 6}, 100), 7);
  EXPECT_EQ(ChooseBarrier({5}, 6), 5);
  EXPECT_EQ(ChooseBarrier({5, 99}, 99), -1);  // no clock left to move chunks for
  EXPECT_EQ(ChooseBarrier({}, 100), -1);
}

}  // namespace geodesic::coordinator
