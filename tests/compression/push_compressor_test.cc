#include "compression/push_compressor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace geodesic::compression {
namespace {

CodecSpec Spec(const std::string& name) {
  auto spec = ParseCodecSpec(name);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// Decodes what Encode produced for chunk `c` of `n` values.
std::vector<float> EncodeDecode(PushCompressor& pc, size_t dest, int64_t clock, uint32_t c, uint64_t n) {
  std::vector<uint8_t> bytes;
  PayloadInfo info;
  Status s = pc.Encode(dest, clock, c, &bytes, &info);
  EXPECT_TRUE(s.ok()) << s;
  std::vector<float> out(n);
  std::vector<uint8_t> scratch;
  EXPECT_TRUE(Decode(info, bytes.data(), bytes.size(), n, out.data(), &scratch).ok());
  return out;
}

TEST(PushCompressorTest, Fp32DestinationsSendTheGradientRaw) {
  PushCompressor pc({}, 8, 4);
  pc.SetCodec(0, 0, Spec("fp32"));
  pc.SetChunks(0, {0, 1});
  EXPECT_FALSE(pc.encodes(0));
  EXPECT_FALSE(pc.encodes(5));
  std::vector<float> g(8, 1.0f);
  std::shared_ptr<const void> owner;
  EXPECT_EQ(pc.Prepare(0, g.data(), &owner), g.data());
  EXPECT_EQ(owner, nullptr);
}

TEST(PushCompressorTest, GlobalTopKThresholdSpansChunks) {
  // Chunk 0 holds every large value: a global top-k sends them all from
  // chunk 0 and at least one value from chunk 1.
  PushCompressor pc({.error_feedback = true}, 8, 4);
  pc.SetCodec(0, 0, Spec("topk:0.5"));
  pc.SetChunks(0, {0, 1});
  ASSERT_TRUE(pc.encodes(0));
  std::vector<float> g = {10, -20, 30, 40, 0.1f, 0.2f, 0.3f, 0.4f};
  std::shared_ptr<const void> owner;
  pc.Prepare(0, g.data(), &owner);
  std::vector<float> c0 = EncodeDecode(pc, 0, 0, 0, 4);
  std::vector<float> c1 = EncodeDecode(pc, 0, 0, 1, 4);
  EXPECT_EQ(c0, (std::vector<float>{10, -20, 30, 40}));
  int sent1 = 0;
  for (float v : c1) sent1 += v != 0.0f;
  EXPECT_EQ(sent1, 1);
  // Error feedback kept what chunk 1 did not send.
  EXPECT_NEAR(pc.error_feedback().ResidualSquaredNorm(), 0.01 + 0.04 + 0.09, 1e-5);
}

TEST(PushCompressorTest, ErrorFeedbackAddsTheResidualToTheNextPush) {
  PushCompressor pc({.error_feedback = true}, 4, 4);
  pc.SetCodec(0, 3, Spec("topk:0.25"));
  pc.SetChunks(0, {0});
  std::vector<float> g = {1, 2, 3, 4};
  std::shared_ptr<const void> owner;
  pc.Prepare(0, g.data(), &owner);
  EXPECT_EQ(EncodeDecode(pc, 0, 0, 0, 4), (std::vector<float>{0, 0, 0, 4}));
  std::vector<float> zero(4, 0.0f);
  pc.Prepare(1, zero.data(), &owner);
  EXPECT_EQ(EncodeDecode(pc, 0, 1, 0, 4), (std::vector<float>{0, 0, 3, 0}));
}

// training.fragments: a push of some chunks alone takes top-k's fraction of
// those chunks (a threshold over every chunk would let the pushed ones send
// the others' share too), and the chunks left out keep their residuals.
TEST(PushCompressorTest, APushOfSomeChunksKeepsTheFractionAndTheOthersResiduals) {
  PushCompressor pc({.error_feedback = true}, 8, 4);
  pc.SetCodec(0, 0, Spec("topk:0.5"));
  pc.SetChunks(0, {0, 1});
  std::vector<float> g = {1, 2, 3, 4, 5, 6, 7, 8};
  std::shared_ptr<const void> owner;
  pc.Prepare(0, g.data(), &owner, 1, 2);  // chunk 1 alone
  EXPECT_EQ(EncodeDecode(pc, 0, 0, 1, 4), (std::vector<float>{0, 0, 7, 8}));
  EXPECT_NEAR(pc.error_feedback().ResidualSquaredNorm(), 25 + 36, 1e-5);
  std::vector<float> h = {1, 2, 3, 4, 0, 0, 0, 0};
  pc.Prepare(1, h.data(), &owner, 0, 1);  // chunk 0 alone
  EXPECT_EQ(EncodeDecode(pc, 0, 1, 0, 4), (std::vector<float>{0, 0, 3, 4}));
  EXPECT_NEAR(pc.error_feedback().ResidualSquaredNorm(), 1 + 4 + 25 + 36, 1e-5);
  // Chunk 1's residual went nowhere: it leads the next push of chunk 1.
  std::vector<float> zero(8, 0.0f);
  pc.Prepare(2, zero.data(), &owner, 1, 2);
  EXPECT_EQ(EncodeDecode(pc, 0, 2, 1, 4), (std::vector<float>{5, 6, 0, 0}));
}

TEST(PushCompressorTest, SparsityWarmUpStartsAtAQuarter) {
  PushCompressor pc({.sparsity_warmup_steps = 10}, 4, 4);
  CodecSpec spec = Spec("topk:0.01");
  EXPECT_DOUBLE_EQ(pc.SparseFraction(spec, 0), 0.25);
  EXPECT_LT(pc.SparseFraction(spec, 5), 0.25);
  EXPECT_GT(pc.SparseFraction(spec, 5), 0.01);
  EXPECT_DOUBLE_EQ(pc.SparseFraction(spec, 10), 0.01);
}

TEST(PushCompressorTest, MomentumCorrectionPushesVelocities) {
  PushCompressor pc({.error_feedback = false, .local_momentum = 0.5}, 3, 2);
  pc.SetCodec(0, 0, Spec("fp32"));
  pc.SetChunks(0, {0, 1});
  std::vector<float> g = {1, 2, 4};
  std::shared_ptr<const void> owner;
  const float* v = pc.Prepare(0, g.data(), &owner);
  ASSERT_NE(owner, nullptr);
  EXPECT_EQ(std::vector<float>(v, v + 3), g);
  v = pc.Prepare(1, g.data(), &owner);
  EXPECT_EQ(std::vector<float>(v, v + 3), (std::vector<float>{1.5f, 3, 6}));
}

}  // namespace
}  // namespace geodesic::compression
