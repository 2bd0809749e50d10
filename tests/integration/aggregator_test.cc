// Regional aggregators (regions.NAME.aggregator; docs/wan.md "Regional
// aggregation") in a launched job over emulated WAN links: a BSP job with
// an aggregator in every region ends with the same parameters, bit for bit,
// as the job without them, while the bytes on every WAN link fall by the
// workers per region; every push is accounted for; bad pushes at a running
// aggregator are refused with their reason; and a job file that asks an
// aggregator for what it does not combine is refused before anything
// starts.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "tests/integration/harness.h"
#include "transport/message.h"

namespace geodesic {
namespace {

using testing::TempDir;

// Three regions of two workers and one shard each, the MLP for 0.2 epochs
// (32 clocks of 6 x 64 samples), links fast enough that the test is quick:
// the property is in the bytes and the bits, not the time.
std::string JobYaml(bool aggregators) {
  const std::string agg = aggregators ? "true" : "false";
  std::string regions;
  for (const char* r : {"us", "eu", "asia"})
    regions += std::string("  ") + r + ": {host: 127.0.0.1, servers: 1, workers: 2, aggregator: " + agg + "}\n";
  return "name: regional\nseed: 3\nregions:\n" + regions +
         "coordinator_region: us\n"
         "model: {name: mlp}\n"
         "data: {batch_size: 64}\n"
         "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
         "training: {epochs: 0.2, staleness_bound: 0}\n"
         "wan:\n"
         "  emulation: proxy\n"
         "  links:\n"
         "    - {regions: [us, eu], rtt_ms: 2, bandwidth_mbit: 2000}\n"
         "    - {regions: [us, asia], rtt_ms: 2, bandwidth_mbit: 2000}\n"
         "    - {regions: [eu, asia], rtt_ms: 2, bandwidth_mbit: 2000}\n"
         "eval: {snapshot_every_s: 60}\n";
}

struct LaunchedRun {
  nlohmann::json summary;
  std::string params;
  std::map<std::pair<std::string, std::string>, double> link_bytes;  // by (from, to)
};

LaunchedRun Launch(const TempDir& dir, bool aggregators) {
  const std::string name = aggregators ? "aggregated" : "flat";
  testing::WriteText(dir / (name + ".yaml"), JobYaml(aggregators));
  auto r = testing::RunGeodesic(
      {"launch", dir / (name + ".yaml"), "--run-dir", dir / name, "--quiet", "--no-dashboard", "--no-metrics"}, 240);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  LaunchedRun run;
  run.summary = testing::ReadJson(dir / (name + "/summary.json"));
  run.params = testing::ReadText(dir / (name + "/final_params.bin"));
  for (const auto& l : run.summary["links"])
    if (l.contains("bytes")) run.link_bytes[{l["from"], l["to"]}] = l["bytes"].get<double>();
  return run;
}

TEST(AggregatorTest, BspEndsBitForBitAsWithoutAggregatorsWithHalfTheWanBytes) {
  TempDir dir;
  const LaunchedRun flat = Launch(dir, false), aggregated = Launch(dir, true);
  ASSERT_GT(flat.params.size(), 0u);
  EXPECT_TRUE(flat.params == aggregated.params) << "aggregators changed the BSP result";
  ASSERT_EQ(flat.link_bytes.size(), 6u) << flat.summary["links"].dump();
  ASSERT_EQ(aggregated.link_bytes.size(), 6u) << aggregated.summary["links"].dump();
  // Two workers per region: every link direction carries half the bytes,
  // within 5% (the workers' initial values and the evaluator's reads go
  // straight to the shards either way).
  for (const auto& [link, bytes] : flat.link_bytes) {
    const double ratio = bytes / aggregated.link_bytes.at(link);
    EXPECT_GT(ratio, 2.0 * 0.95) << link.first << "->" << link.second << ": " << bytes << " vs "
                                 << aggregated.link_bytes.at(link);
    EXPECT_LT(ratio, 2.0 * 1.05) << link.first << "->" << link.second;
    std::printf("%s->%s: %.0f bytes flat, %.0f with aggregators (%.3fx)\n", link.first.c_str(), link.second.c_str(),
                bytes, aggregated.link_bytes.at(link), ratio);
  }
  testing::ExpectEveryPushAccountedFor(aggregated.summary, {});
  // Each aggregator took its two workers' pushes to three shards a clock,
  // forwarded one combined push a clock, and answered six pulls with one.
  for (int r = 0; r < 3; ++r) {
    auto stats = testing::ReadJson(dir / ("aggregated/stats/aggregator-" + std::to_string(r) + ".json"));
    EXPECT_EQ(stats["pushes_taken"], 32 * 2 * 3) << stats.dump();
    EXPECT_EQ(stats["clocks_forwarded"], 32) << stats.dump();
    EXPECT_EQ(stats["pushes_refused"], 0) << stats.dump();
    EXPECT_EQ(stats["pulls_served"].get<int>(), 2 * 3 * stats["upstream_pulls"].get<int>()) << stats.dump();
  }
}

// A push (or an init) of `values` for chunk 0 at clock 0 from a socket of
// its own stamped `role` `id`, and the answer.
std::optional<wire::Header> Ask(zmq::context_t& ctx, const std::string& endpoint, wire::Role role, int id,
                                const std::vector<float>& values, bool init = false) {
  transport::TrafficCounters counters;
  transport::Socket s(ctx, zmq::socket_type::dealer, {.job = "regional", .role = role, .id = id}, &counters);
  if (!s.Connect(endpoint).ok()) return std::nullopt;
  wire::Header h;
  h.set_request_id(77);
  auto* chunks = init ? h.mutable_init_request()->mutable_chunks() : h.mutable_push_request()->mutable_chunks();
  if (!init) h.mutable_push_request()->set_clock(0);
  auto* d = chunks->Add();
  d->set_chunk_id(0);
  d->set_codec(wire::FP32);
  d->set_num_elems(values.size());
  if (!s.Send(h, {transport::Payload{values.data(), values.size() * sizeof(float), nullptr}}).ok()) return std::nullopt;
  for (int i = 0; i < 100 && !s.WaitReadable(100);) ++i;
  auto in = s.Receive();
  if (!in || !in->status.ok()) return std::nullopt;
  return in->message.header;
}

// Bad input at a running aggregator (docs/wan.md "Regional aggregation"):
// each is refused with its reason and counted, and the job trains on to
// the end unharmed.
TEST(AggregatorTest, BadPushesAreRefusedWithTheirReasonAndTheJobGoesOn) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", JobYaml(true));
  testing::Process launch(
      {"launch", dir / "job.yaml", "--run-dir", dir / "run", "--quiet", "--no-dashboard", "--no-metrics"},
      dir / "launch.log");
  ASSERT_TRUE(testing::WaitForFile(dir / "run/aggregator-0.endpoint", 60)) << testing::ReadText(dir / "launch.log");
  zmq::context_t ctx(1);
  const std::string at = testing::ReadText(dir / "run/aggregator-0.endpoint");
  // Chunk 0 holds 16384 values (64 KiB chunks).
  std::vector<float> nan(16384, 0.5f), short_chunk(100, 0.5f);
  nan[7] = std::nanf("");
  const std::vector<std::tuple<wire::Role, int, std::vector<float>, bool, wire::Refusal>> cases = {
      {wire::WORKER, 0, nan, false, wire::REFUSAL_NON_FINITE},
      {wire::WORKER, 0, short_chunk, false, wire::REFUSAL_WRONG_SHAPE},
      {wire::WORKER, 3, std::vector<float>(16384, 0.f), false, wire::REFUSAL_BAD_SENDER},  // eu's worker
      {wire::SERVER, 0, std::vector<float>(16384, 0.f), false, wire::REFUSAL_BAD_SENDER},
      {wire::WORKER, 0, std::vector<float>(16384, 0.f), true, wire::REFUSAL_UNSUPPORTED_TYPE}};
  for (const auto& [role, id, values, init, want] : cases) {
    auto reply = Ask(ctx, at, role, id, values, init);
    ASSERT_TRUE(reply.has_value()) << "no answer for " << transport::RefusalName(want);
    ASSERT_TRUE(reply->has_error_reply()) << reply->DebugString();
    EXPECT_EQ(reply->error_reply().reason(), want) << reply->error_reply().message();
  }
  ASSERT_EQ(launch.Wait(240), 0) << testing::ReadText(dir / "launch.log");
  auto stats = testing::ReadJson(dir / "run/stats/aggregator-0.json");
  EXPECT_EQ(stats["pushes_refused"], cases.size()) << stats.dump();
  EXPECT_EQ(stats["clocks_forwarded"], 32) << stats.dump();
  auto summary = testing::ReadJson(dir / "run/summary.json");
  EXPECT_EQ(summary["status"], "finished") << summary.dump();
  testing::ExpectEveryPushAccountedFor(summary, {});
}

TEST(AggregatorTest, WhatAnAggregatorDoesNotCombineIsRefusedBeforeAnythingStarts) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", JobYaml(true));
  for (const auto& [set, why] :
       std::vector<std::pair<std::string, std::string>>{{"training.staleness_bound=2", "staleness_bound: 0"},
                                                        {"compression.push=fp16", "fp32"},
                                                        {"training.local_steps=4", "local_steps: 1"}}) {
    auto r = testing::RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--quiet", "--no-dashboard",
                                   "--no-metrics", "--set", set},
                                  60);
    EXPECT_NE(r.exit_code, 0) << set;
    EXPECT_NE(r.output.find("regions.*.aggregator"), std::string::npos) << set << ": " << r.output;
    EXPECT_NE(r.output.find(why), std::string::npos) << set << ": " << r.output;
  }
}

}  // namespace
}  // namespace geodesic
