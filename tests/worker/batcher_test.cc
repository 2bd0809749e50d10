#include "worker/batcher.h"

#include <gtest/gtest.h>

#include <set>

namespace geodesic::worker {
namespace {

TEST(BatcherTest, FullBatchesVisitEverySampleOncePerEpoch) {
  std::vector<int64_t> idx;
  for (int i = 0; i < 10; ++i) idx.push_back(100 + i);
  BatchSampler s(idx, 3, 1);
  std::multiset<int64_t> seen;
  for (int b = 0; b < 3; ++b) {
    auto batch = s.Next();
    EXPECT_EQ(batch.size(), 3u);
    seen.insert(batch.begin(), batch.end());
  }
  EXPECT_EQ(seen.size(), 9u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 9u);  // no repeats within an epoch
  EXPECT_EQ(s.epoch(), 0);
  s.Next();  // 1 left over: a new epoch starts
  EXPECT_EQ(s.epoch(), 1);
}

TEST(BatcherTest, SameSeedSameOrder) {
  std::vector<int64_t> idx(50);
  for (int i = 0; i < 50; ++i) idx[i] = i;
  BatchSampler a(idx, 8, SamplerSeed(1, 2)), b(idx, 8, SamplerSeed(1, 2)), c(idx, 8, SamplerSeed(1, 3));
  bool differs = false;
  for (int i = 0; i < 20; ++i) {
    auto x = a.Next();
    EXPECT_EQ(x, b.Next());
    differs |= x != c.Next();
  }
  EXPECT_TRUE(differs);
}

TEST(BatcherTest, TinyPartitionIsOneBatch) {
  BatchSampler s({4, 5}, 64, 0);
  EXPECT_EQ(s.Next().size(), 2u);
}

}  // namespace
}  // namespace geodesic::worker
