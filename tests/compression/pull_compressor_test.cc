#include "compression/pull_compressor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace geodesic::compression {
namespace {

// A worker's side of the protocol: full values replace, changes are added.
struct WorkerCopy {
  std::vector<float> values;
  int64_t seq = -1;
  Status Apply(const wire::ChunkData& d, const SharedBytes& p) {
    std::vector<uint8_t> scratch;
    auto info = PayloadInfo::FromWire(d);
    values.resize(d.num_elems());
    if (!d.delta()) {
      seq = 0;
      return Decode(info, p.data, p.size, d.num_elems(), values.data(), &scratch);
    }
    if (seq < 0 || static_cast<uint64_t>(seq) != d.base_seq()) return DataLoss("out of sync");
    seq = static_cast<int64_t>(d.base_seq()) + 1;
    return DecodeAdd(info, p.data, p.size, d.num_elems(), values.data(), &scratch);
  }
};

ChunkValues Snap(const std::vector<float>& v) {
  std::shared_ptr<float[]> buf(new float[v.size()]);
  std::memcpy(buf.get(), v.data(), v.size() * sizeof(float));
  return {buf, v.size()};
}

TEST(PullCompressorTest, ChangesKeepTheWorkersCopyAndCatchUp) {
  const uint64_t n = 1000;
  PullCompressor pc(7);
  auto codec = ParseCodecSpec("topk:0.05");
  ASSERT_TRUE(codec.ok()) << codec.status();
  std::mt19937 rng(1);
  std::normal_distribution<float> noise(0, 1);
  std::vector<float> params(n);
  for (auto& x : params) x = noise(rng);
  WorkerCopy worker;
  wire::ChunkData d;
  d.set_num_elems(n);
  auto p = pc.Encode(3, *codec, 0, Snap(params), /*full=*/true, &d);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(d.delta());
  EXPECT_EQ(p->size, n * 4);
  ASSERT_TRUE(worker.Apply(d, *p).ok());
  EXPECT_EQ(worker.values, params);

  // Small updates: each pull sends 5% of the change; what is left goes later.
  size_t total_bytes = 0;
  for (int step = 1; step <= 30; ++step) {
    for (auto& x : params) x -= 0.01f * noise(rng);
    wire::ChunkData dd;
    dd.set_num_elems(n);
    auto q = pc.Encode(3, *codec, 0, Snap(params), false, &dd);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_TRUE(dd.delta());
    EXPECT_LT(q->size, n * 4 / 10);
    total_bytes += q->size;
    ASSERT_TRUE(worker.Apply(dd, *q).ok());
  }
  // Once the parameters stop moving, the remaining change drains.
  for (int step = 31; step <= 80; ++step) {
    wire::ChunkData dd;
    dd.set_num_elems(n);
    auto q = pc.Encode(3, *codec, 0, Snap(params), false, &dd);
    ASSERT_TRUE(q.ok());
    ASSERT_TRUE(worker.Apply(dd, *q).ok());
  }
  double err = 0;
  for (uint64_t i = 0; i < n; ++i) err = std::max(err, static_cast<double>(std::abs(worker.values[i] - params[i])));
  EXPECT_LT(err, 1e-6);
  EXPECT_GT(total_bytes, 0u);
}

// A worker whose own initial values set the chunk pulls no full values: its
// first pull is a change from those, numbered 0; lossless codecs ignore it.
TEST(PullCompressorTest, AnAssumedCopyStartsTheChangesWithoutFullValues) {
  const uint64_t n = 512;
  PullCompressor pc(3);
  auto codec = ParseCodecSpec("int8");
  ASSERT_TRUE(codec.ok()) << codec.status();
  std::vector<float> params(n);
  for (uint64_t i = 0; i < n; ++i) params[i] = 0.01f * static_cast<float>(i % 97);
  pc.Assume(2, *codec, 0, Snap(params));
  WorkerCopy worker{params, 0};
  for (auto& x : params) x += 0.5f;
  wire::ChunkData d;
  d.set_num_elems(n);
  auto p = pc.Encode(2, *codec, 0, Snap(params), false, &d);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(d.delta());
  EXPECT_EQ(d.base_seq(), 0u);
  EXPECT_LT(p->size, n * 4 / 2);
  ASSERT_TRUE(worker.Apply(d, *p).ok());
  for (uint64_t i = 0; i < n; ++i) EXPECT_NEAR(worker.values[i], params[i], 1e-2) << i;
  // Another worker, assumed nothing, still gets full values first.
  wire::ChunkData f;
  f.set_num_elems(n);
  ASSERT_TRUE(pc.Encode(5, *codec, 0, Snap(params), false, &f).ok());
  EXPECT_FALSE(f.delta());
  // Lossless: nothing kept.
  PullCompressor lossless(3);
  lossless.Assume(2, CodecSpec{}, 0, Snap(params));
  EXPECT_EQ(lossless.workers_tracked(), 0u);
}

TEST(PullCompressorTest, DuplicateChangeIsDetectedByTheSequence) {
  const uint64_t n = 64;
  PullCompressor pc(7);
  auto codec = *ParseCodecSpec("int8");
  std::vector<float> params(n, 1.0f);
  WorkerCopy worker;
  wire::ChunkData d;
  d.set_num_elems(n);
  auto p = pc.Encode(0, codec, 0, Snap(params), true, &d);
  ASSERT_TRUE(worker.Apply(d, *p).ok());
  params[5] = 2.0f;
  wire::ChunkData d1, d2;
  d1.set_num_elems(n);
  d2.set_num_elems(n);
  auto p1 = pc.Encode(0, codec, 0, Snap(params), false, &d1);
  auto p2 = pc.Encode(0, codec, 0, Snap(params), false, &d2);  // a resend answered twice
  ASSERT_TRUE(worker.Apply(d1, *p1).ok());                     // the worker takes only the first...
  params[6] = 3.0f;
  wire::ChunkData d3;
  d3.set_num_elems(n);
  auto p3 = pc.Encode(0, codec, 0, Snap(params), false, &d3);
  EXPECT_EQ(worker.Apply(d3, *p3).code(), Code::kDataLoss);  // ...and then sees it is out of sync
  (void)p2;
}

// A worker that left or died holds no copy at the shard any more; the
// evaluator's and aggregators' copies (negative keys) stay; a worker that
// comes back gets full values and starts over.
TEST(PullCompressorTest, DepartedWorkersCopiesAreForgotten) {
  const uint64_t n = 64;
  PullCompressor pc(7);
  auto codec = *ParseCodecSpec("int8");
  std::vector<float> params(n, 1.0f);
  for (int puller : {0, 1, 2, -1}) {
    wire::ChunkData d;
    d.set_num_elems(n);
    ASSERT_TRUE(pc.Encode(puller, codec, 0, Snap(params), false, &d).ok());
  }
  EXPECT_EQ(pc.workers_tracked(), 4u);
  pc.ForgetWorkersBut({1});
  EXPECT_EQ(pc.workers_tracked(), 2u) << "worker 1 and the puller -1";
  params[3] = 2.0f;
  wire::ChunkData back, stayed;
  back.set_num_elems(n);
  stayed.set_num_elems(n);
  ASSERT_TRUE(pc.Encode(0, codec, 0, Snap(params), false, &back).ok());
  EXPECT_FALSE(back.delta()) << "a worker that comes back starts over with full values";
  ASSERT_TRUE(pc.Encode(1, codec, 0, Snap(params), false, &stayed).ok());
  EXPECT_TRUE(stayed.delta());
}

TEST(PullCompressorTest, LosslessCodecsSendValuesAndOthersGetFp32) {
  const uint64_t n = 100;
  PullCompressor pc(7);
  std::vector<float> params(n, 0.5f);
  wire::ChunkData d;
  d.set_num_elems(n);
  auto p = pc.Encode(0, CodecSpec{}, 0, Snap(params), false, &d);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(d.delta());
  EXPECT_EQ(d.codec(), wire::FP32);
  EXPECT_EQ(pc.workers_tracked(), 0u);  // no copies kept for fp32
  // A change no smaller than the values (top-k of everything) goes as values.
  auto all = *ParseCodecSpec("topk:1");
  wire::ChunkData f;
  f.set_num_elems(n);
  ASSERT_TRUE(pc.Encode(1, all, 0, Snap(params), true, &f).ok());
  params[0] = 9;
  wire::ChunkData g;
  g.set_num_elems(n);
  auto q = pc.Encode(1, all, 0, Snap(params), false, &g);
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(g.delta());
  EXPECT_EQ(q->size, n * 4);
}

}  // namespace
}  // namespace geodesic::compression
