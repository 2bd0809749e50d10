#include "worker/snapshot.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace geodesic::worker {
namespace {

TEST(SnapshotTest, RoundTripSortedByStepAndTruncationRefused) {
  std::string dir = std::filesystem::temp_directory_path() / ("gd-snap-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<float> v = {1, 2, 3};
  ASSERT_TRUE(WriteSnapshot(dir, 20, 2.5, v.data(), 3).ok());
  ASSERT_TRUE(WriteSnapshot(dir, 3, 0.5, v.data(), 3).ok());
  auto list = ListSnapshots(dir);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].step, 3);
  EXPECT_EQ(list[1].step, 20);
  EXPECT_DOUBLE_EQ(list[1].seconds, 2.5);
  std::vector<float> back;
  ASSERT_TRUE(ReadSnapshot(list[1].path, 3, &back).ok());
  EXPECT_EQ(back, v);
  EXPECT_EQ(ReadSnapshot(list[1].path, 4, &back).code(), Code::kDataLoss);
  std::filesystem::resize_file(list[0].path, 40);
  EXPECT_EQ(ReadSnapshot(list[0].path, 3, &back).code(), Code::kDataLoss);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace geodesic::worker
