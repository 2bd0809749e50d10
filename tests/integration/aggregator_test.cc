// Regional aggregators (regions.NAME.aggregator; docs/wan.md "Regional
// aggregation") in a launched job over emulated WAN links: a BSP job, and a
// DiLoCo job, with an aggregator in every region ends with the same
// parameters, bit for bit, as the job without them, while the bytes on
// every WAN link fall by the workers per region; every push is accounted for; bad pushes at a running
// aggregator are refused with their reason; and a job file that asks an
// aggregator for what it does not combine is refused before anything
// starts.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "tests/integration/harness.h"
#include "transport/http_endpoint.h"
#include "transport/message.h"
#include "transport/security.h"

namespace geodesic {
namespace {

using testing::TempDir;

// Three regions of two workers and one shard each, the MLP for 0.2 epochs
// (32 clocks of 6 x 64 samples), links fast enough that the test is quick:
// the property is in the bytes and the bits, not the time.
std::string JobYaml(bool aggregators, double epochs = 0.2) {
  const std::string agg = aggregators ? "true" : "false";
  std::string regions;
  for (const char* r : {"us", "eu", "asia"})
    regions += std::string("  ") + r + ": {host: 127.0.0.1, servers: 1, workers: 2, aggregator: " + agg + "}\n";
  return "name: regional\nseed: 3\nregions:\n" + regions +
         "coordinator_region: us\n"
         "model: {name: mlp}\n"
         "data: {batch_size: 64}\n"
         "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
         "training: {epochs: " +
         std::to_string(epochs) +
         ", staleness_bound: 0}\n"
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

LaunchedRun ReadRun(const TempDir& dir, const std::string& name);

LaunchedRun Launch(const TempDir& dir, bool aggregators, double epochs = 0.2, const std::string& kill = "",
                   bool restart = false, const std::vector<std::string>& sets = {}) {
  const std::string name = aggregators ? "aggregated" : "flat";
  testing::WriteText(dir / (name + ".yaml"), JobYaml(aggregators, epochs));
  std::vector<std::string> args = {"launch",   dir / (name + ".yaml"), "--run-dir",
                                   dir / name, "--no-dashboard",       "--no-metrics"};
  if (!kill.empty()) args.insert(args.end(), {"--kill", kill});
  if (restart) args.push_back("--restart-workers");
  for (const std::string& set : sets) args.insert(args.end(), {"--set", set});
  auto r = testing::RunGeodesic(args, 240);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  testing::WriteText(dir / (name + ".out"), r.output);
  return ReadRun(dir, name);
}

LaunchedRun ReadRun(const TempDir& dir, const std::string& name) {
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
  EXPECT_EQ(aggregated.summary["aggregators"].size(), 3u) << aggregated.summary.dump();
  EXPECT_EQ(aggregated.summary["aggregators"]["asia"]["clocks_forwarded"], 32) << aggregated.summary.dump();
  EXPECT_FALSE(flat.summary.contains("aggregators"));
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

// All link directions together carry half the bytes with aggregators (two
// workers per region), within 5%.
void ExpectHalfTheWanBytes(const LaunchedRun& flat, const LaunchedRun& aggregated, const char* what,
                           double within = 0.05) {
  double f = 0, a = 0;
  for (const auto& [link, bytes] : flat.link_bytes) f += bytes;
  for (const auto& [link, bytes] : aggregated.link_bytes) a += bytes;
  std::printf("%s WAN bytes: %.0f flat, %.0f with aggregators (%.3fx)\n", what, f, a, f / a);
  EXPECT_GT(f / a, 2.0 * (1 - within)) << what;
  EXPECT_LT(f / a, 2.0 * (1 + within)) << what;
}

// DiLoCo: AdamW inside, Nesterov outside, rounds of 4 local steps.
const std::vector<std::string> kDiLoCo = {"training.local_steps=4",      "training.outer_lr=0.7",
                                          "training.outer_momentum=0.9", "optimizer.name=adamw",
                                          "optimizer.lr=0.001",          "optimizer.momentum=0"};

// DiLoCo (AdamW inside, Nesterov outside, rounds of 4 local steps that
// overlap the next round's compute): the aggregator sums its region's
// rounds' progress as it sums BSP gradients, so the job ends bit for bit
// where it ends without aggregators, with half the bytes on the WAN.
TEST(AggregatorTest, DiLoCoRoundsEndBitForBitAsWithoutAggregatorsWithHalfTheWanBytes) {
  TempDir dir;
  const LaunchedRun flat = Launch(dir, false, 0.4, "", false, kDiLoCo);
  const LaunchedRun aggregated = Launch(dir, true, 0.4, "", false, kDiLoCo);
  ASSERT_GT(flat.params.size(), 0u);
  EXPECT_TRUE(flat.params == aggregated.params) << "aggregators changed the DiLoCo result";
  ASSERT_EQ(aggregated.link_bytes.size(), 6u) << aggregated.summary["links"].dump();
  // 16 rounds carry less than the BSP test's 32 clocks, so the coordinator's
  // heartbeats weigh more on a single link: all links together halve
  // within 5%, each link by at least 1.8x.
  for (const auto& [link, bytes] : flat.link_bytes)
    EXPECT_GT(bytes / aggregated.link_bytes.at(link), 1.8) << link.first << "->" << link.second;
  ExpectHalfTheWanBytes(flat, aggregated, "DiLoCo");
  testing::ExpectEveryPushAccountedFor(aggregated.summary, {});
  for (int r = 0; r < 3; ++r) {
    auto stats = testing::ReadJson(dir / ("aggregated/stats/aggregator-" + std::to_string(r) + ".json"));
    EXPECT_EQ(stats["clocks_forwarded"], 16) << stats.dump();
    EXPECT_EQ(stats["pushes_taken"], 16 * 2 * 3) << stats.dump();
  }
}

// Federated rounds (FedAvg over 60 clients with label skew, 12 a round on
// 6 executors): an executor's push is its clients' weighted sum, which the
// aggregator adds in worker order like a gradient, so the job ends bit for
// bit as without aggregators, with half the WAN bytes.
TEST(AggregatorTest, FederatedRoundsEndBitForBitAsWithoutAggregatorsWithHalfTheWanBytes) {
  TempDir dir;
  const std::vector<std::string> fed = {"federated.clients=60", "federated.per_round=12", "federated.rounds=10",
                                        "data.partition=dirichlet:0.3", "optimizer.momentum=0"};
  const LaunchedRun flat = Launch(dir, false, 0.2, "", false, fed);
  const LaunchedRun aggregated = Launch(dir, true, 0.2, "", false, fed);
  ASSERT_GT(flat.params.size(), 0u);
  EXPECT_TRUE(flat.params == aggregated.params) << "aggregators changed the federated result";
  ASSERT_TRUE(aggregated.summary.contains("federated")) << aggregated.summary.dump();
  ExpectHalfTheWanBytes(flat, aggregated, "federated");
  testing::ExpectEveryPushAccountedFor(aggregated.summary, {});
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(
        testing::ReadJson(dir / ("aggregated/stats/aggregator-" + std::to_string(r) + ".json"))["clocks_forwarded"],
        10);
}

// Lossy codecs (int8 both ways, with error feedback): the workers push
// exact values to their aggregator over the region's network, and the
// aggregator encodes the region's sum once for the WAN, keeping the error
// feedback itself; it pulls changes to its own copy and answers its
// workers with exact values of that copy. Not bit for bit (one rounding of
// the sum instead of one per worker), but as accurate, with half the WAN
// bytes.
TEST(AggregatorTest, LossyCodecsEncodeTheRegionsExchangeOnceForTheWan) {
  TempDir dir;
  const std::vector<std::string> int8 = {"compression.push=int8", "compression.pull=int8"};
  const LaunchedRun flat = Launch(dir, false, 0.2, "", false, int8);
  const LaunchedRun aggregated = Launch(dir, true, 0.2, "", false, int8);
  const double flat_accuracy = flat.summary["test_accuracy"], accuracy = aggregated.summary["test_accuracy"];
  EXPECT_NEAR(accuracy, flat_accuracy, 0.01);
  // What does not shrink with the workers (the initial values, the
  // coordinator's heartbeats, the evaluator's exact reads) weighs four
  // times more next to int8 payloads: within 10% here (1.88x in 32 clocks,
  // 1.93x in 63).
  ExpectHalfTheWanBytes(flat, aggregated, "int8", 0.1);
  testing::ExpectEveryPushAccountedFor(aggregated.summary, {});
  for (int r = 0; r < 3; ++r) {
    auto stats = testing::ReadJson(dir / ("aggregated/stats/aggregator-" + std::to_string(r) + ".json"));
    // Per clock two fp32 gradients in and one int8 sum (a quarter, plus
    // block scales) out; one int8 change in and two fp32 models out.
    const double in = stats["workers_bytes_received"], out = stats["upstream_bytes_sent"];
    EXPECT_LT(out / in, 0.15) << stats.dump();
    EXPECT_GT(out / in, 0.1) << stats.dump();
    const double pulled = stats["upstream_bytes_received"], served = stats["workers_bytes_sent"];
    EXPECT_LT(pulled / served, 0.15) << stats.dump();
  }
}

// Chaos: SIGKILL to one region's aggregator mid-training. Once the
// coordinator lists it as down, its workers send what it left unanswered
// to the shards and go on there; a push it had forwarded is answered
// DUPLICATE, one it held is taken as the worker's own, and the region's
// sum comes out the same, so the job ends with the flat job's parameters,
// bit for bit, and every acknowledged push on the shards.
TEST(AggregatorTest, AKilledAggregatorsWorkersFallBackToTheShardsAndLoseNothing) {
  TempDir dir;
  const LaunchedRun flat = Launch(dir, false, 0.6);
  const LaunchedRun killed = Launch(dir, true, 0.6, "aggregator:1@1");
  ASSERT_GT(flat.params.size(), 0u);
  EXPECT_EQ(killed.summary["status"], "finished") << killed.summary.dump();
  EXPECT_TRUE(flat.params == killed.params) << "the fallback changed the BSP result";
  testing::ExpectEveryPushAccountedFor(killed.summary, {});
  const std::string out = testing::ReadText(dir / "aggregated.out");
  EXPECT_NE(out.find("aggregator-1 killed"), std::string::npos) << out;
  EXPECT_NE(out.find("its region's workers push to the shards directly"), std::string::npos) << out;
  for (int w : {2, 3}) {
    const std::string log = testing::ReadText(dir / ("aggregated/logs/worker-" + std::to_string(w) + ".log"));
    EXPECT_NE(log.find("is gone: pushing to and pulling from the shards directly"), std::string::npos) << log;
  }
  // The other regions kept theirs to the end.
  EXPECT_EQ(testing::ReadJson(dir / "aggregated/stats/aggregator-0.json")["final"], true);
}

// A worker SIGKILLed mid-training and restarted: its aggregator waits for
// it until its lease runs out, goes on without it, and takes its pushes
// again once it rejoins at the live clock; a push of a clock that went
// without it goes to the shards alone (RegionSums), and every push is
// accounted for.
TEST(AggregatorTest, ARestartedWorkerRejoinsAndItsRegionGoesOn) {
  TempDir dir;
  const LaunchedRun run = Launch(dir, true, 0.6, "worker:2@1", /*restart=*/true);
  EXPECT_EQ(run.summary["status"], "finished") << run.summary.dump();
  EXPECT_GT(run.summary["test_accuracy"].get<double>(), 0.7) << run.summary.dump();
  testing::ExpectEveryPushAccountedFor(run.summary, {2});
  EXPECT_NE(testing::ReadText(dir / "aggregated.out").find("restarted"), std::string::npos)
      << testing::ReadText(dir / "aggregated.out");
  EXPECT_TRUE(testing::ReadJson(dir / "aggregated/stats/aggregator-1.json").contains("late_forwards"));
  if (HasFailure())  // what the region's aggregator and the restarted worker did
    for (const char* log : {"aggregator-1.log", "worker-2.log", "worker-2.restart-1.log"})
      std::cout << "--- " << log << "\n"
                << testing::ReadText(dir / (std::string("aggregated/logs/") + log)) << std::endl;
}

// One bad request to an aggregator: from a socket of its own stamped
// `role` `id`, a push (or an init) of `values` for chunk 0 at `clock`.
struct BadRequest {
  wire::Role role = wire::WORKER;
  int id = 0;
  std::vector<float> values;
  int64_t clock = 0;
  bool init = false;
  wire::Refusal want = wire::REFUSAL_UNSPECIFIED;
};

// Sends `r` and returns the answer (nullopt: none within `wait_s`), over
// CurveZMQ with `curve` when it has keys.
std::optional<wire::Header> Ask(zmq::context_t& ctx, const std::string& endpoint, const BadRequest& r,
                                const transport::CurveSocket& curve = {}, int wait_s = 10) {
  transport::TrafficCounters counters;
  transport::Socket s(ctx, zmq::socket_type::dealer, {.job = "regional", .role = r.role, .id = r.id, .curve = curve},
                      &counters);
  if (!s.Connect(endpoint).ok()) return std::nullopt;
  wire::Header h;
  h.set_request_id(77);
  auto* chunks = r.init ? h.mutable_init_request()->mutable_chunks() : h.mutable_push_request()->mutable_chunks();
  if (!r.init) h.mutable_push_request()->set_clock(r.clock);
  auto* d = chunks->Add();
  d->set_chunk_id(0);
  d->set_codec(wire::FP32);
  d->set_num_elems(r.values.size());
  const transport::Payload payload{r.values.data(), r.values.size() * sizeof(float), nullptr};
  if (!s.Send(h, {payload}).ok()) return std::nullopt;
  for (int i = 0; i < wait_s * 10 && !s.WaitReadable(100);) ++i;
  auto in = s.Receive();
  if (!in || !in->status.ok()) return std::nullopt;
  return in->message.header;
}

// Bad input at a running aggregator (docs/wan.md "Regional aggregation"):
// each is refused with its reason and counted, and the job trains on to
// the end unharmed.
TEST(AggregatorTest, BadPushesAreRefusedWithTheirReasonAndTheJobGoesOn) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", JobYaml(true, 0.6));
  testing::Process launch({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--quiet", "--no-dashboard"},
                          dir / "launch.log");
  ASSERT_TRUE(testing::WaitForFile(dir / "run/aggregator-0.endpoint", 60)) << testing::ReadText(dir / "launch.log");
  zmq::context_t ctx(1);
  const std::string at = testing::ReadText(dir / "run/aggregator-0.endpoint");
  // Chunk 0 holds 16384 values (64 KiB chunks).
  std::vector<float> nan(16384, 0.5f), short_chunk(100, 0.5f);
  nan[7] = std::nanf("");
  const std::vector<float> zeros(16384, 0.f);
  const std::vector<BadRequest> cases = {
      {.values = nan, .want = wire::REFUSAL_NON_FINITE},
      {.values = short_chunk, .want = wire::REFUSAL_WRONG_SHAPE},
      {.values = zeros, .clock = 90, .want = wire::REFUSAL_BAD_CLOCK},  // beyond the live window
      {.id = 3, .values = zeros, .want = wire::REFUSAL_BAD_SENDER},     // eu's worker
      {.role = wire::SERVER, .values = zeros, .want = wire::REFUSAL_BAD_SENDER},
      {.values = zeros, .init = true, .want = wire::REFUSAL_UNSUPPORTED_TYPE}};
  for (const BadRequest& r : cases) {
    auto reply = Ask(ctx, at, r);
    ASSERT_TRUE(reply.has_value()) << "no answer for " << transport::RefusalName(r.want);
    ASSERT_TRUE(reply->has_error_reply()) << reply->DebugString();
    EXPECT_EQ(reply->error_reply().reason(), r.want) << reply->error_reply().message();
  }
  // /metrics counts them (published every 2 s; the aggregator lingers at
  // exit until its last counts were scraped, by the launcher too, so the
  // job runs 94 clocks: a few seconds past the refusals).
  std::string metrics;
  for (int i = 0; i < 100 && metrics.find("outcome=\"refused\"} 6") == std::string::npos; ++i) {
    auto at = testing::ReadText(dir / "run/http/aggregator-0");
    auto r = at.empty() ? Unavailable("no address yet") : transport::HttpGet(at, "/metrics", 1);
    if (r.ok()) metrics = r->body;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(metrics.find("geodesic_aggregator_pushes_total{"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("outcome=\"refused\"} 6"), std::string::npos) << metrics;
  ASSERT_EQ(launch.Wait(240), 0) << testing::ReadText(dir / "launch.log");
  auto stats = testing::ReadJson(dir / "run/stats/aggregator-0.json");
  EXPECT_EQ(stats["pushes_refused"], cases.size()) << stats.dump();
  EXPECT_EQ(stats["clocks_forwarded"], 94) << stats.dump();
  auto summary = testing::ReadJson(dir / "run/summary.json");
  EXPECT_EQ(summary["status"], "finished") << summary.dump();
  testing::ExpectEveryPushAccountedFor(summary, {});
}

// A secured job (security.mode: curve) with aggregators: each joins with an
// aggregator token of its own, and its ROUTER is a CURVE server that
// admits its region's workers' keys only. The job trains through the
// aggregators as in plaintext; a plaintext peer, and a CURVE peer whose key
// is not one of the region's workers', get no answer, and the second is
// counted.
TEST(AggregatorTest, ASecuredJobsAggregatorsJoinWithTheirTokensAndAdmitOnlyTheirRegionsWorkers) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", JobYaml(true, 0.6) + "security: {mode: curve}\n");
  testing::Process launch({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--quiet", "--no-dashboard"},
                          dir / "launch.log");
  ASSERT_TRUE(testing::WaitForFile(dir / "run/aggregator-0.endpoint", 60)) << testing::ReadText(dir / "launch.log");
  const std::string at = testing::ReadText(dir / "run/aggregator-0.endpoint");
  EXPECT_NE(testing::ReadText(dir / "run/tokens/aggregator-0.token").find(".aggregator.0."), std::string::npos);
  std::string key;
  for (int i = 0; i < 100 && key.empty(); ++i) {
    const std::string log = testing::ReadText(dir / "run/logs/aggregator-0.log");
    if (const size_t k = log.find("public key "); k != std::string::npos) key = log.substr(k + 11, 40);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(key.size(), 40u) << testing::ReadText(dir / "run/logs/aggregator-0.log");
  zmq::context_t ctx(1);
  const BadRequest push{.values = std::vector<float>(16384, 0.f)};
  // The counted refusal first, while the job surely runs (94 clocks).
  auto stranger = transport::GenerateCurveKeyPair();
  ASSERT_TRUE(stranger.ok());
  EXPECT_FALSE(Ask(ctx, at, push, {.keys = *stranger, .server_key = key}, 3).has_value())
      << "an unlisted key was answered";
  EXPECT_FALSE(Ask(ctx, at, push, {}, 3).has_value()) << "a plaintext peer was answered";
  ASSERT_EQ(launch.Wait(240), 0) << testing::ReadText(dir / "launch.log");
  auto stats = testing::ReadJson(dir / "run/stats/aggregator-0.json");
  EXPECT_EQ(stats["clocks_forwarded"], 94) << stats.dump();
  EXPECT_EQ(stats["pushes_taken"], 94 * 2 * 3) << "every push came through the aggregator: " << stats.dump();
  EXPECT_GE(stats["connections_refused"].get<int>(), 1) << stats.dump();
  EXPECT_EQ(stats["unauthorized"], 0) << stats.dump();
  auto summary = testing::ReadJson(dir / "run/summary.json");
  EXPECT_EQ(summary["status"], "finished") << summary.dump();
  EXPECT_GT(summary["test_accuracy"].get<double>(), 0.6) << summary.dump();
  testing::ExpectEveryPushAccountedFor(summary, {});
}

// Streaming DiLoCo (training.fragments 2): a clock pushes and pulls one
// fragment of the model, and so does the aggregator towards the shards (the
// workers skip the other chunks at the shards themselves), so the job ends
// bit for bit as without aggregators with half the WAN bytes; a push of a
// chunk outside its clock's fragment is refused.
TEST(AggregatorTest, StreamingDiLoCoSendsOneFragmentAClockThroughTheAggregator) {
  TempDir dir;
  std::vector<std::string> sets = kDiLoCo;
  sets.insert(sets.end(), {"training.fragments=2", "training.overlap_rounds=false"});
  const LaunchedRun flat = Launch(dir, false, 0.4, "", false, sets);
  testing::WriteText(dir / "aggregated.yaml", JobYaml(true, 0.4));
  std::vector<std::string> args = {"launch",           dir / "aggregated.yaml", "--run-dir",
                                   dir / "aggregated", "--no-dashboard",        "--no-metrics"};
  for (const std::string& set : sets) args.insert(args.end(), {"--set", set});
  testing::Process launch(args, dir / "aggregated.out");
  ASSERT_TRUE(testing::WaitForFile(dir / "aggregated/aggregator-0.endpoint", 60))
      << testing::ReadText(dir / "aggregated.out");
  zmq::context_t ctx(1);
  // Clock 1 pushes the second fragment; chunk 0 is in the first.
  auto reply = Ask(ctx, testing::ReadText(dir / "aggregated/aggregator-0.endpoint"),
                   {.values = std::vector<float>(16384, 0.f), .clock = 1});
  ASSERT_TRUE(reply.has_value() && reply->has_error_reply()) << (reply ? reply->DebugString() : "no answer");
  EXPECT_EQ(reply->error_reply().reason(), wire::REFUSAL_CHUNK_OUT_OF_RANGE) << reply->error_reply().message();
  EXPECT_NE(reply->error_reply().message().find("fragment"), std::string::npos) << reply->error_reply().message();
  ASSERT_EQ(launch.Wait(240), 0) << testing::ReadText(dir / "aggregated.out");
  const LaunchedRun aggregated = ReadRun(dir, "aggregated");
  ASSERT_GT(flat.params.size(), 0u);
  EXPECT_TRUE(flat.params == aggregated.params) << "aggregators changed the streaming DiLoCo result";
  ExpectHalfTheWanBytes(flat, aggregated, "streaming DiLoCo");
  testing::ExpectEveryPushAccountedFor(aggregated.summary, {});
  auto stats = testing::ReadJson(dir / "aggregated/stats/aggregator-0.json");
  EXPECT_EQ(stats["clocks_forwarded"], 16) << stats.dump();
  EXPECT_EQ(stats["pushes_refused"], 1) << stats.dump();
  // One pull a clock from the shards, of the fragment the workers asked for.
  EXPECT_EQ(stats["upstream_pulls"], 15) << stats.dump();
}

TEST(AggregatorTest, WhatAnAggregatorDoesNotCombineIsRefusedBeforeAnythingStarts) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", JobYaml(true));
  for (const auto& [set, why] :
       std::vector<std::pair<std::string, std::string>>{{"training.staleness_bound=2", "staleness_bound: 0"},
                                                        {"compression.momentum_correction=true", "momentum_correction"},
                                                        {"wan.replan=true", "wan.replan"}}) {
    auto r = testing::RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--quiet", "--no-dashboard",
                                   "--no-metrics", "--set", set},
                                  60);
    EXPECT_NE(r.exit_code, 0) << set;
    EXPECT_NE(r.output.find("regions.*.aggregator"), std::string::npos) << set << ": " << r.output;
    EXPECT_NE(r.output.find(why), std::string::npos) << set << ": " << r.output;
  }
}

// `aggregator: auto`: the launcher asks the planner per region before
// anything starts, prints why, and the run's job.yaml holds the decision,
// which is what runs: on 20 Mbit/s links one in us and eu (two workers
// each), none in asia (one worker).
TEST(AggregatorTest, AutoIsDecidedByThePlannerBeforeTheJobStarts) {
  TempDir dir;
  std::string yaml = JobYaml(true);
  for (size_t at; (at = yaml.find("aggregator: true")) != std::string::npos;) yaml.replace(at, 16, "aggregator: auto");
  testing::WriteText(dir / "job.yaml", yaml);
  auto r = testing::RunGeodesic(
      {"launch", dir / "job.yaml", "--run-dir", dir / "run", "--quiet", "--no-dashboard", "--no-metrics", "--set",
       "training.steps=8", "--set", "regions.asia.workers=1", "--set",
       "wan.links=[{regions: [us, eu], rtt_ms: 40, bandwidth_mbit: 20}, {regions: [us, asia], rtt_ms: 40, "
       "bandwidth_mbit: 20}, {regions: [eu, asia], rtt_ms: 40, bandwidth_mbit: 20}]"},
      240);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("aggregator: auto, per region:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("us: one:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("eu: one:"), std::string::npos) << r.output;
  const std::string job = testing::ReadText(dir / "run/job.yaml");
  EXPECT_EQ(job.find("aggregator: auto"), std::string::npos) << job;
  EXPECT_NE(job.find("aggregator: true"), std::string::npos) << job;
  auto summary = testing::ReadJson(dir / "run/summary.json");
  EXPECT_EQ(summary["status"], "finished") << summary.dump();
  ASSERT_TRUE(summary.contains("aggregators")) << summary.dump();
  EXPECT_TRUE(summary["aggregators"].contains("us") && summary["aggregators"].contains("eu")) << summary.dump();
  EXPECT_FALSE(summary["aggregators"].contains("asia")) << summary.dump();
  EXPECT_NE(r.output.find("asia: none: one worker"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace geodesic
