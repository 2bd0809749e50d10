// PsClient against shards played by the test: over inproc ROUTERs, what a
// refused push does to the waits (docs/wire.md "Refused pushes"); over
// its send seam with a fake clock, acknowledgements, resends and rerouting.
#include "worker/ps_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cluster/chunking.h"
#include "common/digest.h"
#include "tests/worker/fake_shard_links.h"
#include "transport/message.h"
#include "worker/zmq_shard_links.h"

namespace geodesic::worker {
namespace {

constexpr int64_t kParams = 16;

// Two shards of one 8-value chunk each; the test answers for them.
class PsClientRefusalTest : public ::testing::Test {
 protected:
  PsClientRefusalTest() {
    const cluster::ShardMap map = cluster::PlaceChunks(cluster::ChunkLayout(kParams, 8), 2);
    wire::RegisterReply assignment;
    *assignment.mutable_shard_map() = map.ToWire();
    for (int s = 0; s < 2; ++s) {
      shards_.push_back(std::make_unique<transport::Socket>(
          ctx_, zmq::socket_type::router, transport::SocketOptions{.job = "job", .role = wire::SERVER, .id = s},
          &counters_));
      const std::string endpoint = "inproc://ps-client-test-" + std::to_string(s);
      EXPECT_TRUE(shards_.back()->Bind(endpoint).ok());
      auto* server = assignment.add_servers();
      server->set_id(s);
      server->set_endpoint(endpoint);
      server->set_region("r");
    }
    PsClientOptions options;
    options.job = "job";
    options.retry_after_s = 0.05;
    options.timing.rpc_timeout_s = 30;
    client_ = MakePsClient(ctx_, options, assignment, {}, &counters_, RealClock::Get());
    EXPECT_TRUE(client_->Connect().ok());
  }

  // The next push request shard `s` receives (bounded wait).
  std::optional<transport::Message> NextPush(int s) {
    for (int i = 0; i < 200; ++i) {
      if (!shards_[s]->WaitReadable(10)) continue;
      auto in = shards_[s]->Receive();
      if (in && in->status.ok() && in->message.header.has_push_request()) return std::move(in->message);
    }
    return std::nullopt;
  }

  void Refuse(int s, const transport::Message& push, wire::Refusal reason) {
    wire::Header h;
    h.set_request_id(push.header.request_id());
    h.mutable_error_reply()->set_code(wire::INVALID_ARGUMENT);
    h.mutable_error_reply()->set_reason(reason);
    h.mutable_error_reply()->set_message("refused by the test");
    ASSERT_TRUE(shards_[s]->Send(h, {}, push.peer).ok());
  }

  void Ack(int s, const transport::Message& push) {
    wire::Header h;
    h.set_request_id(push.header.request_id());
    h.mutable_push_ack()->set_clock(push.header.push_request().clock());
    h.mutable_push_ack()->set_applied_chunks(push.header.push_request().chunks_size());
    ASSERT_TRUE(shards_[s]->Send(h, {}, push.peer).ok());
  }

  Status PushClock(int64_t clock) {
    auto grad = std::make_shared<std::vector<float>>(kParams, 0.5f);
    return client_->Push(clock, {.values = grad->data(), .owner = std::shared_ptr<const void>(grad, grad->data())});
  }

  zmq::context_t ctx_{1};
  transport::TrafficCounters counters_;
  std::vector<std::unique_ptr<transport::Socket>> shards_;
  std::unique_ptr<PsClient> client_;
  std::atomic<bool> stop_{false};
};

// A push refused for its values (a diverged model) was counted as
// acknowledged: the shard never completed that clock, and every worker of a
// BSP job waited 120 s for a pull that could not come. Now the waits fail at
// once with the refusal, marked job-fatal.
TEST_F(PsClientRefusalTest, APushRefusedForItsValuesFailsEveryWaitAtOnce) {
  ASSERT_TRUE(PushClock(0).ok());
  auto p0 = NextPush(0), p1 = NextPush(1);
  ASSERT_TRUE(p0 && p1);
  Ack(0, *p0);
  Refuse(1, *p1, wire::REFUSAL_VALUE_TOO_LARGE);
  const auto start = std::chrono::steady_clock::now();
  StatusOr<double> waited = client_->WaitAcks(0, &stop_);
  ASSERT_FALSE(waited.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(waited.status().detail(), Detail::kJobFatal) << waited.status();
  EXPECT_NE(waited.status().message().find("push at clock 0 refused (value_too_large)"), std::string::npos)
      << waited.status();
  EXPECT_NE(waited.status().message().find("the model diverged"), std::string::npos) << waited.status();
  EXPECT_EQ(client_->Stats().pushes_refused, 1u);
  // Later calls fail with it too; nothing more is sent.
  EXPECT_EQ(PushClock(1).detail(), Detail::kJobFatal);
  ASSERT_TRUE(client_->Pull(1).ok());
  std::vector<float> params(kParams);
  EXPECT_FALSE(client_->WaitPull(1, {.params = params.data(), .stop = &stop_}).ok());
}

// A refusal that is not about the values (a malformed push: a bug) fails
// the waits too, but is not job-fatal: the launcher goes on without the
// worker as for any worker error.
TEST_F(PsClientRefusalTest, AnyOtherFinalRefusalFailsTheWaitsButIsNotJobFatal) {
  ASSERT_TRUE(PushClock(0).ok());
  auto p0 = NextPush(0), p1 = NextPush(1);
  ASSERT_TRUE(p0 && p1);
  Ack(0, *p0);
  Refuse(1, *p1, wire::REFUSAL_BAD_CLOCK);
  StatusOr<double> waited = client_->WaitAcks(0, &stop_);
  ASSERT_FALSE(waited.ok());
  EXPECT_EQ(waited.status().detail(), Detail::kNone) << waited.status();
  EXPECT_NE(waited.status().message().find("bad_clock"), std::string::npos) << waited.status();
}

// A backup not yet promoted (not_primary) and a chunk that moved keep the
// push pending: it is sent again and acknowledged then.
TEST_F(PsClientRefusalTest, NotPrimaryAndMovedKeepThePushAndSendItAgain) {
  for (wire::Refusal r : {wire::REFUSAL_NOT_PRIMARY, wire::REFUSAL_MOVED}) {
    const int64_t clock = r == wire::REFUSAL_MOVED ? 1 : 0;
    ASSERT_TRUE(PushClock(clock).ok());
    auto p0 = NextPush(0), p1 = NextPush(1);
    ASSERT_TRUE(p0 && p1);
    Ack(0, *p0);
    Refuse(1, *p1, r);
    client_->PullArrived(-2);  // reads the replies
    // The retry interval is 50 ms; the resend arrives and is acknowledged.
    std::thread answer([&] {
      if (auto again = NextPush(1)) Ack(1, *again);
    });
    StatusOr<double> waited = client_->WaitAcks(0, &stop_);
    answer.join();
    ASSERT_TRUE(waited.ok()) << waited.status();
    EXPECT_EQ(client_->Stats().pushes_refused, 0u);
    EXPECT_TRUE(client_->Stats().push_error.ok());
  }
}

}  // namespace
}  // namespace geodesic::worker

namespace geodesic::worker {
namespace {

// The same client over FakeShardLinks (tests/worker/fake_shard_links.h) and
// a FakeClock: acknowledgements, resends and rerouting in one thread, with
// the retry interval (1 s) passing in fake time as the client polls.
class PsClientSeamTest : public ::testing::Test {
 protected:
  PsClientSeamTest() : map_(cluster::PlaceChunks(cluster::ChunkLayout(kParams, 8), 2)) {
    for (int s = 0; s < 2; ++s) {
      auto* server = assignment_.add_servers();
      server->set_id(s);
      server->set_endpoint("tcp://shard-" + std::to_string(s));
      server->set_region("r");
    }
    *assignment_.mutable_shard_map() = map_.ToWire();
  }

  void Start(ServersViewFn view = {}) {
    PsClientOptions options;
    options.job = "job";
    options.retry_after_s = 1;
    options.timing.rpc_timeout_s = 30;
    options.timing.report_after_s = 1000;
    options.servers_view = std::move(view);
    auto links = std::make_unique<FakeShardLinks>(&clock_);
    links_ = links.get();
    client_ = std::make_unique<PsClient>(std::move(links), options, assignment_, &clock_);
    ASSERT_TRUE(client_->Connect().ok());
  }

  // The shard index that owns `chunk` in the assignment's map.
  size_t Owner(uint32_t chunk) const { return static_cast<size_t>(map_.owner[chunk]); }

  static wire::Header AckOf(const FakeShardLinks::Sent& push) {
    wire::Header h;
    h.set_request_id(push.header.request_id());
    h.mutable_push_ack()->set_clock(push.header.push_request().clock());
    h.mutable_push_ack()->set_applied_chunks(push.header.push_request().chunks_size());
    return h;
  }

  // Shard `si`'s answer to pull request `req`: every chunk it asked for,
  // each value `value` (with `delta`: a change of `value` to copy 0).
  void AnswerPull(const FakeShardLinks::Sent& req, float value, bool delta = false) {
    wire::Header h;
    h.set_request_id(req.header.request_id());
    auto* r = h.mutable_pull_reply();
    r->set_clock(req.header.pull_request().clock());
    std::vector<std::string> frames;
    for (uint32_t c : req.header.pull_request().chunk_ids()) {
      auto* d = r->add_chunks();
      d->set_chunk_id(c);
      d->set_codec(wire::FP32);
      d->set_num_elems(map_.layout.Size(c));
      d->set_version(1);
      d->set_delta(delta);
      std::vector<float> v(map_.layout.Size(c), value);
      frames.emplace_back(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    }
    links_->Reply(req.si, h, frames);
  }

  Status PushClock(int64_t clock) {
    auto grad = std::make_shared<std::vector<float>>(kParams);
    for (int64_t i = 0; i < kParams; ++i) (*grad)[i] = static_cast<float>(i);
    return client_->Push(clock, {.values = grad->data(), .owner = std::shared_ptr<const void>(grad, grad->data())});
  }

  FakeClock clock_;
  cluster::ShardMap map_;
  wire::RegisterReply assignment_;
  FakeShardLinks* links_ = nullptr;
  std::unique_ptr<PsClient> client_;
  std::atomic<bool> stop_{false};
};

// An acknowledged push leaves the client's books: nothing is sent again,
// however long we wait, and a duplicate acknowledgement changes nothing.
// Links that begin sending elsewhere on their own (AggregatorLinks falling
// back to the shards) make the client send every unanswered request again
// at once, not after the retry interval.
TEST_F(PsClientSeamTest, ReroutedLinksGetEveryUnansweredRequestAgainAtOnce) {
  Start();
  ASSERT_TRUE(PushClock(0).ok());
  ASSERT_TRUE(client_->Pull(1).ok());
  const size_t sent = links_->sent.size();
  ASSERT_TRUE(client_->Tick().ok());
  EXPECT_EQ(links_->sent.size(), sent) << "nothing is due yet";
  links_->rerouted = true;
  ASSERT_TRUE(client_->Tick().ok());
  EXPECT_EQ(links_->sent.size(), 2 * sent) << "each push and pull request once more";
  // The same pushes (their request ids) and the same pull (a fresh id, same clock), to each shard.
  std::multiset<std::tuple<size_t, bool, uint64_t>> first, again;  // (shard, push?, push id or pull clock)
  for (size_t i = 0; i < links_->sent.size(); ++i) {
    const wire::Header& h = links_->sent[i].header;
    const bool push = h.has_push_request();
    (i < sent ? first : again)
        .insert({links_->sent[i].si, push, push ? h.request_id() : static_cast<uint64_t>(h.pull_request().clock())});
  }
  EXPECT_EQ(first, again);
}

// The values held before a reroute came from the old route (a regional
// aggregator's exact values), not from the changes a shard keeps a copy
// for: after it, a shard's change is not applied, and the client asks for
// full values instead.
TEST_F(PsClientSeamTest, AfterARerouteAShardsChangeIsNotAppliedToValuesFromTheOldRoute) {
  Start();
  std::vector<float> values(kParams, 0.f);
  ASSERT_TRUE(client_->Pull(1).ok());
  for (size_t si = 0; si < 2; ++si) AnswerPull(links_->SentTo(si, wire::Header::kPullRequest).back(), 2.f);
  ASSERT_TRUE(client_->WaitPull(1, {.params = values.data(), .stop = &stop_}).ok());
  links_->rerouted = true;
  ASSERT_TRUE(client_->Tick().ok());
  // The shards answer a pull with a change of +1 to their copy, a full one with 5.
  links_->respond = [this](const FakeShardLinks::Sent& sent) {
    if (!sent.header.has_pull_request()) return;
    const bool full = sent.header.pull_request().full();
    AnswerPull(sent, full ? 5.f : 1.f, !full);
  };
  ASSERT_TRUE(client_->Pull(2).ok());
  ASSERT_TRUE(client_->WaitPull(2, {.params = values.data(), .stop = &stop_}).ok());
  EXPECT_EQ(values, std::vector<float>(kParams, 5.f)) << "a change was applied to values it was not made for";
  EXPECT_EQ(client_->Stats().resyncs, 2u);
}

TEST_F(PsClientSeamTest, AnAcknowledgedPushIsNeverSentAgain) {
  Start();
  ASSERT_TRUE(PushClock(0).ok());
  for (size_t si = 0; si < 2; ++si) {
    auto pushes = links_->SentTo(si, wire::Header::kPushRequest);
    ASSERT_EQ(pushes.size(), 1u);
    links_->Reply(si, AckOf(pushes[0]));
    links_->Reply(si, AckOf(pushes[0]));  // a duplicate
  }
  StatusOr<double> waited = client_->WaitAcks(0, &stop_);
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(client_->OldestUnackedClock(), std::numeric_limits<int64_t>::max());
  clock_.Advance(std::chrono::seconds(10));
  EXPECT_FALSE(client_->PullArrived(0));  // polls and resends what is due: nothing
  EXPECT_EQ(links_->SentTo(0, wire::Header::kPushRequest).size() + links_->SentTo(1, wire::Header::kPushRequest).size(),
            2u);
  EXPECT_EQ(client_->Stats().push_latency.count(), 2u);
}

// A push a shard does not acknowledge is sent again, the same message under
// the same request id, once the retry interval has passed, and the wait
// ends when the resend is acknowledged.
TEST_F(PsClientSeamTest, AnUnacknowledgedPushIsSentAgainAfterTheRetryInterval) {
  Start();
  int answered = 0;
  links_->respond = [&](const FakeShardLinks::Sent& s) {
    if (!s.header.has_push_request()) return;
    // Shard 0 acknowledges at once; shard 1 only the resend.
    if (s.si == 0 || links_->SentTo(1, wire::Header::kPushRequest).size() == 2) {
      links_->Reply(s.si, AckOf(s));
      ++answered;
    }
  };
  ASSERT_TRUE(PushClock(3).ok());
  EXPECT_EQ(client_->OldestUnackedClock(), 3);
  StatusOr<double> waited = client_->WaitAcks(0, &stop_);
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(answered, 2);
  EXPECT_GE(*waited, 1.0);  // fake seconds: the retry interval
  EXPECT_LT(*waited, 1.5);
  auto to1 = links_->SentTo(1, wire::Header::kPushRequest);
  ASSERT_EQ(to1.size(), 2u);
  EXPECT_EQ(to1[0].header.request_id(), to1[1].header.request_id());
  EXPECT_EQ(to1[0].payloads, to1[1].payloads);
  EXPECT_EQ(links_->SentTo(0, wire::Header::kPushRequest).size(), 1u);
}

// A pull that makes no progress for the retry interval asks again, and only
// the shard that still owes chunks, for those chunks.
TEST_F(PsClientSeamTest, AStalledPullAsksAgainForWhatIsMissing) {
  Start();
  const size_t quiet = Owner(1);
  links_->respond = [&](const FakeShardLinks::Sent& s) {
    if (!s.header.has_pull_request()) return;
    if (s.si != quiet || links_->SentTo(quiet, wire::Header::kPullRequest).size() == 2) AnswerPull(s, 0.25f);
  };
  ASSERT_TRUE(client_->Pull(1, {.full = true}).ok());
  std::vector<float> params(kParams, 0);
  StatusOr<PullTiming> t = client_->WaitPull(1, {.params = params.data(), .stop = &stop_});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_GE(t->wait_seconds, 1.0);
  for (float v : params) EXPECT_EQ(v, 0.25f);
  EXPECT_EQ(links_->SentTo(1 - quiet, wire::Header::kPullRequest).size(), 1u);
  auto again = links_->SentTo(quiet, wire::Header::kPullRequest);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_NE(again[0].header.request_id(), again[1].header.request_id());
  EXPECT_EQ(again[1].header.pull_request().chunk_ids_size(), 1);
  EXPECT_EQ(again[1].header.pull_request().chunk_ids(0), 1u);
}

// A re-planned map moves chunk 1 to the other shard: the push not yet
// acknowledged is split and its moved chunk sent to the new owner (the
// same bytes, a new request id), the pull still waiting asks the new owner,
// and the old owner's late acknowledgement of the old request is ignored.
TEST_F(PsClientSeamTest, ANewMapReroutesWhatIsUnansweredToTheNewOwner) {
  Start();
  const size_t from = Owner(1), to = 1 - from;
  ASSERT_TRUE(PushClock(0).ok());
  ASSERT_TRUE(client_->Pull(1).ok());
  const auto old_push = links_->SentTo(from, wire::Header::kPushRequest).at(0);
  links_->Reply(to, AckOf(links_->SentTo(to, wire::Header::kPushRequest).at(0)));

  cluster::ShardMap next = map_;
  next.owner[1] = static_cast<int32_t>(to);
  ++next.version;
  ASSERT_TRUE(client_->SwitchMap(next.ToWire()).ok());
  EXPECT_EQ(client_->Stats().chunks_rerouted, 1u);
  EXPECT_EQ(client_->shard_map().version, next.version);

  auto rerouted = links_->SentTo(to, wire::Header::kPushRequest);
  ASSERT_EQ(rerouted.size(), 2u);
  const auto& moved = rerouted[1];
  EXPECT_NE(moved.header.request_id(), old_push.header.request_id());
  ASSERT_EQ(moved.header.push_request().chunks_size(), 1);
  EXPECT_EQ(moved.header.push_request().chunks(0).chunk_id(), 1u);
  EXPECT_EQ(moved.payloads, old_push.payloads);
  auto pulls = links_->SentTo(to, wire::Header::kPullRequest);
  ASSERT_EQ(pulls.size(), 2u);
  // Both of its chunks are still missing: its own and the one it took over.
  ASSERT_EQ(pulls[1].header.pull_request().chunk_ids_size(), 2);
  EXPECT_EQ(pulls[1].header.pull_request().chunk_ids(1), 1u);
  EXPECT_EQ(links_->SentTo(from, wire::Header::kPullRequest).size(), 1u);

  links_->Reply(from, AckOf(old_push));  // late: its request is gone
  EXPECT_FALSE(client_->PullArrived(1));
  EXPECT_EQ(client_->OldestUnackedClock(), 0);
  links_->Reply(to, AckOf(moved));
  ASSERT_TRUE(client_->WaitAcks(0, &stop_).ok());
  // A map that is not newer changes nothing.
  ASSERT_TRUE(client_->SwitchMap(map_.ToWire()).ok());
  EXPECT_EQ(client_->shard_map().version, next.version);
}

// A replicated shard's backup was promoted (the servers view moved its
// endpoint): the client reconnects and sends it every push and pull it has
// not answered, once.
TEST_F(PsClientSeamTest, APromotedBackupGetsWhatItsPrimaryDidNotAnswer) {
  uint64_t epoch = 0;
  Start([&](uint64_t seen, std::vector<wire::ServerInfo>* servers) {
    if (epoch <= seen) return seen;
    wire::ServerInfo info = assignment_.servers(1);
    info.set_endpoint("tcp://backup-1");
    servers->push_back(info);
    return epoch;
  });
  ASSERT_TRUE(PushClock(0).ok());
  ASSERT_TRUE(client_->Pull(1).ok());
  const auto push = links_->SentTo(1, wire::Header::kPushRequest).at(0);
  epoch = 1;
  EXPECT_FALSE(client_->PullArrived(1));
  ASSERT_EQ(links_->connects.size(), 3u);
  EXPECT_EQ(links_->connects[2], std::make_pair(size_t{1}, std::string("tcp://backup-1")));
  EXPECT_EQ(client_->Stats().redirects, 1u);
  auto pushes = links_->SentTo(1, wire::Header::kPushRequest);
  ASSERT_EQ(pushes.size(), 2u);
  EXPECT_EQ(pushes[1].header.request_id(), push.header.request_id());
  EXPECT_EQ(links_->SentTo(1, wire::Header::kPullRequest).size(), 2u);
  EXPECT_EQ(links_->SentTo(0, wire::Header::kPushRequest).size(), 1u);
  EXPECT_FALSE(client_->PullArrived(1));  // the same epoch again: no second redirect
  EXPECT_EQ(client_->Stats().redirects, 1u);
  EXPECT_EQ(links_->SentTo(1, wire::Header::kPushRequest).size(), 2u);
}

// Initial values: offered by digest, sent where a shard asks for them, and
// sent again (copied once, the same bytes) to a shard that does not answer.
TEST_F(PsClientSeamTest, InitialValuesAreOfferedThenSentAgainUntilAcknowledged) {
  Start();
  auto values_to = [&](size_t si) {
    std::vector<FakeShardLinks::Sent> out;
    for (auto& s : links_->SentTo(si, wire::Header::kInitRequest))
      if (!s.header.init_request().offer()) out.push_back(s);
    return out;
  };
  links_->respond = [&](const FakeShardLinks::Sent& s) {
    if (!s.header.has_init_request()) return;
    const wire::InitRequest& r = s.header.init_request();
    wire::Header ack;
    ack.set_request_id(s.header.request_id());
    auto* a = ack.mutable_init_ack();
    if (r.offer()) {
      for (const auto& c : r.chunks()) a->add_send_chunks(c.chunk_id());
      links_->Reply(s.si, ack);
    } else if (s.si == 0 || values_to(1).size() == 2) {
      for (const auto& c : r.chunks()) a->add_held_chunks(c.chunk_id());
      links_->Reply(s.si, ack);
    }
  };
  std::vector<float> params(kParams, 1.5f);
  ASSERT_TRUE(client_->Init(params.data(), &stop_).ok());
  auto offers = links_->SentTo(1, wire::Header::kInitRequest);
  ASSERT_GE(offers.size(), 1u);
  const wire::InitRequest& offer = offers.at(0).header.init_request();
  ASSERT_TRUE(offer.offer());
  EXPECT_TRUE(offers.at(0).payloads.empty());
  ASSERT_EQ(offer.digests_size(), 1);
  const uint32_t chunk = offer.chunks(0).chunk_id();
  EXPECT_EQ(offer.digests(0), ValuesDigest(params.data() + map_.layout.Begin(chunk), map_.layout.Size(chunk)));
  auto inits = values_to(1);
  ASSERT_EQ(inits.size(), 2u);
  EXPECT_EQ(inits[0].payloads, inits[1].payloads);
  EXPECT_EQ(inits[1].payloads.at(0).size(), map_.layout.Size(1) * sizeof(float));
  EXPECT_TRUE(client_->HoldsAllInitial());
}

// A shard's answer naming chunks it does not own (another shard's, or none
// of the model's) is ignored for them: nothing is sent, held or read out
// of range, and those chunks are pulled at clock 0.
TEST_F(PsClientSeamTest, AnInitAnswerNamingOtherChunksIsIgnoredForThem) {
  Start();
  const uint32_t theirs = Owner(0) == 0 ? 1 : 0;  // a chunk shard index 0 does not own
  links_->respond = [&](const FakeShardLinks::Sent& s) {
    if (!s.header.has_init_request()) return;
    ASSERT_TRUE(s.header.init_request().offer()) << "no values should be sent";
    wire::Header ack;
    ack.set_request_id(s.header.request_id());
    auto* a = ack.mutable_init_ack();
    if (s.si == 0) {
      for (uint32_t c : {theirs, 999u}) a->add_send_chunks(c), a->add_wait_chunks(c), a->add_held_chunks(c);
    } else {
      for (const auto& c : s.header.init_request().chunks()) a->add_held_chunks(c.chunk_id());
    }
    links_->Reply(s.si, ack);
  };
  std::vector<float> params(kParams, 0.75f);
  ASSERT_TRUE(client_->Init(params.data(), &stop_).ok());
  EXPECT_EQ(links_->SentTo(0, wire::Header::kInitRequest).size(), 1u);
  EXPECT_FALSE(client_->HoldsAllInitial());
}

// A chunk another worker is sending is offered again and never sent; one
// set to other values is neither held nor sent (the worker pulls it).
TEST_F(PsClientSeamTest, ChunksAnotherWorkerSetsAreOfferedAgainAndHeldOnlyIfTheSame) {
  for (bool same : {true, false}) {
    Start();
    int offers_to_1 = 0;
    links_->respond = [&](const FakeShardLinks::Sent& s) {
      if (!s.header.has_init_request()) return;
      const wire::InitRequest& r = s.header.init_request();
      ASSERT_TRUE(r.offer()) << "no values should be sent";
      wire::Header ack;
      ack.set_request_id(s.header.request_id());
      auto* a = ack.mutable_init_ack();
      const bool first = s.si == 1 && offers_to_1++ == 0;
      for (const auto& c : r.chunks()) {
        if (first)
          a->add_wait_chunks(c.chunk_id());
        else if (same || s.si == 0)
          a->add_held_chunks(c.chunk_id());
        else
          a->set_ignored_chunks(a->ignored_chunks() + 1);
      }
      links_->Reply(s.si, ack);
    };
    std::vector<float> params(kParams, 0.25f);
    ASSERT_TRUE(client_->Init(params.data(), &stop_).ok());
    EXPECT_EQ(offers_to_1, 2);
    EXPECT_EQ(client_->HoldsAllInitial(), same);
  }
}

}  // namespace
}  // namespace geodesic::worker
