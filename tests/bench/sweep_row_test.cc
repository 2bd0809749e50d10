// A sweep row and its tables for a language-model run: validation loss,
// perplexity and bytes per token each way come from the run's summary, and
// the Markdown table shows them in place of accuracy and bytes per sample.
#include "bench/sweep_row.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace geodesic::bench {
namespace {

using json = nlohmann::json;

TEST(SweepRowTest, TokenRunsCarryLossPerplexityAndBytesPerToken) {
  SweepSpec spec;
  spec.name = "lm";
  SweepAxis config;
  config.key = "config";
  config.values = {"wan-diloco"};
  spec.axes.push_back(config);
  SweepPoint point;
  point.values = {{"config", "wan-diloco"}};
  const json summary = {{"test_loss", 2.25},
                        {"test_perplexity", 9.4877},
                        {"test_accuracy", nullptr},
                        {"target_loss", 2.3},
                        {"seconds_to_target", 120.5},
                        {"loss_curve", {{0.0, 0, 5.5}, {60.0, 50, 2.9}, {120.5, 100, 2.25}}},
                        {"bytes_exchanged", {{"push", 600}, {"pull", 400}, {"total", 1000}}},
                        {"bytes_per_token", {{"push", 6.0}, {"pull", 4.0}, {"total", 10.0}}},
                        {"tokens_per_second", 9000.0}};
  const json row = SweepRow(spec, point, "/tmp/run", "finished", "", summary, "");
  EXPECT_EQ(row["test_loss"], 2.25);
  EXPECT_EQ(row["test_perplexity"], 9.4877);
  EXPECT_EQ(row["bytes_per_token_push"], 6.0);
  EXPECT_EQ(row["bytes_per_token_pull"], 4.0);
  EXPECT_EQ(row["bytes_per_token_total"], 10.0);
  EXPECT_EQ(row["tokens_per_second"], 9000.0);
  EXPECT_TRUE(row["last_accuracy"].is_null());
  ASSERT_EQ(row["curve"].size(), 3u);  // the loss curve, with no accuracy curve
  EXPECT_EQ(row["curve"][2][2], 2.25);

  const std::string out = (std::filesystem::temp_directory_path() / ("gd-sweep-row-" + std::to_string(::getpid())));
  std::filesystem::create_directories(out);
  ASSERT_TRUE(WriteSweepTables(spec, {row}, out).ok());
  std::stringstream md;
  md << std::ifstream(out + "/results.md").rdbuf();
  EXPECT_NE(md.str().find("validation loss (perplexity)"), std::string::npos) << md.str();
  EXPECT_NE(md.str().find("2.2500 (9.49)"), std::string::npos) << md.str();
  EXPECT_NE(md.str().find("6.00 / 4.00"), std::string::npos) << md.str();
  std::stringstream csv;
  csv << std::ifstream(out + "/results.csv").rdbuf();
  EXPECT_NE(csv.str().find("bytes_per_token_total"), std::string::npos) << csv.str();
  std::filesystem::remove_all(out);
}

// A run over emulated links with aggregators: the WAN bytes per sample are
// the links' bytes over the samples, and the regions with an aggregator
// are named.
TEST(SweepRowTest, WanBytesPerSampleAndAggregators) {
  SweepSpec spec;
  spec.name = "regional";
  SweepPoint point;
  const json summary = {
      {"samples", 1000},
      {"bytes_per_sample", 9000.0},
      {"links",
       {{{"from", "us"}, {"to", "eu"}, {"bytes", 1500000}}, {{"from", "eu"}, {"to", "us"}, {"bytes", 500000}}}},
      {"aggregators", {{"us", {{"clocks_forwarded", 40}}}, {"eu", {{"clocks_forwarded", 40}}}}}};
  const json row = SweepRow(spec, point, "/tmp/run", "finished", "", summary, "");
  EXPECT_EQ(row["wan_bytes_per_sample"], 2000.0);
  EXPECT_EQ(row["aggregators"], "eu us");
  const json flat = SweepRow(spec, point, "/tmp/run", "finished", "", {{"samples", 1000}}, "");
  EXPECT_TRUE(flat["wan_bytes_per_sample"].is_null()) << "no emulated links, no WAN bytes";
  EXPECT_EQ(flat["aggregators"], "");
}

}  // namespace
}  // namespace geodesic::bench
