// Who sends a chunk's initial values (server/init_offers.h), and the
// checks on an offer (ApplyInitOffer, server/requests.h).
#include "server/init_offers.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/digest.h"
#include "server/requests.h"

namespace geodesic::server {
namespace {

std::vector<uint32_t> Ids(const google::protobuf::RepeatedField<uint32_t>& f) { return {f.begin(), f.end()}; }

// One shard owning both chunks (8 values each) of a 16-value model, not yet
// set; three workers.
class InitOffersTest : public ::testing::Test {
 protected:
  InitOffersTest() : shard_(ShardOptions{}, cluster::ChunkLayout(16, 8), {0, 1}), values_(8, 0.25f) {
    clocks_.SetLive({0, 1, 2}, {0, 0, 0});
  }

  ShardContext Ctx() {
    return ShardContext{.shard = &shard_, .clocks = &clocks_, .server_id = 0, .num_workers = 3, .decoder = &decoder_};
  }

  // Worker `id` offers `chunks`, each with the digest of `values` (or `digest`).
  static transport::Message Offer(int id, const std::vector<uint32_t>& chunks, uint64_t digest) {
    transport::Message m;
    m.header.set_sender_role(wire::WORKER);
    m.header.set_sender_id(id);
    m.header.set_request_id(100 + id);
    auto* r = m.header.mutable_init_request();
    r->set_offer(true);
    for (uint32_t c : chunks) {
      auto* d = r->add_chunks();
      d->set_chunk_id(c);
      d->set_num_elems(8);
      r->add_digests(digest);
    }
    return m;
  }
  // Worker `id` sends the values of `chunks`.
  transport::Message Values(int id, const std::vector<uint32_t>& chunks, const std::vector<float>& v) {
    transport::Message m;
    m.header.set_sender_role(wire::WORKER);
    m.header.set_sender_id(id);
    auto* r = m.header.mutable_init_request();
    for (uint32_t c : chunks) {
      auto* d = r->add_chunks();
      d->set_chunk_id(c);
      d->set_codec(wire::FP32);
      d->set_num_elems(8);
      m.frames.emplace_back(v.data(), v.size() * sizeof(float));
    }
    return m;
  }
  wire::InitAck Answer(const transport::Message& m, TimePoint now) {
    Handled h = ApplyInitOffer(Ctx(), offers_, m, now);
    EXPECT_TRUE(h.status.ok()) << h.status;
    EXPECT_EQ(h.reply.request_id(), m.header.request_id());
    return h.reply.init_ack();
  }
  uint64_t Digest() const { return ValuesDigest(values_.data(), values_.size()); }

  ShardState shard_;
  ClockTable clocks_{0};
  RequestDecoder decoder_;
  InitOffers offers_;
  std::vector<float> values_;
  TimePoint t0_{};
};

TEST_F(InitOffersTest, TheFirstOffererSendsTheOthersWaitThenHoldWhatTheySent) {
  wire::InitAck a = Answer(Offer(0, {0, 1}, Digest()), t0_);
  EXPECT_EQ(Ids(a.send_chunks()), (std::vector<uint32_t>{0, 1}));
  EXPECT_TRUE(a.wait_chunks().empty() && a.held_chunks().empty());
  wire::InitAck b = Answer(Offer(1, {0, 1}, Digest()), t0_ + std::chrono::seconds(1));
  EXPECT_TRUE(b.send_chunks().empty());
  EXPECT_EQ(Ids(b.wait_chunks()), (std::vector<uint32_t>{0, 1}));
  // Asking again is no theft: worker 0 keeps its reservation.
  EXPECT_EQ(Answer(Offer(0, {1}, Digest()), t0_ + std::chrono::seconds(2)).send_chunks_size(), 1);

  Handled v = ApplyInit(Ctx(), Values(0, {0, 1}, values_));
  ASSERT_TRUE(v.status.ok()) << v.status;
  EXPECT_EQ(v.reply.init_ack().accepted_chunks(), 2u);
  EXPECT_EQ(Ids(v.reply.init_ack().held_chunks()), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(offers_.reserved(), 2u);

  // Set now: the same digest is held, another one is not (it pulls).
  wire::InitAck c = Answer(Offer(1, {0, 1}, Digest()), t0_ + std::chrono::seconds(3));
  EXPECT_EQ(Ids(c.held_chunks()), (std::vector<uint32_t>{0, 1}));
  EXPECT_TRUE(c.send_chunks().empty() && c.wait_chunks().empty());
  EXPECT_EQ(offers_.reserved(), 0u);
  wire::InitAck d = Answer(Offer(2, {0, 1}, Digest() ^ 1), t0_ + std::chrono::seconds(3));
  EXPECT_TRUE(d.held_chunks().empty());
  EXPECT_EQ(d.ignored_chunks(), 2u);
}

TEST_F(InitOffersTest, AReservationLapsesWhenItsWorkerNeverSends) {
  EXPECT_EQ(Answer(Offer(0, {0}, Digest()), t0_).send_chunks_size(), 1);
  EXPECT_EQ(Answer(Offer(1, {0}, Digest()), t0_ + InitOffers::kHold - std::chrono::milliseconds(1)).wait_chunks_size(),
            1);
  EXPECT_EQ(Answer(Offer(1, {0}, Digest()), t0_ + InitOffers::kHold).send_chunks_size(), 1);
  // Now worker 0, back, waits for worker 1.
  EXPECT_EQ(Answer(Offer(0, {0}, Digest()), t0_ + InitOffers::kHold).wait_chunks_size(), 1);
}

TEST_F(InitOffersTest, ValuesThatLostTheRaceAreHeldOnlyIfEqualAndOnlyBeforeAnUpdate) {
  ASSERT_TRUE(ApplyInit(Ctx(), Values(0, {0, 1}, values_)).status.ok());
  Handled same = ApplyInit(Ctx(), Values(1, {0}, values_));
  ASSERT_TRUE(same.status.ok());
  EXPECT_EQ(same.reply.init_ack().ignored_chunks(), 1u);
  EXPECT_EQ(Ids(same.reply.init_ack().held_chunks()), (std::vector<uint32_t>{0}));
  std::vector<float> other(8, 0.5f);
  Handled differ = ApplyInit(Ctx(), Values(2, {0}, other));
  ASSERT_TRUE(differ.status.ok());
  EXPECT_TRUE(differ.reply.init_ack().held_chunks().empty());

  // Once chunk 0 took an update its initial values are gone: no one holds it.
  std::vector<float> grad(8, 1.0f);
  for (int w = 0; w < 3; ++w) shard_.Push(w, 0, 0, 0, grad.data(), 3);
  clocks_.Finished(0, 0), clocks_.Finished(1, 0), clocks_.Finished(2, 0);
  shard_.CloseRounds(clocks_);  // BSP: the round closes; asynchronous: each push applied already
  ASSERT_GT(shard_.Read(0).version, 0u);
  EXPECT_TRUE(Answer(Offer(1, {0}, Digest()), t0_).held_chunks().empty());
  EXPECT_EQ(Ids(Answer(Offer(1, {1}, Digest()), t0_).held_chunks()), (std::vector<uint32_t>{1}));
}

TEST_F(InitOffersTest, MalformedOffersAreRefusedWhole) {
  auto refused = [&](transport::Message m, wire::Refusal want) {
    Handled h = ApplyInitOffer(Ctx(), offers_, m, t0_);
    EXPECT_FALSE(h.status.ok());
    EXPECT_EQ(h.reason, want) << h.status;
  };
  transport::Message frames = Offer(0, {0}, Digest());
  frames.frames.emplace_back(values_.data(), values_.size() * sizeof(float));
  refused(std::move(frames), wire::REFUSAL_FRAME_COUNT);
  transport::Message digests = Offer(0, {0, 1}, Digest());
  digests.header.mutable_init_request()->mutable_digests()->RemoveLast();
  refused(std::move(digests), wire::REFUSAL_BAD_PAYLOAD);
  refused(Offer(0, {1, 1}, Digest()), wire::REFUSAL_DUPLICATE_CHUNK);
  refused(Offer(0, {7}, Digest()), wire::REFUSAL_CHUNK_OUT_OF_RANGE);
  refused(Offer(9, {0}, Digest()), wire::REFUSAL_BAD_SENDER);
  transport::Message server = Offer(0, {0}, Digest());
  server.header.set_sender_role(wire::SERVER);
  refused(std::move(server), wire::REFUSAL_BAD_SENDER);
  EXPECT_EQ(offers_.reserved(), 0u);  // nothing reserved by a refused offer
}

}  // namespace
}  // namespace geodesic::server
