// The dashboard counts as watched only while someone reads it (with its
// token, where one is required): the launcher reads the kernel links'
// counters for it only then (deploy/launcher.cc).
#include "deploy/dashboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/files.h"
#include "transport/http_endpoint.h"

namespace geodesic::deploy {
namespace {

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.path = (std::filesystem::temp_directory_path() / ("gd-dashboard-" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(dir_.path + "/http");
    auto job = ParseJob("name: t\nregions:\n  us: {servers: 1, workers: 1}\n", "t.yaml");
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *job;
  }
  void TearDown() override { std::filesystem::remove_all(dir_.path); }
  RunDir dir_;
  JobSpec job_;
};

TEST_F(DashboardTest, IsWatchedOnlyAfterAServedRead) {
  auto d = Dashboard::Start(job_, dir_, {});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE((*d)->Watched(10)) << "nobody has read it yet";
  ASSERT_EQ(transport::HttpGet((*d)->address(), "/api/state")->status, 200);
  EXPECT_TRUE((*d)->Watched(10));
  EXPECT_FALSE((*d)->Watched(-1)) << "a read is not in the future";
}

TEST_F(DashboardTest, ARefusedReadDoesNotCount) {
  auto d = Dashboard::Start(job_, dir_, {.token = "0123456789abcdef-watch"});
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(transport::HttpGet((*d)->address(), "/api/state?token=wrong")->status, 401);
  EXPECT_FALSE((*d)->Watched(10));
  ASSERT_EQ(transport::HttpGet((*d)->address(), "/metrics?token=0123456789abcdef-watch")->status, 200);
  EXPECT_TRUE((*d)->Watched(10));
}

}  // namespace
}  // namespace geodesic::deploy
