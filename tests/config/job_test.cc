#include "config/job.h"
#include "tests/test_paths.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace geodesic {
namespace {

const char* kMinimal = R"(
name: t
regions:
  us: {servers: 1, workers: 2}
  eu: {servers: 2, workers: 1, host: 127.0.0.2}
)";

TEST(JobTest, ParsesRegionsInFileOrderAndCountsRoles) {
  auto job = ParseJob(kMinimal, "test.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->regions.size(), 2u);
  EXPECT_EQ(job->regions[0].name, "us");
  EXPECT_EQ(job->regions[1].host, "127.0.0.2");
  EXPECT_EQ(job->NumServers(), 3);
  EXPECT_EQ(job->NumWorkers(), 3);
  EXPECT_EQ(job->RegionOfServer(0).name, "us");
  EXPECT_EQ(job->RegionOfServer(1).name, "eu");
  EXPECT_EQ(job->RegionOfWorker(1).name, "us");
  EXPECT_EQ(job->RegionOfWorker(2).name, "eu");
  EXPECT_EQ(job->coordinator_region, "us");
  // Defaults of the reference setup (docs/architecture.md, the reference CNN).
  EXPECT_EQ(job->model.name, ModelKind::kCnn);
  EXPECT_DOUBLE_EQ(job->optimizer.lr, 0.05);
  EXPECT_EQ(job->data.batch_size, 64);
}

TEST(JobTest, UnknownKeyIsAnErrorWithASuggestion) {
  auto job = ParseJob(std::string(kMinimal) + "training: {stalenes_bound: 3}\n", "test.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), Code::kInvalidArgument);
  EXPECT_NE(job.status().message().find("training.stalenes_bound: unknown key"), std::string::npos) << job.status();
  EXPECT_NE(job.status().message().find("did you mean 'staleness_bound'"), std::string::npos) << job.status();
}

TEST(JobTest, WrongTypesAndRangesNameTheKey) {
  auto job = ParseJob(
      std::string(kMinimal) + "optimizer: {lr: fast, momentum: 1.5}\nmodel: {name: resnet}\ndata: {batch_size: 0}\n",
      "bad.yaml");
  ASSERT_FALSE(job.ok());
  const std::string& m = job.status().message();
  EXPECT_NE(m.find("bad.yaml"), std::string::npos);
  EXPECT_NE(m.find("optimizer.lr: expected a number"), std::string::npos) << m;
  EXPECT_NE(m.find("optimizer.momentum: must be in [0, 1)"), std::string::npos) << m;
  EXPECT_NE(m.find("model.name: 'resnet' is not a model"), std::string::npos) << m;
  EXPECT_NE(m.find("data.batch_size"), std::string::npos) << m;
}

TEST(JobTest, NotYamlOrNoRegionsIsAnError) {
  EXPECT_FALSE(ParseJob("regions: [unclosed", "x").ok());
  auto job = ParseJob("name: t\n", "x");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("regions: required"), std::string::npos);
  EXPECT_FALSE(ParseJob("regions: {us: {servers: 0, workers: 1}}", "x").ok());  // no server
  EXPECT_FALSE(ParseJob("- a list\n", "x").ok());
}

// A region's host goes into endpoints, command lines and rendered scripts:
// an address or a name, nothing a shell would read as more.
TEST(JobTest, AHostIsAnAddressOrAName) {
  for (const char* host : {"10.0.0.1", "node-3.example", "::1", "gpu_box"})
    EXPECT_TRUE(ParseJob(kMinimal, "t", {std::string("regions.us.host=") + host}).ok()) << host;
  for (const char* host : {"a b", "$(reboot)", "x;y", "a\nb"}) {
    auto job = ParseJob(kMinimal, "t", {std::string("regions.us.host=") + host});
    ASSERT_FALSE(job.ok()) << host;
    EXPECT_NE(job.status().message().find("must be an address or a host name"), std::string::npos) << job.status();
  }
}

TEST(JobTest, MissingFileIsNotFound) {
  auto job = LoadJobFile("/nonexistent/job.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), Code::kNotFound);
}

TEST(JobTest, OverridesApplyBeforeValidation) {
  auto job = ParseJob(kMinimal, "t", {"training.staleness_bound=0", "regions.us.workers=5", "model.name=mlp"});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->training.staleness_bound, 0);
  EXPECT_EQ(job->regions[0].workers, 5);
  EXPECT_EQ(job->model.name, ModelKind::kMlp);
  EXPECT_FALSE(ParseJob(kMinimal, "t", {"training.staleness_bound=-1"}).ok());
  EXPECT_FALSE(ParseJob(kMinimal, "t", {"no-equals-sign"}).ok());
  EXPECT_FALSE(ParseJob(kMinimal, "t", {"name.inner=1"}).ok());  // name is a scalar
}

TEST(JobTest, InfiniteStalenessBound) {
  auto job = ParseJob(kMinimal, "t", {"training.staleness_bound=inf"});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_GE(job->training.staleness_bound, int64_t{1} << 40);
}

TEST(JobTest, YamlRoundTrip) {
  auto job = ParseJob(kMinimal, "t", {"optimizer.lr=0.0123", "model.mlp_hidden=[32, 16]", "training.steps=7"});
  ASSERT_TRUE(job.ok()) << job.status();
  auto again = ParseJob(JobToYaml(*job), "roundtrip");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << JobToYaml(*job);
  EXPECT_EQ(JobToYaml(*again), JobToYaml(*job));
  EXPECT_DOUBLE_EQ(again->optimizer.lr, 0.0123);
  EXPECT_EQ(again->model.mlp_hidden, (std::vector<int>{32, 16}));
  EXPECT_EQ(again->training.steps, 7);
}

TEST(JobTest, AggregatorsParseRoundTripAndNameTheirRegionsAndWorkers) {
  auto job = ParseJob(kMinimal, "t", {"regions.eu.aggregator=true", "training.staleness_bound=0"});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(job->regions[0].aggregator);
  EXPECT_TRUE(job->regions[1].aggregator);
  EXPECT_TRUE(job->HasAggregators());
  EXPECT_EQ(job->RegionIndex("eu"), 1);
  EXPECT_EQ(job->RegionIndex("asia"), -1);
  EXPECT_EQ(job->WorkerRegions(), (std::vector<int32_t>{0, 0, 1}));
  auto again = ParseJob(JobToYaml(*job), "roundtrip");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->regions[1].aggregator);
  // `auto` is kept for the launcher's planner, and refuses nothing itself.
  auto chosen = ParseJob(kMinimal, "t", {"regions.eu.aggregator=auto", "training.staleness_bound=3"});
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_TRUE(chosen->regions[1].aggregator_auto);
  EXPECT_FALSE(chosen->HasAggregators());
  auto kept = ParseJob(JobToYaml(*chosen), "roundtrip");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(kept->regions[1].aggregator_auto);
  auto typo = ParseJob(kMinimal, "t", {"regions.eu.aggregator=sometimes"});
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("true, false or auto"), std::string::npos) << typo.status();
  EXPECT_FALSE(AggregatorLimits(*chosen).empty());
  // What an aggregator does not combine is refused with the reason.
  for (const char* set : {"membership.elastic=true", "wan.replan=true"}) {
    auto bad = ParseJob(kMinimal, "t", {"regions.eu.aggregator=true", "training.staleness_bound=0", set});
    ASSERT_FALSE(bad.ok()) << set;
    EXPECT_NE(bad.status().message().find("regions.*.aggregator"), std::string::npos) << bad.status();
  }
  // A secured job's aggregators join with their own token role.
  auto secured =
      ParseJob(kMinimal, "t", {"regions.eu.aggregator=true", "training.staleness_bound=0", "security.mode=curve"});
  EXPECT_TRUE(secured.ok()) << secured.status();
  // Local SGD and DiLoCo rounds, streaming too, are combined like BSP gradients.
  auto diloco = ParseJob(
      kMinimal, "t",
      {"regions.eu.aggregator=true", "training.staleness_bound=0", "training.local_steps=4",
       "training.outer_momentum=0.9", "optimizer.name=adamw", "training.fragments=2", "training.overlap_steps=2"});
  EXPECT_TRUE(diloco.ok()) << diloco.status();
}

TEST(JobTest, CurvePointsParseRoundTripAndAreBounded) {
  auto job = ParseJob(kMinimal, "t");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->eval.curve_points, 12);
  for (int64_t v : {0, 40}) {
    auto set = ParseJob(kMinimal, "t", {"eval.curve_points=" + std::to_string(v)});
    ASSERT_TRUE(set.ok()) << set.status();
    auto again = ParseJob(JobToYaml(*set), "roundtrip");
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->eval.curve_points, v);
  }
  auto bad = ParseJob(kMinimal, "t", {"eval.curve_points=-1"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("eval.curve_points"), std::string::npos) << bad.status();
}

TEST(JobTest, EvalBatchParsesRoundTripsAndIsBounded) {
  auto job = ParseJob(kMinimal, "t");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->eval.batch, 128);
  auto set = ParseJob(kMinimal, "t", {"eval.batch=1000"});
  ASSERT_TRUE(set.ok()) << set.status();
  auto again = ParseJob(JobToYaml(*set), "roundtrip");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->eval.batch, 1000);
  for (const char* v : {"0", "-3", "100001"}) {
    auto bad = ParseJob(kMinimal, "t", {std::string("eval.batch=") + v});
    ASSERT_FALSE(bad.ok()) << v;
    EXPECT_NE(bad.status().message().find("eval.batch"), std::string::npos) << bad.status();
  }
}

TEST(JobTest, TorchScriptNeedsAPathOthersRefuseOne) {
  auto job = ParseJob(kMinimal, "t", {"model.name=torchscript", "model.path=/m/model.pt", "eval.buffer_samples=512"});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->model.name, ModelKind::kTorchScript);
  EXPECT_EQ(job->eval.buffer_samples, 512);
  auto again = ParseJob(JobToYaml(*job), "roundtrip");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->model.path, "/m/model.pt");
  EXPECT_EQ(again->eval.buffer_samples, 512);

  auto none = ParseJob(kMinimal, "t", {"model.name=torchscript"});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("model.path"), std::string::npos) << none.status();
  auto cnn = ParseJob(kMinimal, "t", {"model.path=/m/model.pt"});
  ASSERT_FALSE(cnn.ok());
  EXPECT_NE(cnn.status().message().find("model.path: is only for model torchscript"), std::string::npos)
      << cnn.status();
  EXPECT_FALSE(ParseJob(kMinimal, "t", {"model.name=torchscript", "model.path=/m.pt", "eval.buffer_samples=0"}).ok());
  auto word = ParseJob(kMinimal, "t", {"model.name=resnet"});
  ASSERT_FALSE(word.ok());
  EXPECT_NE(word.status().message().find("use cnn, mlp, synthetic or torchscript"), std::string::npos);
}

TEST(JobTest, ARelativeModelPathIsMadeAbsoluteWhenLoaded) {
  const std::string file = ::testing::TempDir() + "/torchscript-job.yaml";
  std::ofstream(file) << kMinimal << "model: {name: torchscript, path: models/../models/m.pt}\n";
  auto job = LoadJobFile(file);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->model.path, (std::filesystem::current_path() / "models/m.pt").string());
  std::filesystem::remove(file);
}

TEST(JobTest, DatasetsNormalizationAndAugmentation) {
  auto job = ParseJob(std::string(kMinimal) + R"(
model: {name: mlp}
data:
  dataset: cifar10
  path: /data/cifar
  mean: [0.5, 0.25, 0.125]
  std: [0.5, 0.5, 0.5]
  augment: {crop: 4, flip: true}
)",
                      "t");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->data.dataset, DatasetKind::kCifar10);
  EXPECT_EQ(job->data.augment.crop, 4);
  EXPECT_TRUE(job->data.augment.flip);
  EXPECT_EQ(job->TrainSamples(), 50000);
  auto again = ParseJob(JobToYaml(*job), "roundtrip");
  ASSERT_TRUE(again.ok()) << again.status() << JobToYaml(*job);
  EXPECT_EQ(JobToYaml(*again), JobToYaml(*job));
  EXPECT_EQ(again->data.std, (std::vector<double>{0.5, 0.5, 0.5}));

  auto expect_error = [](const std::vector<std::string>& sets, const std::string& says) {
    auto bad = ParseJob(kMinimal, "t", sets);
    ASSERT_FALSE(bad.ok()) << says;
    EXPECT_NE(bad.status().message().find(says), std::string::npos) << bad.status();
  };
  expect_error({"data.dataset=imagenet"}, "use fashion-mnist, cifar10, safetensors or tokens");
  expect_error({"model.name=mlp", "data.mean=[0.5]"}, "data.std: needs one value per value of data.mean");
  expect_error({"model.name=mlp", "data.mean=[0.5]", "data.std=[0]"}, "data.std: values must be finite and > 0");
  expect_error({"data.augment.crop=-1"}, "data.augment.crop: must be in [0, 64]");
  expect_error({"data.dataset=cifar10"}, "model.name: cnn takes Fashion-MNIST's 1x28x28 images");
  expect_error({"data.dataset=safetensors", "model.name=mlp"}, "data.train_samples: needed to count training.epochs");
  EXPECT_TRUE(ParseJob(kMinimal, "t", {"data.dataset=safetensors", "model.name=mlp", "training.steps=5"}).ok());
  auto counted = ParseJob(kMinimal, "t", {"data.dataset=safetensors", "model.name=mlp", "data.train_samples=1000"});
  ASSERT_TRUE(counted.ok()) << counted.status();
  EXPECT_EQ(counted->TrainSamples(), 1000);
  EXPECT_EQ(counted->StepsPerWorker(), static_cast<int64_t>(std::ceil(3 * 1000.0 / (3 * 64))));
}

// Token data (docs/language-models.md): its keys, what it refuses, and what
// only token data takes.
TEST(JobTest, TokenDataKeysAndWhatTheyRefuse) {
  const std::vector<std::string> lm = {"data.dataset=tokens", "model.name=torchscript", "model.path=/m.pt",
                                       "training.steps=10"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> sets = lm;
    sets.insert(sets.end(), more.begin(), more.end());
    return ParseJob(kMinimal, "t", sets);
  };
  auto job = with(
      {"data.context=256", "data.token_bytes=4", "data.vocab=50257", "data.partition=groups", "eval.target_loss=3.5"});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->data.context, 256);
  EXPECT_EQ(job->data.partition.kind, DataPartition::kGroups);
  EXPECT_EQ(job->eval.target_loss, 3.5);
  auto again = ParseJob(JobToYaml(*job), "roundtrip");
  ASSERT_TRUE(again.ok()) << again.status() << JobToYaml(*job);
  EXPECT_EQ(JobToYaml(*again), JobToYaml(*job));

  auto error = [&](std::vector<std::string> more, const std::string& says) {
    auto bad = with(more);
    ASSERT_FALSE(bad.ok()) << says;
    EXPECT_NE(bad.status().message().find(says), std::string::npos) << bad.status();
  };
  error({"data.token_bytes=3"}, "data.token_bytes: must be 2 (uint16) or 4 (uint32)");
  error({"data.context=0"}, "data.context: must be in [1, 65536] tokens");
  error({"eval.target_loss=-1"}, "eval.target_loss: must be >= 0");
  error({"model.name=cnn", "model.path="}, "model.name: token data needs a torchscript module with a loss");
  error({"data.partition=dirichlet:0.3"}, "token data is split iid (windows), by documents or by groups");
  error({"data.augment.flip=true"}, "data.augment: is for images, not tokens");
  auto federated = with({"federated.clients=10", "data.partition=documents", "training.staleness_bound=0"});
  ASSERT_TRUE(federated.ok()) << federated.status();  // clients of documents
  error({"training.steps=0"}, "data.train_samples: needed to count training.epochs over a tokens dataset");
  auto images = ParseJob(kMinimal, "t", {"data.partition=documents"});
  ASSERT_FALSE(images.ok());
  EXPECT_NE(images.status().message().find("documents splits token data"), std::string::npos) << images.status();
  EXPECT_FALSE(ParsePartition("documents:2").ok());
  EXPECT_EQ(ToString(ParsePartition("documents").value()), "documents");
}

TEST(JobTest, CompressionPerDirectionAndRegionPair) {
  auto job = ParseJob(std::string(kMinimal) + R"(
compression:
  push: "int8+zstd"
  pull: fp16
  error_feedback: false
  links:
    - {regions: [us, eu], push: "topk:0.01"}
    - {regions: [eu, eu], pull: bf16}
)",
                      "t");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->PushCodec("us", "us"), "int8+zstd");  // no link: job-wide
  EXPECT_EQ(job->PushCodec("us", "eu"), "topk:0.01");
  EXPECT_EQ(job->PushCodec("eu", "us"), "topk:0.01");  // either way round
  EXPECT_EQ(job->PullCodec("us", "eu"), "fp16");       // the link sets only push
  EXPECT_EQ(job->PullCodec("eu", "eu"), "bf16");
  EXPECT_FALSE(job->compression.error_feedback);
  auto again = ParseJob(JobToYaml(*job), "roundtrip");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(JobToYaml(*again), JobToYaml(*job));

  auto bad = ParseJob(std::string(kMinimal) + "compression: {links: [{regions: [us, mars]}], pus: fp16}\n", "t");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'mars' is not a region"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("compression.pus: unknown key"), std::string::npos) << bad.status();
  EXPECT_FALSE(ParseJob(std::string(kMinimal) + "compression: {links: [{regions: [us]}]}\n", "t").ok());
}

TEST(JobTest, ShippedExampleParses) {
  auto job = LoadJobFile(::geodesic::testing::SourcePath("examples/fashion_mnist.yaml"));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->NumServers(), 2);
  EXPECT_EQ(job->NumWorkers(), 4);
  EXPECT_EQ(job->model.name, ModelKind::kCnn);
  auto three = LoadJobFile(::geodesic::testing::SourcePath("examples/three_regions.yaml"));
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->wan.links.size(), 6u);
  EXPECT_EQ(three->wan.emulation, WanEmulation::kProxy);
  auto diloco = LoadJobFile(::geodesic::testing::SourcePath("examples/three_regions_diloco.yaml"));
  ASSERT_TRUE(diloco.ok()) << diloco.status();
  EXPECT_EQ(diloco->optimizer.name, OptimizerKind::kAdamW);
  EXPECT_TRUE(diloco->ShardOptimizer().nesterov);
  auto lm = LoadJobFile(::geodesic::testing::SourcePath("examples/lm.yaml"));
  ASSERT_TRUE(lm.ok()) << lm.status();
  EXPECT_EQ(lm->data.dataset, DatasetKind::kTokens);
  EXPECT_EQ(lm->eval.target_loss, 2.3);
  auto lm3 = LoadJobFile(::geodesic::testing::SourcePath("examples/three_regions_lm.yaml"));
  ASSERT_TRUE(lm3.ok()) << lm3.status();
  EXPECT_EQ(lm3->training.local_steps, 16);
  EXPECT_EQ(lm3->training.overlap_steps, 2);  // each average folded in as it arrives, not a round late
  EXPECT_TRUE(lm3->ShardOptimizer().nesterov);
  auto fed = LoadJobFile(::geodesic::testing::SourcePath("examples/federated_lm.yaml"));
  ASSERT_TRUE(fed.ok()) << fed.status();
  EXPECT_EQ(fed->data.partition.kind, DataPartition::kGroups);
  EXPECT_EQ(fed->federated.clients, 40);
}

TEST(JobTest, WanLinksBothWaysOrOneWay) {
  auto job = ParseJob(std::string(kMinimal) + R"(
wan:
  emulation: proxy
  links:
    - {regions: [us, eu], rtt_ms: 80, bandwidth_mbit: 100, jitter_ms: 2}
    - {from: eu, to: eu, delay_ms: 1}
)",
                      "t");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->wan.links.size(), 3u);
  const LinkSpec* ue = job->Link("us", "eu");
  const LinkSpec* eu = job->Link("eu", "us");
  ASSERT_TRUE(ue && eu);
  EXPECT_DOUBLE_EQ(ue->delay_ms, 40);
  EXPECT_DOUBLE_EQ(eu->delay_ms, 40);
  EXPECT_DOUBLE_EQ(eu->bandwidth_mbit, 100);
  EXPECT_DOUBLE_EQ(job->Link("eu", "eu")->delay_ms, 1);
  EXPECT_EQ(job->Link("us", "us"), nullptr);
  auto again = ParseJob(JobToYaml(*job), "roundtrip");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(JobToYaml(*again), JobToYaml(*job));

  for (const char* bad :
       {"wan: {links: [{regions: [us, mars], rtt_ms: 1}]}", "wan: {links: [{regions: [us, eu], from: us, to: eu}]}",
        "wan: {links: [{regions: [us, eu], rtt_ms: -1}]}", "wan: {links: [{regions: [us, eu], loss: 1.5}]}",
        "wan: {links: [{regions: [us, eu]}, {from: us, to: eu}]}", "wan: {links: [{from: us}]}",
        "wan: {emulation: tc}"}) {
    auto r = ParseJob(std::string(kMinimal) + bad + "\n", "t");
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("wan."), std::string::npos) << r.status();
  }
}

TEST(JobTest, PipelineDepthNeedsTheStalenessBoundAndPrefetch) {
  auto ok = ParseJob(kMinimal, "t", {"training.staleness_bound=3", "training.pipeline_depth=4"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->training.pipeline_depth, 4);
  for (std::vector<std::string> bad :
       {std::vector<std::string>{"training.pipeline_depth=0"},
        {"training.pipeline_depth=17", "training.staleness_bound=inf"},
        {"training.pipeline_depth=2", "training.staleness_bound=0"},
        {"training.pipeline_depth=2", "training.staleness_bound=2", "training.prefetch=false"}}) {
    auto r = ParseJob(kMinimal, "t", bad);
    ASSERT_FALSE(r.ok()) << bad[0];
    EXPECT_NE(r.status().message().find("training.pipeline_depth"), std::string::npos) << r.status();
  }
}

TEST(JobTest, LocalStepsCountClocksPerRoundAndRunAnOuterStepOnTheShards) {
  auto ok = ParseJob(kMinimal, "t",
                     {"training.staleness_bound=0", "training.local_steps=4", "training.steps=10",
                      "training.outer_momentum=0.5", "optimizer.weight_decay=0.01"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->StepsPerWorker(), 10);
  EXPECT_EQ(ok->ClocksPerWorker(), 3);  // 4 + 4 + 2 steps
  OptimizerSpec shard = ok->ShardOptimizer();
  EXPECT_EQ(shard.name, OptimizerKind::kSgd);
  EXPECT_DOUBLE_EQ(shard.lr, 1.0);
  EXPECT_DOUBLE_EQ(shard.momentum, 0.5);
  EXPECT_DOUBLE_EQ(shard.weight_decay, 0.0);  // the workers apply it
  // Survives a round trip through the YAML the launcher writes.
  auto again = ParseJob(JobToYaml(*ok), "t");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->training.local_steps, 4);
  EXPECT_TRUE(again->training.overlap_rounds);
  EXPECT_DOUBLE_EQ(again->training.outer_momentum, 0.5);
  // One step per clock: the shards run the job's optimizer.
  auto plain = ParseJob(kMinimal, "t", {"training.steps=10"});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->ClocksPerWorker(), 10);
  EXPECT_DOUBLE_EQ(plain->ShardOptimizer().momentum, plain->optimizer.momentum);

  for (std::vector<std::string> bad :
       {std::vector<std::string>{"training.local_steps=0"},
        {"training.local_steps=4", "training.staleness_bound=2"},
        {"training.local_steps=4", "training.staleness_bound=2", "training.pipeline_depth=2"},
        {"training.local_steps=4", "training.staleness_bound=0", "compression.momentum_correction=true"}}) {
    auto r = ParseJob(kMinimal, "t", bad);
    ASSERT_FALSE(r.ok()) << bad.back();
    EXPECT_NE(r.status().message().find("training.local_steps"), std::string::npos) << r.status();
  }
  for (const char* bad : {"training.outer_lr=0", "training.outer_lr=nan", "training.outer_momentum=1"}) {
    auto r = ParseJob(kMinimal, "t", {bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(std::string(bad).substr(0, std::string(bad).find('='))), std::string::npos)
        << r.status();
  }
}

TEST(JobTest, ShardThreadsParseRoundTripAndAreBounded) {
  auto job = ParseJob(kMinimal, "t");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->training.shard_threads, 1);
  for (int threads : {0, 4, 256}) {
    job = ParseJob(kMinimal, "t", {"training.shard_threads=" + std::to_string(threads)});
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->training.shard_threads, threads);
    auto again = ParseJob(JobToYaml(*job), "t");
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->training.shard_threads, threads);
  }
  for (const char* bad : {"training.shard_threads=-1", "training.shard_threads=257", "training.shard_threads=two"}) {
    auto r = ParseJob(kMinimal, "t", {bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("training.shard_threads"), std::string::npos) << r.status();
  }
}

// A valid job whose outer momentum meets rounds folded in a round late gets
// one note naming the keys and the way out; the same job with the rounds in
// turn, the average folded in early or no momentum gets none.
TEST(JobTest, OuterMomentumOnLateRoundsGetsANote) {
  const std::vector<std::string> late = {"training.staleness_bound=0", "training.local_steps=8",
                                         "training.outer_momentum=0.9", "training.outer_nesterov=true"};
  auto job = ParseJob(kMinimal, "t", late);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(JobNotes(*job).size(), 1u);
  EXPECT_NE(JobNotes(*job)[0].find("training.overlap_steps"), std::string::npos) << JobNotes(*job)[0];
  EXPECT_NE(JobNotes(*job)[0].find("outer momentum 0.9"), std::string::npos) << JobNotes(*job)[0];
  for (const char* fix : {"training.overlap_steps=2", "training.overlap_rounds=false"}) {
    std::vector<std::string> sets = late;
    sets.push_back(fix);
    auto fixed = ParseJob(kMinimal, "t", sets);
    ASSERT_TRUE(fixed.ok()) << fixed.status();
    EXPECT_TRUE(JobNotes(*fixed).empty()) << fix;
  }
  auto plain = ParseJob(kMinimal, "t", {"training.staleness_bound=0", "training.local_steps=8"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(JobNotes(*plain).empty());
  auto lm3 = LoadJobFile(::geodesic::testing::SourcePath("examples/three_regions_lm.yaml"));
  ASSERT_TRUE(lm3.ok()) << lm3.status();
  EXPECT_TRUE(JobNotes(*lm3).empty());
}

TEST(JobTest, DilocoRecipeParsesRoundTripsAndRunsNesterovOnTheShards) {
  auto job = ParseJob(
      kMinimal, "t",
      {"training.staleness_bound=0", "training.local_steps=8", "training.outer_lr=0.7", "training.outer_momentum=0.9",
       "training.outer_nesterov=true", "optimizer.name=adamw", "optimizer.lr=0.001", "optimizer.weight_decay=0.1",
       "optimizer.clip_norm=1.5", "optimizer.schedule=step", "optimizer.milestones=[0.5, 0.75]", "optimizer.gamma=0.2",
       "optimizer.warmup=0.1", "training.overlap_steps=8", "training.fragments=4"});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->training.overlap_steps, 8);
  EXPECT_EQ(job->training.fragments, 4);
  OptimizerSpec outer = job->ShardOptimizer();
  EXPECT_EQ(outer.name, OptimizerKind::kSgd);
  EXPECT_TRUE(outer.nesterov);
  EXPECT_DOUBLE_EQ(outer.momentum, 0.9);
  EXPECT_EQ(outer.schedule, LrSchedule::kConstant);  // the inner optimizer's schedule stays on the workers
  auto again = ParseJob(JobToYaml(*job), "t");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << JobToYaml(*job);
  EXPECT_EQ(JobToYaml(*again), JobToYaml(*job));
  EXPECT_EQ(again->optimizer.name, OptimizerKind::kAdamW);
  EXPECT_EQ(again->optimizer.milestones, (std::vector<double>{0.5, 0.75}));
  EXPECT_DOUBLE_EQ(again->optimizer.clip_norm, 1.5);
  EXPECT_TRUE(again->training.outer_nesterov);
  EXPECT_EQ(again->training.overlap_steps, 8);
  EXPECT_EQ(again->training.fragments, 4);

  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"training.outer_nesterov=true"}, "training.outer_nesterov"},  // no momentum, no rounds
      {{"training.staleness_bound=0", "training.local_steps=4", "training.outer_nesterov=true"},
       "training.outer_nesterov"},
      {{"training.overlap_steps=1"}, "training.overlap_steps"},  // no rounds
      {{"training.staleness_bound=0", "training.local_steps=4", "training.overlap_rounds=false",
        "training.overlap_steps=2"},
       "training.overlap_steps"},
      {{"training.staleness_bound=0", "training.local_steps=4", "training.overlap_steps=5"}, "training.overlap_steps"},
      {{"training.staleness_bound=0", "training.local_steps=4", "training.overlap_steps=-1"}, "training.overlap_steps"},
      {{"training.fragments=2"}, "training.fragments"},  // no rounds
      {{"training.staleness_bound=0", "training.local_steps=4", "training.fragments=2"},
       "training.fragments"},  // overlapped rounds that merge only at the round's end
      {{"training.staleness_bound=0", "training.local_steps=4", "training.overlap_rounds=false",
        "training.fragments=0"},
       "training.fragments"},
      {{"training.staleness_bound=0", "training.local_steps=4", "training.overlap_rounds=false",
        "training.fragments=65"},
       "training.fragments"},
      {{"training.staleness_bound=0", "training.local_steps=4", "training.overlap_rounds=false", "training.fragments=2",
        "membership.elastic=true"},
       "training.fragments"},
      {{"optimizer.nesterov=true", "optimizer.momentum=0"}, "optimizer.nesterov"},
      {{"optimizer.nesterov=true", "optimizer.name=adam"}, "optimizer.nesterov"},
      {{"optimizer.name=lamb"}, "optimizer.name"},
      {{"optimizer.schedule=step"}, "optimizer.schedule"},
      {{"optimizer.milestones=[0.5]"}, "optimizer.milestones"},
      {{"optimizer.schedule=step", "optimizer.milestones=[0.7, 0.3]"}, "optimizer.milestones"},
      {{"optimizer.schedule=step", "optimizer.milestones=[0.5, 1.5]"}, "optimizer.milestones"},
      {{"optimizer.schedule=step", "optimizer.milestones=[a]"}, "optimizer.milestones"},
      {{"optimizer.gamma=0"}, "optimizer.gamma"},
      {{"optimizer.warmup=1"}, "optimizer.warmup"},
      {{"optimizer.clip_norm=-1"}, "optimizer.clip_norm"},
      {{"optimizer.clip_norm=1", "model.name=synthetic"}, "optimizer.clip_norm"},
      {{"optimizer.nesterov=true", "compression.momentum_correction=true"}, "compression.momentum_correction"},
  };
  for (const auto& [overrides, key] : bad) {
    auto r = ParseJob(kMinimal, "t", overrides);
    ASSERT_FALSE(r.ok()) << overrides.back();
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status();
  }
}

TEST(JobTest, LearningRateSchedulesByHand) {
  OptimizerSpec o;
  EXPECT_DOUBLE_EQ(LearningRateFactor(o, 57, 100), 1.0);
  o.schedule = LrSchedule::kCosine;
  EXPECT_DOUBLE_EQ(LearningRateFactor(o, 0, 100), 1.0);
  EXPECT_NEAR(LearningRateFactor(o, 50, 100), 0.5, 1e-12);
  EXPECT_NEAR(LearningRateFactor(o, 100, 100), 0.0, 1e-12);
  // Warm-up over ceil(0.1 * 100) = 10 steps: 1/10, 2/10, ..., then cosine
  // over the remaining 90 (half-way at step 10 + 45).
  o.warmup = 0.1;
  EXPECT_DOUBLE_EQ(LearningRateFactor(o, 0, 100), 0.1);
  EXPECT_DOUBLE_EQ(LearningRateFactor(o, 4, 100), 0.5);
  EXPECT_DOUBLE_EQ(LearningRateFactor(o, 10, 100), 1.0);
  EXPECT_NEAR(LearningRateFactor(o, 55, 100), 0.5, 1e-12);
  EXPECT_NEAR(LearningRateFactor(o, 100, 100), 0.0, 1e-12);
  // Step: gamma at each milestone, counted from step 0; warm-up first.
  o.schedule = LrSchedule::kStep;
  o.milestones = {0.5, 0.75};
  o.gamma = 0.1;
  o.warmup = 0;
  EXPECT_DOUBLE_EQ(LearningRateFactor(o, 49, 100), 1.0);
  EXPECT_DOUBLE_EQ(LearningRateFactor(o, 50, 100), 0.1);
  EXPECT_NEAR(LearningRateFactor(o, 75, 100), 0.01, 1e-15);
  o.warmup = 0.02;
  EXPECT_DOUBLE_EQ(LearningRateFactor(o, 0, 100), 0.5);
  EXPECT_DOUBLE_EQ(LearningRateFactor(o, 2, 100), 1.0);
  // No steps to schedule: the plain rate.
  EXPECT_DOUBLE_EQ(LearningRateFactor(o, 3, 0), 1.0);
}

TEST(JobTest, PartitionSpecsParseRoundTripAndNameWhatIsWrong) {
  for (const char* text : {"iid", "dirichlet:0.3", "dirichlet:1000", "shards:2", "lognormal:1.5", "dirichlet:1e-05"}) {
    auto job = ParseJob(kMinimal, "t", {std::string("data.partition=") + text});
    ASSERT_TRUE(job.ok()) << text << ": " << job.status();
    auto back = ParseJob(JobToYaml(*job), "yaml");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->data.partition, job->data.partition) << text;
    EXPECT_EQ(ToString(back->data.partition), ToString(*ParsePartition(text))) << text;
  }
  EXPECT_EQ(ParsePartition("dirichlet:0.3")->param, 0.3);
  EXPECT_EQ(ParsePartition("shards:2")->kind, DataPartition::kShards);
  EXPECT_NE(ParsePartition("dirichlet:").status().message().find("needs a number"), std::string::npos);
  for (auto [bad, why] : {std::pair<const char*, const char*>{"dirichlet", "needs a number"},
                          {"dirichlet:", "expected a string"},  // YAML reads "dirichlet:" as a map
                          {"dirichlet:0", "(0, 1000]"},
                          {"dirichlet:nan", "needs a number"},
                          {"dirichlet:0.3x", "needs a number"},
                          {"shards:1.5", "whole number"},
                          {"shards:0", "whole number"},
                          {"lognormal:-1", "(0, 10]"},
                          {"iid:2", "no parameter"},
                          {"pathological", "use iid, dirichlet:ALPHA"}}) {
    auto r = ParseJob(kMinimal, "t", {std::string("data.partition=") + bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("data.partition"), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find(why), std::string::npos) << bad << ": " << r.status();
  }
}

// Each override added to `on` makes the job fail, naming `key`.
void ExpectRefused(const std::vector<std::string>& on,
                   std::initializer_list<std::pair<const char*, const char*>> bad_keys) {
  for (auto [bad, key] : bad_keys) {
    std::vector<std::string> o = on;
    o.push_back(bad);
    auto r = ParseJob(kMinimal, "t", o);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(key), std::string::npos) << bad << ": " << r.status();
  }
}

TEST(JobTest, FederatedSectionIsCheckedAndRoundTrips) {
  auto off = ParseJob(kMinimal, "t");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->federated.enabled());
  const std::vector<std::string> on = {
      "federated.clients=100", "federated.per_round=10",     "federated.rounds=7",         "federated.prox_mu=0.01",
      "federated.dropout=0.2", "federated.dp_clip_norm=1.5", "training.staleness_bound=0", "federated.eval_every=5"};
  auto job = ParseJob(kMinimal, "t", on);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->federated.clients, 100);
  EXPECT_EQ(job->ClocksPerWorker(), 7);  // a clock is a round
  EXPECT_EQ(job->ShardOptimizer().lr, job->training.outer_lr);
  auto back = ParseJob(JobToYaml(*job), "yaml");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->federated.prox_mu, 0.01);
  EXPECT_EQ(back->federated.dropout, 0.2);
  EXPECT_TRUE(back->federated.dp());
  EXPECT_EQ(back->federated.dp_clip_norm, 1.5);
  EXPECT_EQ(back->federated.eval_every, 5);
  EXPECT_EQ(back->federated.client_eval_samples, 128);
  EXPECT_EQ(JobToYaml(*back), JobToYaml(*job));
  ExpectRefused(on, {{"federated.per_round=101", "federated.per_round"},
                     {"federated.local_lr=0", "federated.local_lr"},
                     {"federated.availability=0", "federated.availability"},
                     {"training.staleness_bound=3", "training.staleness_bound: 0"},
                     {"federated.clients=5000", "at most the 60000 training samples"},
                     {"model.name=synthetic", "needs a model with a network"},
                     {"federated.dp_delta=1", "federated.dp_delta"},
                     {"federated.eval_every=-1", "federated.eval_every"},
                     {"federated.client_eval_samples=70000", "federated.client_eval_samples"},
                     {"federated.device_uplink_mbit=0", "federated.device_uplink_mbit"},
                     {"federated.device_compute_sigma=9", "federated.device_compute_sigma"},
                     {"federated.deadline_s=-1", "federated.deadline_s"},
                     {"federated.over_selection=0.3", "needs over_selection: 0"},
                     {"federated.availability=0.5", "needs uniform selection of every client"},
                     {"federated.uplink_codec=int8", "needs federated.uplink_codec: fp32"},
                     {"federated.slow_uplink_mbit=5", "needs federated.slow_uplink_codec"},
                     {"federated.max_update_norm=-1", "federated.max_update_norm"}});
}

// Real clients: a gateway with a timeout, refused with strategies that
// keep client state, with DP and with lossy uplinks.
TEST(JobTest, FederatedGatewayIsCheckedAndRoundTrips) {
  const std::vector<std::string> on = {"federated.clients=100", "federated.gateway=true",
                                       "federated.gateway_timeout_s=4", "training.staleness_bound=0"};
  auto job = ParseJob(kMinimal, "t", on);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->federated.gateway);
  auto back = ParseJob(JobToYaml(*job), "yaml");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->federated.gateway);
  EXPECT_EQ(back->federated.gateway_timeout_s, 4);
  ExpectRefused(on, {{"federated.gateway_timeout_s=0", "federated.gateway_timeout_s"},
                     {"federated.strategy=scaffold", "not with scaffold or fedbuff"},
                     {"federated.strategy=fedbuff", "not with scaffold or fedbuff"},
                     {"federated.dp_clip_norm=1", "does not work with DP-FedAvg"},
                     {"federated.uplink_codec=int8", "real clients send fp32"}});
}

// SCAFFOLD keeps c after the model on the shards; it refuses server
// momentum (which would carry into c) and DP.
TEST(JobTest, ScaffoldDoublesTheShardsValuesAndRefusesMomentumAndDp) {
  const std::vector<std::string> on = {"federated.clients=100", "federated.strategy=scaffold",
                                       "training.staleness_bound=0"};
  auto job = ParseJob(kMinimal, "t", on);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->federated.scaffold());
  EXPECT_EQ(job->ShardValues(1000), 2000);
  auto back = ParseJob(JobToYaml(*job), "yaml");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->federated.scaffold());
  EXPECT_EQ(ParseJob(kMinimal, "t", {"federated.strategy=scaffold"})->ShardValues(1000), 1000);  // not federated
  ExpectRefused(on, {{"training.outer_momentum=0.9", "outer_momentum: 0"},
                     {"federated.dp_clip_norm=1", "cannot be combined with DP"},
                     {"federated.strategy=scafold", "scaffold or fedbuff"}});
}

// FedBuff: concurrency defaults to per_round; it waits for no deadline and
// refuses DP.
TEST(JobTest, FedBuffSectionIsCheckedAndRoundTrips) {
  const std::vector<std::string> on = {"federated.clients=100", "federated.strategy=fedbuff",
                                       "federated.max_staleness=4", "training.staleness_bound=0"};
  auto job = ParseJob(kMinimal, "t", on);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->federated.fedbuff());
  EXPECT_EQ(job->federated.InFlight(), job->federated.per_round);
  auto back = ParseJob(JobToYaml(*job), "yaml", {"federated.concurrency=30"});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->federated.max_staleness, 4);
  EXPECT_EQ(back->federated.InFlight(), 30);
  ExpectRefused(on, {{"federated.deadline_s=5", "fedbuff needs over_selection"},
                     {"federated.dp_clip_norm=1", "fedbuff cannot be combined with DP"},
                     {"federated.concurrency=101", "federated.concurrency"},
                     {"federated.max_staleness=-1", "federated.max_staleness"}});
}

TEST(JobTest, CheckpointSectionIsCheckedAndRoundTrips) {
  auto ok = ParseJob(kMinimal, "t", {"checkpoint.every_clocks=50", "checkpoint.keep=4", "checkpoint.on_stop=false"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->checkpoint.every_clocks, 50);
  EXPECT_EQ(ok->checkpoint.keep, 4);
  EXPECT_FALSE(ok->checkpoint.on_stop);
  auto back = ParseJob(JobToYaml(*ok), "yaml");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->checkpoint.every_clocks, 50);
  EXPECT_EQ(back->checkpoint.keep, 4);
  EXPECT_FALSE(back->checkpoint.on_stop);
  for (auto [bad, key] : {std::pair<const char*, const char*>{"checkpoint.keep=1", "checkpoint.keep"},
                          {"checkpoint.every_clocks=-5", "checkpoint.every_clocks"},
                          {"checkpoint.every=5", "checkpoint.every"}}) {
    auto r = ParseJob(kMinimal, "t", {bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status();
  }
}

TEST(JobTest, ReplicationSectionIsCheckedAndRoundTrips) {
  auto plain = ParseJob(kMinimal, "t");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->replication.backups, 0);
  auto ok = ParseJob(kMinimal, "t", {"replication.backups=1"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->replication.backups, 1);
  auto back = ParseJob(JobToYaml(*ok), "yaml");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->replication.backups, 1);
  for (auto [bad, key] : {std::pair<const char*, const char*>{"replication.backups=2", "replication.backups"},
                          {"replication.backups=-1", "replication.backups"},
                          {"replication.copies=1", "replication.copies"}}) {
    auto r = ParseJob(kMinimal, "t", {bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status();
  }
}

TEST(JobTest, BackupsGoToTheNextRegion) {
  auto two = ParseJob("regions:\n  a: {servers: 2, workers: 1}\n  b: {servers: 1, workers: 1}\n", "t");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->RegionOfBackup(0).name, "b");
  EXPECT_EQ(two->RegionOfBackup(1).name, "b");
  EXPECT_EQ(two->RegionOfBackup(2).name, "a");  // wraps around
  auto one = ParseJob("regions:\n  a: {servers: 2, workers: 1}\n", "t");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->RegionOfBackup(1).name, "a");
}

TEST(JobTest, SecuritySectionDefaultsParsesAndNamesBadKeys) {
  auto plain = ParseJob(kMinimal, "t");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->security.mode, SecurityMode::kNone);
  EXPECT_EQ(plain->security.token_ttl_s, 86400);

  auto curve =
      ParseJob(kMinimal, "t", {"security.mode=curve", "security.secret_file=/tmp/s", "security.token_ttl_s=60"});
  ASSERT_TRUE(curve.ok()) << curve.status();
  EXPECT_EQ(curve->security.mode, SecurityMode::kCurve);
  EXPECT_EQ(curve->security.secret_file, "/tmp/s");
  EXPECT_EQ(curve->security.token_ttl_s, 60);
  auto again = ParseJob(JobToYaml(*curve), "roundtrip");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(JobToYaml(*again), JobToYaml(*curve));

  for (auto [override, what] : std::vector<std::pair<std::string, std::string>>{
           {"security.mode=tls", "security.mode: use none or curve"},
           {"security.token_ttl_s=1", "security.token_ttl_s: must be in"},
           {"security.token_ttl_s=soon", "security.token_ttl_s"},
           {"security.secret_file=/tmp/s", "security.secret_file: needs security.mode: curve"},
           {"security.secret=abc", "security.secret: unknown key"}}) {
    auto bad = ParseJob(kMinimal, "t", {override});
    ASSERT_FALSE(bad.ok()) << override;
    EXPECT_NE(bad.status().message().find(what), std::string::npos) << override << ": " << bad.status();
  }
}

// Found by fuzz_job: YAML allows any node as a mapping key; one that is not
// a plain name used to throw out of the parser (an abort in the fuzzer).
TEST(JobTest, NonScalarKeysAreAnErrorNotACrash) {
  for (const char* text : {"name: j\nregions: {a: {servers: 1, workers: 1}}\n? [x, y]\n: 3\n",
                           "name: j\nregions:\n  ? {a: 1}\n  : {servers: 1, workers: 1}\n",
                           "name: j\nregions: {a: {servers: 1, workers: 1}}\nwan: {links: [{? [r] : 1}]}\n"}) {
    auto r = ParseJob(text, "t");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status();
  }
}

}  // namespace
TEST(JobTest, ReplanNeedsLinksAndRefusesWhatItCannotMove) {
  const std::string base = std::string(kMinimal) + "checkpoint: {every_clocks: 0}\n";
  const std::string links = "  links: [{regions: [us, eu], rtt_ms: 20, bandwidth_mbit: 100}]\n";
  auto ok = ParseJob(base + "wan:\n  replan: true\n" + links, "test.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->wan.replan);
  EXPECT_FALSE(ParseJob(kMinimal, "test.yaml")->wan.replan);  // off by default
  auto no_links = ParseJob(base + "wan: {replan: true}\n", "test.yaml");
  ASSERT_FALSE(no_links.ok());
  EXPECT_NE(no_links.status().message().find("wan.replan: needs declared wan.links"), std::string::npos)
      << no_links.status();
  auto replicated = ParseJob(base + "replication: {backups: 1}\nwan:\n  replan: true\n" + links, "test.yaml");
  ASSERT_FALSE(replicated.ok());
  EXPECT_NE(replicated.status().message().find("replication.backups"), std::string::npos) << replicated.status();
  auto periodic = ParseJob(std::string(kMinimal) + "wan:\n  replan: true\n" + links, "test.yaml");
  ASSERT_FALSE(periodic.ok());
  EXPECT_NE(periodic.status().message().find("checkpoint.every_clocks: 0"), std::string::npos) << periodic.status();
  auto inject =
      ParseJob(base + "wan:\n  replan_at_clock: 5\n  replan_from: us\n  replan_to: mars\n" + links, "test.yaml");
  ASSERT_FALSE(inject.ok());
  EXPECT_NE(inject.status().message().find("wan.replan_at_clock: needs wan.replan: true"), std::string::npos)
      << inject.status();
  EXPECT_NE(inject.status().message().find("'mars' is not a region"), std::string::npos) << inject.status();
}

}  // namespace geodesic

namespace geodesic {
namespace {

const char* kElastic = R"(
name: t
regions:
  us: {servers: 1, workers: 2, max_workers: 4}
  eu: {servers: 1, workers: 0, max_workers: 2}
membership: {elastic: true}
training: {staleness_bound: 2, epochs: 2}
data: {batch_size: 100}
)";

TEST(JobTest, ElasticJobsKeepIdsForLateWorkersRegionByRegion) {
  auto job = ParseJob(kElastic, "e.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->NumWorkers(), 6);
  EXPECT_EQ(job->InitialWorkers(), 2);
  EXPECT_EQ(job->FirstWorkerOfRegion(1), 4);
  std::vector<bool> initial;
  for (int i = 0; i < 6; ++i) initial.push_back(job->IsInitialWorker(i));
  EXPECT_EQ(initial, (std::vector<bool>{true, true, false, false, false, false}));
  EXPECT_EQ(job->RegionOfWorker(3).name, "us");
  EXPECT_EQ(job->RegionOfWorker(4).name, "eu");
  EXPECT_EQ(job->UnitsPerEpoch(), 600);
  EXPECT_EQ(job->TotalUnits(), 1200);
  EXPECT_EQ(job->ClockLimit(), 1200);
  // Steps per worker count the workers that start.
  EXPECT_EQ(job->StepsPerWorker(), 600);
  // Round trip.
  auto again = ParseJob(JobToYaml(*job), "again.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->NumWorkers(), 6);
  EXPECT_TRUE(again->membership.elastic);
}

TEST(JobTest, ElasticJobsRefuseWhatTheyDoNotSupport) {
  for (const char* bad : {"training.staleness_bound=0", "data.partition=dirichlet:0.5", "wan.replan=true",
                          "regions.us.workers=0", "regions.us.max_workers=1", "membership.units_ahead=0"}) {
    auto job = ParseJob(kElastic, "e.yaml", {bad});
    EXPECT_FALSE(job.ok()) << bad;
  }
  auto spare = ParseJob(kElastic, "e.yaml", {"membership.elastic=false"});
  ASSERT_FALSE(spare.ok());
  EXPECT_NE(spare.status().message().find("needs membership.elastic"), std::string::npos) << spare.status();
}

}  // namespace
}  // namespace geodesic

namespace geodesic {
namespace {

// The keys a docs/job-file.md table names: the backticked names of each
// row's first cell ("`optimizer.beta1`, `beta2`, `eps`": a bare name takes
// the first one's section).
std::set<std::string> DocumentedKeys(const std::string& markdown) {
  std::set<std::string> keys;
  std::istringstream in(markdown);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    const std::string cell = line.substr(2, line.find(" |", 2) - 2);
    std::string section;
    for (size_t at = cell.find('`'); at != std::string::npos; at = cell.find('`', at + 1)) {
      const size_t end = cell.find('`', at + 1);
      if (end == std::string::npos) break;
      std::string key = cell.substr(at + 1, end - at - 1);
      at = end;
      if (key.find('.') == std::string::npos && !section.empty()) key = section + key;
      if (section.empty()) section = key.substr(0, key.rfind('.') + 1);
      keys.insert(key);
    }
  }
  return keys;
}

// Every key the parser reads is documented in docs/job-file.md (which says
// it lists every key): twelve federated.* keys had been read but not listed.
// The job below enables every section, so that the parser looks up every key
// of each (region names become <name>, list entries their list's key).
TEST(JobTest, EveryKeyTheParserReadsIsDocumented) {
  auto keys = JobFileKeys(R"(
regions: {a: {servers: 1, workers: 1}, b: {servers: 1, workers: 1}}
compression: {links: [{regions: [a, b], push: fp16}]}
wan: {emulation: proxy, links: [{regions: [a, b], rtt_ms: 10, bandwidth_mbit: 100}]}
federated: {clients: 4}
)");
  ASSERT_TRUE(keys.ok()) << keys.status();
  std::ifstream doc(testing::SourcePath("docs/job-file.md"));
  std::stringstream text;
  text << doc.rdbuf();
  const std::set<std::string> documented = DocumentedKeys(text.str());
  ASSERT_GT(documented.size(), 100u);
  std::vector<std::string> missing;
  for (std::string key : *keys) {
    for (const char* region : {"regions.a.", "regions.b."})
      if (key.rfind(region, 0) == 0) key = "regions.<name>." + key.substr(10);
    if (const size_t list = key.find('['); list != std::string::npos) key = key.substr(0, list);
    const auto next = keys->upper_bound(key);  // a section: the keys inside it are checked
    if (next != keys->end() && next->rfind(key + ".", 0) == 0) continue;
    if (key == "regions" || documented.count(key)) continue;
    missing.push_back(key);
  }
  EXPECT_TRUE(missing.empty()) << "read by the parser, missing from docs/job-file.md: "
                               << ::testing::PrintToString(missing);
  EXPECT_GT(keys->size(), 100u);
}

}  // namespace
}  // namespace geodesic
