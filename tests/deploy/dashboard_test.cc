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

// Options with `token` (and `metrics_token`) on a free loopback port.
DashboardOptions Tokens(const std::string& token, const std::string& metrics_token = "") {
  DashboardOptions o;
  o.token = token;
  o.metrics_token = metrics_token;
  return o;
}

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
  auto d = Dashboard::Start(job_, dir_, Tokens("0123456789abcdef-watch"));
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(transport::HttpGet((*d)->address(), "/api/state?token=wrong")->status, 401);
  EXPECT_FALSE((*d)->Watched(10));
  ASSERT_EQ(transport::HttpGet((*d)->address(), "/metrics?token=0123456789abcdef-watch")->status, 200);
  EXPECT_TRUE((*d)->Watched(10));
}

// The token is the query parameter named exactly `token`: `?xtoken=T` or
// `?tokenx=T` carries none (before, any name ending in "token" was read).
TEST_F(DashboardTest, TheTokenIsTheWholeParameterNamedToken) {
  const std::string t = "0123456789abcdef-query";
  auto d = Dashboard::Start(job_, dir_, Tokens(t));
  ASSERT_TRUE(d.ok()) << d.status();
  const std::string at = (*d)->address();
  for (const std::string& q :
       std::vector<std::string>{"?xtoken=" + t, "?tokenx=" + t, "?a=1&xtoken=" + t, "?token=" + t + "x", "?token" + t,
                                "?Token=" + t, "?x=token=" + t})
    EXPECT_EQ(transport::HttpGet(at, "/api/state" + q)->status, 401) << q;
  for (const std::string& q :
       std::vector<std::string>{"?token=" + t, "?a=1&token=" + t, "?token=" + t + "&b=2", "?xtoken=no&token=" + t,
                                "?token=0123456789abcdef%2Dquery", "?%74oken=" + t})
    EXPECT_EQ(transport::HttpGet(at, "/api/state" + q)->status, 200) << q;
  EXPECT_EQ(transport::HttpGet(at, "/api/state", 5, t)->status, 200) << "or a bearer token";
  EXPECT_EQ(QueryParameter("a=1&token=x%20y+z&token=2", "token"), "x y z") << "the first one";
  EXPECT_EQ(QueryParameter("tokens=1", "token"), "");
  EXPECT_EQ(QueryParameter("", "token"), "");
}

// The URL the launcher prints on stdout (which logs keep) carries no token.
TEST_F(DashboardTest, TheUrlNeverCarriesTheToken) {
  const std::string t = "0123456789abcdef-url";
  auto d = Dashboard::Start(job_, dir_, Tokens(t));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->url(), "http://" + (*d)->address() + "/");
  EXPECT_EQ((*d)->url().find(t), std::string::npos);
  EXPECT_TRUE((*d)->requires_token());
}

// The launcher's /metrics takes the job's metrics token too (one
// Prometheus credential for the whole job), as a bearer token, and only
// there: the page and its state still need the dashboard's token.
TEST_F(DashboardTest, MetricsAlsoTakeTheMetricsToken) {
  const std::string t = "0123456789abcdef-dash", m = "0123456789abcdef-metrics";
  auto d = Dashboard::Start(job_, dir_, Tokens(t, m));
  ASSERT_TRUE(d.ok()) << d.status();
  const std::string at = (*d)->address();
  EXPECT_EQ(transport::HttpGet(at, "/metrics", 5, m)->status, 200);
  EXPECT_EQ(transport::HttpGet(at, "/metrics", 5, t)->status, 200);
  EXPECT_EQ(transport::HttpGet(at, "/metrics?token=" + m)->status, 401) << "not in a URL";
  EXPECT_EQ(transport::HttpGet(at, "/metrics")->status, 401);
  EXPECT_EQ(transport::HttpGet(at, "/api/state", 5, m)->status, 401);
  EXPECT_EQ(transport::HttpGet(at, "/", 5, m)->status, 401);
}

// A region's aggregator shows in the state the page draws: live or not
// (the coordinator's view) and the counts of its stats file.
TEST_F(DashboardTest, AggregatorsShowTheirStateAndCounts) {
  auto d = Dashboard::Start(job_, dir_, Tokens(""));
  ASSERT_TRUE(d.ok()) << d.status();
  std::filesystem::create_directories(dir_.path + "/stats");
  ASSERT_TRUE(WriteFileAtomic(dir_.stats("aggregator-0"),
                              R"({"clocks_forwarded": 12, "late_forwards": 1, "upstream_bytes_sent": 4000000})", false)
                  .ok());
  wire::StatusReply st;
  auto* a = st.add_aggregators();
  a->set_id(0);
  a->set_region("us");
  a->set_live(false);
  (*d)->UpdateStatus(st, 0);
  const nlohmann::json state = nlohmann::json::parse((*d)->StateJson());
  ASSERT_EQ(state["aggregators"].size(), 1u) << state.dump();
  EXPECT_EQ(state["aggregators"][0]["region"], "us");
  EXPECT_EQ(state["aggregators"][0]["live"], false);
  EXPECT_EQ(state["aggregators"][0]["clocks_forwarded"], 12);
  EXPECT_EQ(state["aggregators"][0]["late_forwards"], 1);
}

}  // namespace
}  // namespace geodesic::deploy
