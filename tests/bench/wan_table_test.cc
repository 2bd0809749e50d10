// The ratios and medians of `geodesic bench wan`'s tables.
#include "bench/wan_table.h"

#include <gtest/gtest.h>

namespace geodesic::bench {
namespace {

using json = nlohmann::json;

json Row(const std::string& config, const std::string& emulation, json seconds, const std::string& own_lan = "") {
  return {{"config", config},
          {"emulation", emulation},
          {"seconds_to_target", seconds},
          {"own_lan", own_lan},
          {"wall_seconds", 100.0}};
}

TEST(WanTableTest, RatiosAreToLanBspToTheFastestLanAndToTheOwnTwin) {
  json rows = {Row("lan", "none", 30.0),          Row("lan-diloco", "none", 20.0),
               Row("lan-local", "none", nullptr), Row("wan-diloco", "netns", 24.0, "lan-diloco"),
               Row("ddp", "netns", nullptr),      Row("wan-ssp", "proxy", 15.0)};
  rows[4]["wall_seconds"] = 300.0;
  AddRatios(rows);
  const json& wan = rows[3];
  EXPECT_DOUBLE_EQ(wan["vs_lan"].get<double>(), 0.8);
  // The fastest configuration on the LAN is DiLoCo, not BSP; one that missed
  // the target is no candidate, nor is any run over emulated links.
  EXPECT_DOUBLE_EQ(wan["vs_best_lan"].get<double>(), 1.2);
  EXPECT_DOUBLE_EQ(wan["vs_own_lan"].get<double>(), 1.2);
  EXPECT_DOUBLE_EQ(rows[1]["vs_best_lan"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(rows[0]["vs_best_lan"].get<double>(), 1.5);
  EXPECT_TRUE(rows[2]["vs_best_lan"].is_null());
  EXPECT_DOUBLE_EQ(rows[5]["vs_best_lan"].get<double>(), 0.75);  // faster than the LAN, and no LAN run
  // DDP never got there in 300 s: at least 12.5 times slower.
  EXPECT_DOUBLE_EQ(wan["ddp_over_this_at_least"].get<double>(), 12.5);
  EXPECT_TRUE(wan["ddp_over_this"].is_null());
}

TEST(WanTableTest, EachRunIsComparedWithinItsOwnPass) {
  json runs = json::array();
  for (auto [repeat, lan, wan] : {std::tuple{1, 10.0, 12.0}, std::tuple{2, 20.0, 22.0}}) {
    runs.push_back(Row("lan", "none", lan));
    runs.push_back(Row("wan-bsp", "netns", wan, "lan"));
    runs[runs.size() - 2]["repeat"] = repeat;
    runs.back()["repeat"] = repeat;
  }
  AddRatiosPerPass(runs, 2);
  EXPECT_DOUBLE_EQ(runs[1]["vs_best_lan"].get<double>(), 1.2);
  EXPECT_DOUBLE_EQ(runs[3]["vs_best_lan"].get<double>(), 1.1);
  EXPECT_DOUBLE_EQ(runs[3]["vs_own_lan"].get<double>(), 1.1);
}

TEST(WanTableTest, MediansCountAMissedTargetAsTheSlowest) {
  json runs = json::array();
  auto add = [&](const std::string& config, json seconds, double accuracy) {
    json r = Row(config, "none", seconds);
    r["test_accuracy"] = accuracy;
    runs.push_back(r);
  };
  add("a", 10.0, 0.90);
  add("b", nullptr, 0.85);
  add("a", nullptr, 0.86);
  add("b", nullptr, 0.84);
  add("a", 14.0, 0.88);
  add("b", 5.0, 0.89);
  add("c", 10.0, 0.88);
  add("c", 20.0, 0.90);
  const json rows = Medians(runs, {"c", "a", "b", "missing"});
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["config"], "c");
  EXPECT_DOUBLE_EQ(rows[0]["seconds_to_target"].get<double>(), 15.0);  // an even count: the middle two's mean
  EXPECT_DOUBLE_EQ(rows[0]["test_accuracy"].get<double>(), 0.89);
  EXPECT_EQ(rows[1]["runs"], 3);
  EXPECT_DOUBLE_EQ(rows[1]["seconds_to_target"].get<double>(), 14.0);  // 10, 14, missed
  EXPECT_EQ(rows[1]["seconds_to_target_each"], json({10.0, nullptr, 14.0}));
  EXPECT_DOUBLE_EQ(rows[1]["test_accuracy"].get<double>(), 0.88);
  EXPECT_TRUE(rows[2]["seconds_to_target"].is_null());  // 5, missed, missed
  EXPECT_FALSE(rows[1].contains("repeat"));
}

}  // namespace
}  // namespace geodesic::bench
