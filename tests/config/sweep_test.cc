// The sweep file (config/sweep.h): parsing, the product of the axes, and
// errors that name the key.
#include "config/sweep.h"
#include "tests/test_paths.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace geodesic {
namespace {

SweepSpec Parse(const std::string& text) {
  auto s = ParseSweep(text, "/d/s.yaml", "/d");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : SweepSpec{};
}

std::string ErrorOf(const std::string& text) {
  auto s = ParseSweep(text, "/d/s.yaml", "/d");
  EXPECT_FALSE(s.ok());
  return s.ok() ? "" : s.status().message();
}

TEST(SweepTest, AxesMakeTheirProductLastAxisFastest) {
  SweepSpec s = Parse(R"(
job: jobs/base.yaml
set: {training.epochs: 2, wan.links: []}
axes:
  training.staleness_bound: [0, inf]
  compression.push: [none, "topk:0.01+zstd"]
  seed: [1, 2]
limit_s: 60
)");
  EXPECT_EQ(s.name, "s");
  EXPECT_EQ(s.job_file, "/d/jobs/base.yaml");
  EXPECT_EQ(s.limit_s, 60);
  EXPECT_EQ(s.overrides, (std::vector<std::string>{"training.epochs=2", "wan.links=[]"}));
  std::vector<SweepPoint> p = SweepPoints(s);
  ASSERT_EQ(p.size(), 8u);
  EXPECT_EQ(p[0].Describe(), "training.staleness_bound=0, compression.push=none, seed=1");
  EXPECT_EQ(p[1].Describe(), "training.staleness_bound=0, compression.push=none, seed=2");
  EXPECT_EQ(p[7].Describe(), "training.staleness_bound=inf, compression.push=topk:0.01+zstd, seed=2");
  EXPECT_EQ(p[7].index, 7);
  EXPECT_EQ(p[7].Slug(), "007-staleness_bound-inf.push-topk0.01zstd.seed-2");
  EXPECT_EQ(p[3].Overrides(s),
            (std::vector<std::string>{"training.epochs=2", "wan.links=[]", "training.staleness_bound=0",
                                      "compression.push=topk:0.01+zstd", "seed=2"}));
  EXPECT_EQ(p[3].job_file, "/d/jobs/base.yaml");
}

TEST(SweepTest, NonScalarValuesPassAsFlowYamlAndJobAxisTakesFiles) {
  SweepSpec s = Parse(R"(
axes:
  job: [a.yaml, /abs/b.yaml]
  wan.links: [[], [{from: us, to: eu, delay_ms: 40}]]
)");
  std::vector<SweepPoint> p = SweepPoints(s);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].job_file, "/d/a.yaml");
  EXPECT_EQ(p[2].job_file, "/abs/b.yaml");
  EXPECT_EQ(p[1].Overrides(s), (std::vector<std::string>{"wan.links=[{from: us, to: eu, delay_ms: 40}]"}));
  EXPECT_EQ(p[2].Slug().substr(0, 9), "002-job-b");
}

TEST(SweepTest, NoAxesIsOneRunOfTheBaseJob) {
  std::vector<SweepPoint> p = SweepPoints(Parse("job: j.yaml\n"));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].Describe(), "the base job");
  EXPECT_EQ(p[0].Slug(), "000");
}

TEST(SweepTest, ARecipeAxisSetsSeveralKeysUnderOneName) {
  SweepSpec s = Parse(R"(
job: j.yaml
set: {training.epochs: 2}
axes:
  recipe:
    bsp-fp32: {}
    local16-int4: {training.local_steps: 16, compression.push: "int4+zstd", wan.links: []}
  seed: [1, 2]
)");
  ASSERT_EQ(s.axes.size(), 2u);
  EXPECT_TRUE(s.axes[0].is_recipes());
  EXPECT_FALSE(s.axes[1].is_recipes());
  std::vector<SweepPoint> p = SweepPoints(s);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].Overrides(s), (std::vector<std::string>{"training.epochs=2", "seed=1"}));
  EXPECT_EQ(p[3].Overrides(s), (std::vector<std::string>{"training.epochs=2", "training.local_steps=16",
                                                         "compression.push=int4+zstd", "wan.links=[]", "seed=2"}));
  EXPECT_EQ(p[3].Describe(), "recipe=local16-int4, seed=2");
  EXPECT_EQ(p[3].Slug(), "003-recipe-local16-int4.seed-2");
  // A recipe with nothing under it is the base job too.
  SweepSpec bare = Parse("job: j.yaml\naxes:\n  recipe:\n    base:\n    other: {seed: 4}\n");
  ASSERT_EQ(SweepPoints(bare).size(), 2u);
  EXPECT_TRUE(SweepPoints(bare)[0].Overrides(bare).empty());
  EXPECT_EQ(SweepPoints(bare)[1].Overrides(bare), (std::vector<std::string>{"seed=4"}));
  EXPECT_NE(ErrorOf("job: j.yaml\naxes: {recipe: {}}\n").find("axes.recipe: expected at least one recipe"),
            std::string::npos);
  EXPECT_NE(ErrorOf("job: j.yaml\naxes: {training.seed: {a: {}}}\n").find("needs a label that is not a job key"),
            std::string::npos);
  EXPECT_NE(ErrorOf("job: j.yaml\naxes: {r: {a: [1]}}\n").find("axes.r.a: expected a mapping"), std::string::npos);
  EXPECT_NE(ErrorOf("job: j.yaml\naxes: {r: {'a b': {}}}\n").find("a recipe's name is"), std::string::npos);
  EXPECT_NE(ErrorOf("job: j.yaml\naxes: {r: {a: {job: x.yaml}}}\n").find("'job' is not a dotted job key"),
            std::string::npos);
  EXPECT_NE(ErrorOf("job: j.yaml\nset: {seed: 3}\naxes: {r: {a: {seed: 1}}}\n").find("axes.r.a.seed: also under set:"),
            std::string::npos);
}

TEST(SweepTest, BadFilesNameTheKey) {
  EXPECT_NE(ErrorOf("job: j.yaml\naxis: {seed: [1]}\n").find("axis: unknown key (did you mean 'axes'?)"),
            std::string::npos);
  EXPECT_NE(ErrorOf("job: j.yaml\naxes: {seed: []}\n").find("axes.seed: expected a non-empty list"), std::string::npos);
  EXPECT_NE(ErrorOf("job: j.yaml\naxes: {seed: 3}\n").find("axes.seed: expected a non-empty list"), std::string::npos);
  EXPECT_NE(ErrorOf("job: j.yaml\nset: {seed: 1}\naxes: {seed: [1, 2]}\n").find("axes.seed: also under set:"),
            std::string::npos);
  EXPECT_NE(ErrorOf("axes: {seed: [1]}\n").find("job: missing"), std::string::npos);
  EXPECT_NE(ErrorOf("job: j.yaml\nlimit_s: 0\n").find("limit_s: must be"), std::string::npos);
  EXPECT_NE(ErrorOf("job: j.yaml\nlimit_s: nan\n").find("limit_s"), std::string::npos);
  EXPECT_NE(ErrorOf("job: j.yaml\naxes: {'a b': [1]}\n").find("'a b' is not a dotted job key"), std::string::npos);
  EXPECT_NE(ErrorOf("job: j.yaml\nset: [1]\n").find("set: must be a mapping"), std::string::npos);
  EXPECT_NE(ErrorOf("- 1\n").find("must be a YAML mapping"), std::string::npos);
  EXPECT_NE(ErrorOf("job: [\n").find("not valid YAML"), std::string::npos);
  // 30 x 30 x 30 runs is a typo, not an experiment.
  std::string values = "[";
  for (int i = 0; i < 30; ++i) values += std::to_string(i) + (i < 29 ? "," : "]");
  EXPECT_NE(ErrorOf("job: j.yaml\naxes: {a: " + values + ", b: " + values + ", c: " + values + "}\n")
                .find("27000 runs; at most 10000"),
            std::string::npos);
}

TEST(SweepTest, CheckSweepJobsNamesTheRunAndTheKey) {
  const std::string dir = std::filesystem::temp_directory_path() / ("sweep_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/job.yaml") << "name: x\nregions:\n  a: {servers: 1, workers: 1}\n";
  auto s = ParseSweep("job: job.yaml\naxes:\n  training.staleness_bound: [0, -3]\n", dir + "/s.yaml", dir);
  ASSERT_TRUE(s.ok()) << s.status().message();
  Status st = CheckSweepJobs(*s, SweepPoints(*s));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("run 001-staleness_bound--3 (training.staleness_bound=-3)"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("training.staleness_bound: must be >= 0"), std::string::npos) << st.message();
  s = ParseSweep("job: job.yaml\naxes:\n  training.staleness_bound: [0, 2]\n", dir + "/s.yaml", dir);
  EXPECT_TRUE(CheckSweepJobs(*s, SweepPoints(*s)).ok());
  std::filesystem::remove_all(dir);
}

// The sweeps under examples/ stay runnable: they parse and so does every
// run's job.
TEST(SweepTest, ExampleSweepsParseAndTheirJobsToo) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(::geodesic::testing::SourcePath("examples"))) {
    if (!e.path().filename().string().starts_with("sweep_")) continue;
    SCOPED_TRACE(e.path().string());
    auto s = LoadSweepFile(e.path().string());
    ASSERT_TRUE(s.ok()) << s.status().message();
    Status st = CheckSweepJobs(*s, SweepPoints(*s));
    EXPECT_TRUE(st.ok()) << st.message();
    ++n;
  }
  EXPECT_GE(n, 2);
}

}  // namespace
}  // namespace geodesic
