#include "worker/snapshot.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <set>

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

// A snapshot of values that were there some time ago (a local-SGD worker's
// pulled model) is dated then: the evaluator times the curve by the file's
// modification time.
TEST(SnapshotTest, AnAgedSnapshotIsDatedWhenItsValuesWereThere) {
  std::string dir = std::filesystem::temp_directory_path() / ("gd-snap-age-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<float> v = {1, 2, 3};
  ASSERT_TRUE(WriteSnapshot(dir, 5, 1.0, v.data(), 3, /*age_s=*/30).ok());
  ASSERT_TRUE(WriteSnapshot(dir, 6, 2.0, v.data(), 3).ok());
  auto list = ListSnapshots(dir);
  ASSERT_EQ(list.size(), 2u);
  const auto now = std::filesystem::file_time_type::clock::now();
  const double aged = std::chrono::duration<double>(now - std::filesystem::last_write_time(list[0].path)).count();
  const double fresh = std::chrono::duration<double>(now - std::filesystem::last_write_time(list[1].path)).count();
  EXPECT_NEAR(aged, 30, 5);
  EXPECT_NEAR(fresh, 0, 5);
  EXPECT_DOUBLE_EQ(list[0].seconds, 1.0);
  std::filesystem::remove_all(dir);
}

// A curve of `n` snapshots whose accuracy is `acc`; records which were scored.
struct FakeCurve {
  std::vector<double> acc;
  std::set<size_t> unreadable;
  std::vector<size_t> calls;
  SnapshotScore Score() {
    return [this](size_t i) -> std::optional<double> {
      calls.push_back(i);
      if (unreadable.count(i)) return std::nullopt;
      return acc.at(i);
    };
  }
};

std::vector<size_t> Indices(const std::vector<std::pair<size_t, double>>& scored) {
  std::vector<size_t> out;
  for (const auto& p : scored) out.push_back(p.first);
  return out;
}

// The first snapshot at or above `target`, as scoring every one would find it.
std::optional<size_t> FirstReaching(const std::vector<std::pair<size_t, double>>& scored, double target) {
  for (const auto& [i, a] : scored)
    if (a >= target) return i;
  return std::nullopt;
}

TEST(ScoreCurveTest, FewSnapshotsOrNoLimitScoreEveryOne) {
  for (int64_t points : {0, 12}) {
    FakeCurve c;
    c.acc = {0.5, 0.7, 0.9, 0.85, 0.92};
    auto scored = ScoreCurve(c.acc.size(), points, 0.88, c.Score());
    EXPECT_EQ(Indices(scored), (std::vector<size_t>{0, 1, 2, 3, 4})) << points;
    EXPECT_EQ(c.calls, (std::vector<size_t>{0, 1, 2, 3, 4})) << points;
    EXPECT_DOUBLE_EQ(scored[3].second, 0.85);
  }
}

TEST(ScoreCurveTest, ManySnapshotsScoreFewButFindTheFirstToReachTheTarget) {
  // Rising curves crossing 0.88 at every index: the time to the target must
  // be the exact first snapshot, the last must always be scored, and no
  // snapshot is scored twice.
  const size_t n = 40;
  for (size_t cross = 0; cross < n; ++cross) {
    FakeCurve c;
    for (size_t i = 0; i < n; ++i) c.acc.push_back(i < cross ? 0.5 + 0.005 * i : 0.88 + 0.001 * i);
    auto scored = ScoreCurve(n, 12, 0.88, c.Score());
    EXPECT_EQ(FirstReaching(scored, 0.88), cross) << cross;
    EXPECT_EQ(scored.back().first, n - 1);
    EXPECT_LE(c.calls.size(), 12u + 3u) << cross;
    EXPECT_EQ(std::set<size_t>(c.calls.begin(), c.calls.end()).size(), c.calls.size()) << cross;
    for (const auto& [i, a] : scored) EXPECT_DOUBLE_EQ(a, c.acc[i]);
    for (size_t k = 1; k < scored.size(); ++k) EXPECT_LT(scored[k - 1].first, scored[k].first);
  }
}

TEST(ScoreCurveTest, LongCurvesAreSearchedInLevels) {
  // 1,000 snapshots, 4 points: each level narrows the stretch fourfold.
  const size_t n = 1000;
  for (size_t cross : {0u, 1u, 249u, 250u, 251u, 517u, 998u, 999u}) {
    FakeCurve c;
    for (size_t i = 0; i < n; ++i) c.acc.push_back(i < cross ? 0.5 : 0.9);
    auto scored = ScoreCurve(n, 4, 0.88, c.Score());
    EXPECT_EQ(FirstReaching(scored, 0.88), cross) << cross;
    EXPECT_LE(c.calls.size(), 4u * 6u) << cross;  // 4 per level, log4(1000) < 5 levels
    EXPECT_EQ(std::set<size_t>(c.calls.begin(), c.calls.end()).size(), c.calls.size()) << cross;
    EXPECT_EQ(scored.back().first, n - 1);
  }
}

TEST(ScoreCurveTest, NeverReachingScoresOnlyTheEvenPicksSpreadToTheEnd) {
  FakeCurve c;
  c.acc.assign(100, 0.5);
  auto scored = ScoreCurve(100, 10, 0.88, c.Score());
  EXPECT_EQ(Indices(scored), (std::vector<size_t>{9, 19, 29, 39, 49, 59, 69, 79, 89, 99}));
}

TEST(ScoreCurveTest, AnUnreadableSnapshotIsSkippedAndTheNextReachingOneCounts) {
  // Crossing at 13, which cannot be read: 14 is the first readable one.
  FakeCurve c;
  for (size_t i = 0; i < 30; ++i) c.acc.push_back(i < 13 ? 0.6 : 0.9);
  c.unreadable = {13, 29};
  auto scored = ScoreCurve(30, 6, 0.88, c.Score());
  EXPECT_EQ(FirstReaching(scored, 0.88), 14u);
  for (const auto& p : scored) EXPECT_FALSE(c.unreadable.count(p.first));
  // A pick below the target that cannot be read still moves the scan's start.
  FakeCurve d;
  for (size_t i = 0; i < 30; ++i) d.acc.push_back(i < 22 ? 0.6 : 0.9);
  d.unreadable = {19};
  EXPECT_EQ(FirstReaching(ScoreCurve(30, 6, 0.88, d.Score()), 0.88), 22u);
}

}  // namespace
}  // namespace geodesic::worker
