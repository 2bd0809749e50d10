// `geodesic launch` and the role subcommands, end to end, on jobs that take
// seconds: clear errors for bad input, a complete summary, clean Ctrl-C.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/integration/harness.h"
#include "tests/test_paths.h"

namespace geodesic {
namespace {

using testing::RunGeodesic;
using testing::TempDir;

const char* kSyntheticJob = R"(
name: synth
regions:
  a: {servers: 1, workers: 1}
  b: {servers: 1, workers: 1}
model: {name: synthetic, synthetic_params: 100000}
training: {steps: 40, staleness_bound: 1}
wire: {chunk_bytes: 65536}
membership: {heartbeat_ms: 100, lease_ms: 1000}
)";

// A test killed (a ctest timeout kills the test process, not the process
// groups it made) takes what it started with it: nothing is left running.
TEST(HarnessTest, AProcessDiesWithTheTestThatStartedIt) {
  TempDir dir;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t test = ::fork();
  ASSERT_GE(test, 0);
  if (test == 0) {  // stands in for the test process: starts one and hangs
    ::close(fds[0]);
    testing::Process sleeper({"/bin/sleep", "30"}, dir / "sleep.log", /*program=*/true);
    const pid_t pid = sleeper.pid();
    if (::write(fds[1], &pid, sizeof(pid)) != sizeof(pid)) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  ::close(fds[1]);
  pid_t sleeper = -1;
  const ssize_t got = ::read(fds[0], &sleeper, sizeof(sleeper));
  ::close(fds[0]);
  ::kill(test, SIGKILL);  // before any assertion, so that the stand-in never outlives this test
  ::waitpid(test, nullptr, 0);
  ASSERT_EQ(got, static_cast<ssize_t>(sizeof(sleeper)));
  // Gone, or a zombie for whoever adopted it to reap; 5 s at most.
  auto running = [&] {
    std::ifstream stat("/proc/" + std::to_string(sleeper) + "/stat");
    std::string pid, comm, state;
    return static_cast<bool>(stat >> pid >> comm >> state) && state != "Z" && state != "X";
  };
  for (int i = 0; i < 500 && running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool left = running();
  if (left) ::kill(sleeper, SIGKILL);
  EXPECT_FALSE(left) << "pid " << sleeper << " outlived the test that started it";
}

TEST(CliTest, HelpForEverySubcommand) {
  for (std::vector<std::string> args : {std::vector<std::string>{"--help"},
                                        {"launch", "--help"},
                                        {"coordinator", "--help"},
                                        {"server", "--help"},
                                        {"worker", "--help"},
                                        {"eval", "--help"},
                                        {"aggregator", "--help"},
                                        {"status", "--help"},
                                        {"bench", "--help"},
                                        {"plan", "--help"},
                                        {"partition", "--help"},
                                        {"wan", "--help"},
                                        {"bench", "transport", "--help"},
                                        {"bench", "wan", "--help"},
                                        {"bench", "links", "--help"}}) {
    auto r = RunGeodesic(args, 30);
    EXPECT_EQ(r.exit_code, 0) << args[0] << "\n" << r.output;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << r.output;
  }
  auto r = RunGeodesic({"frobnicate"}, 30);
  EXPECT_NE(r.exit_code, 0);
}

// A real shard process that splits its updates over two threads
// (training.shard_threads) serves pushes and pulls of an 8 MiB chunk, whose
// pulled values the bench's client checks, and exits cleanly.
TEST(BenchTest, TransportThroughAShardWithTwoThreads) {
  auto r = RunGeodesic({"bench", "transport", "--sizes-mb", "8", "--chunk-bytes", "8388608", "--seconds", "0.3",
                        "--set", "training.shard_threads=2", "--json"},
                       60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find("[\n  {");
  ASSERT_NE(at, std::string::npos) << r.output;
  auto rows = nlohmann::json::parse(r.output.substr(at, r.output.rfind(']') + 1 - at), nullptr, false);
  ASSERT_TRUE(rows.is_array() && rows.size() == 1) << r.output;
  EXPECT_EQ(rows[0]["bytes"], 8 << 20);
  EXPECT_GE(rows[0]["rounds"].get<int>(), 3);
  EXPECT_GT(rows[0]["geodesic_gbps"].get<double>(), 0);
}

// The plain-training baseline trains the job's model for the time asked and
// scores its snapshots on the test set.
TEST(BenchTest, PlainTrainingTrainsAndScoresTheJobsModel) {
  TempDir dir;
  auto r = RunGeodesic({"bench", "plain-train", "--job", ::geodesic::testing::SourcePath("examples/fashion_mnist.yaml"),
                        "--seconds", "1", "--result-file", dir / "plain.json"},
                       120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto out = testing::ReadJson(dir / "plain.json");
  ASSERT_TRUE(out.is_object()) << r.output;
  EXPECT_GT(out["steps"].get<int64_t>(), 0);
  EXPECT_EQ(out["samples"].get<int64_t>(), out["steps"].get<int64_t>() * 64);
  ASSERT_GE(out["accuracy_curve"].size(), 1u);
  EXPECT_GT(out["final_accuracy"].get<double>(), 0.1) << out.dump();  // one second of SGD beats chance
  EXPECT_LE(out["final_accuracy"].get<double>(), 1.0);
}

// `geodesic plan` builds the job's model for its size and plans its chunks;
// data that is not there is one clear error naming the key.
TEST(PlanTest, PlansTheJobsModelAndNamesMissingData) {
  const std::string job = ::geodesic::testing::SourcePath("examples/fashion_mnist.yaml");
  auto r = RunGeodesic({"plan", job, "--json"}, 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto plan = nlohmann::json::parse(r.output.substr(r.output.find('{')), nullptr, false);
  ASSERT_TRUE(plan.is_object()) << r.output;
  EXPECT_NE(plan.dump().find("bytes-balanced"), std::string::npos) << plan.dump(2);
  // The same job with an aggregator in each region: two workers per region
  // send one copy instead of two.
  const auto& agg = plan["aggregators"];
  ASSERT_TRUE(agg.is_object()) << plan.dump(2);
  EXPECT_NEAR(agg["without"]["wan_bytes_per_step"].get<double>() / agg["with"]["wan_bytes_per_step"].get<double>(), 2.0,
              0.01)
      << agg.dump();
  auto missing = RunGeodesic(
      {"plan", job, "--set", "model.name=mlp", "--set", "data.dataset=cifar10", "--set", "data.path=/nonexistent"}, 60);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("data.path"), std::string::npos) << missing.output;
}

TEST(LaunchTest, BadJobFileIsAClearErrorAndStartsNothing) {
  TempDir dir;
  testing::WriteText(dir / "bad.yaml", "name: x\nregions:\n  a: {servers: 1, workers: 1}\ntraining: {epoch: 3}\n");
  auto r = RunGeodesic({"launch", dir / "bad.yaml", "--run-dir", dir / "run"}, 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("training.epoch: unknown key (did you mean 'epochs'?)"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "run/logs"));
  r = RunGeodesic({"launch", dir / "missing.yaml"}, 30);
  EXPECT_NE(r.exit_code, 0);
  r = RunGeodesic({"launch", dir / "bad.yaml", "--set", "training.epoch"}, 30);
  EXPECT_NE(r.exit_code, 0);
}

TEST(LaunchTest, BadCodecIsRefusedAtStartUp) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kSyntheticJob);
  auto r = RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--set", "compression.push=int3"}, 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("compression.push"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("int3"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "run/logs"));
  r = RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--set", "compression.pull=topk:2"}, 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("compression.pull"), std::string::npos) << r.output;
  // A server started by hand refuses it too.
  r = RunGeodesic({"server", "--job", dir / "job.yaml", "--id", "0", "--coordinator", "tcp://127.0.0.1:1", "--set",
                   "compression.pull=int8:block=3", "--set", "membership.rendezvous_timeout_s=1"},
                  30);
  EXPECT_EQ(r.exit_code, 1);
}

TEST(LaunchTest, MissingDatasetNamesThePackage) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", "name: x\nregions:\n  a: {servers: 1, workers: 1}\n");
  auto r = RunGeodesic({"launch", dir / "job.yaml", "--set", "data.path=/nonexistent", "--run-dir", dir / "run"}, 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("apt-get install dataset-fashion-mnist"), std::string::npos) << r.output;
  // A worker started by hand says the same, before joining anything.
  r = RunGeodesic({"worker", "--job", dir / "job.yaml", "--set", "data.path=/nonexistent", "--id", "0", "--coordinator",
                   "tcp://127.0.0.1:1"},
                  30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("dataset-fashion-mnist"), std::string::npos) << r.output;
  r = RunGeodesic({"worker", "--job", dir / "job.yaml", "--id", "7", "--coordinator", "tcp://127.0.0.1:1"}, 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--id 7 but the job has 1 workers"), std::string::npos) << r.output;
}

TEST(LaunchTest, BadTorchScriptModuleIsOneClearErrorAndStartsNothing) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", "name: x\nregions:\n  a: {servers: 1, workers: 1}\n");
  testing::WriteText(dir / "garbage.pt", "not a module\n");
  for (const std::string& path : {dir / "missing.pt", dir / "garbage.pt"}) {
    auto r = RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--set", "model.name=torchscript",
                          "--set", "model.path=" + path},
                         60);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("model.path: " + path), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir / "run/logs"));
  }
  // A worker started by hand says the same before joining anything.
  auto r = RunGeodesic({"worker", "--job", dir / "job.yaml", "--set", "model.name=torchscript", "--set",
                        "model.path=" + (dir / "garbage.pt"), "--id", "0", "--coordinator", "tcp://127.0.0.1:1"},
                       60);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("is not a module saved with torch.jit.save"), std::string::npos) << r.output;
}

TEST(LaunchTest, BadDatasetFilesAreOneClearErrorAndStartNothing) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", "name: x\nregions:\n  a: {servers: 1, workers: 1}\nmodel: {name: mlp}\n");
  std::filesystem::create_directories(dir / "cifar");
  testing::WriteText(dir / "cifar/data_batch_1.bin", std::string(3073 * 2, '\1'));
  testing::WriteText(dir / "cifar/test_batch.bin", std::string(3073 + 5, '\1'));
  auto r = RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--set", "data.dataset=cifar10", "--set",
                        "data.path=" + (dir / "cifar")},
                       60);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("data.path: " + (dir / "cifar/test_batch.bin") + ": 3078 bytes is not a whole number"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "run/logs"));
  testing::WriteText(dir / "cifar/test_batch.bin", std::string(3073, '\1'));
  r = RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--set", "data.dataset=cifar10", "--set",
                   "data.path=" + (dir / "cifar")},
                  60);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("data.train_samples: the job counts training.epochs over 50000 training samples, but " +
                          (dir / "cifar") + " has 2"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "run/logs"));
}

TEST(LaunchTest, SyntheticJobWritesACompleteSummary) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kSyntheticJob);
  auto r = RunGeodesic(
      {"launch", dir / "job.yaml", "--run-dir", dir / "run", "--summary", dir / "out/summary.json", "--quiet"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("summary written to " + (dir / "out/summary.json")), std::string::npos) << r.output;
  auto s = testing::ReadJson(dir / "out/summary.json");
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["status"], "finished");
  for (const char* key : {"test_accuracy", "wall_seconds", "samples_per_second", "bytes_sent", "bytes_received",
                          "staleness_histogram", "accuracy_curve", "step_time_breakdown", "processes"})
    EXPECT_TRUE(s.contains(key)) << key;
  EXPECT_GT(s["wall_seconds"].get<double>(), 0);
  // 2 workers x 40 steps x (1 chunk on each of 2 servers... 100000 floats / 16384 per chunk = 7 chunks).
  uint64_t updates = 0;
  for (auto& [k, v] : s["staleness_histogram"].items()) updates += v.get<uint64_t>();
  EXPECT_EQ(updates, 2u * 40 * 7);
  EXPECT_GT(s["bytes_sent"]["worker-0"].get<int64_t>(), 40 * 100000 * 4);
  EXPECT_GT(s["bytes_received"]["server-1"].get<int64_t>(), 0);
  ASSERT_TRUE(s["step_time_breakdown"].contains("worker-1"));
  auto b = s["step_time_breakdown"]["worker-1"];
  EXPECT_NEAR(b["compute"].get<double>() + b["communication"].get<double>() + b["staleness_wait"].get<double>(), 1.0,
              1e-6);
  // Compute utilization: compute seconds over the worker's training seconds.
  EXPECT_GT(b["seconds"]["training"].get<double>(), 0);
  EXPECT_NEAR(b["utilization"].get<double>(),
              b["seconds"]["compute"].get<double>() / b["seconds"]["training"].get<double>(), 1e-9);
  EXPECT_GT(b["utilization"].get<double>(), 0);
  EXPECT_LE(b["utilization"].get<double>(), 1);
  const double u0 = s["step_time_breakdown"]["worker-0"]["utilization"], u1 = b["utilization"];
  EXPECT_NEAR(s["compute_utilization"]["mean"].get<double>(), (u0 + u1) / 2, 1e-9);
  EXPECT_EQ(s["compute_utilization"]["min"].get<double>(), std::min(u0, u1));
  EXPECT_EQ(s["processes"].size(), 6u);  // coordinator, 2 servers, 2 workers, evaluator
  for (auto& p : s["processes"]) EXPECT_EQ(p["exit"], "exited 0") << p.dump();
  EXPECT_TRUE(std::filesystem::exists(dir / "run/final_params.bin"));
  EXPECT_EQ(std::filesystem::file_size(dir / "run/final_params.bin"), 100000u * 4);
}

const char* kNonIidJob = R"(
name: noniid
seed: 5
regions:
  a: {servers: 1, workers: 1}
  b: {servers: 1, workers: 1}
model: {name: mlp, mlp_hidden: [32]}
data: {partition: "dirichlet:0.3", batch_size: 32}
training: {steps: 20, staleness_bound: 1}
eval: {test_samples: 1000}
membership: {heartbeat_ms: 100, lease_ms: 1000}
)";

// `geodesic partition` prints and writes the split a job's workers draw.
TEST(PartitionCliTest, PrintsTheSplitAndWritesItsFiles) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kNonIidJob);
  auto r = RunGeodesic({"partition", dir / "job.yaml", "--parts", "10", "--out", dir / "p"}, 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("partition dirichlet:0.3, seed 5, 10 parts"), std::string::npos) << r.output;
  auto p = testing::ReadJson(dir / "p/partition.json");
  ASSERT_EQ(p["parts"].size(), 10u);
  int64_t total = 0;
  for (auto& part : p["parts"]) total += part["samples"].get<int64_t>();
  EXPECT_EQ(total, 60000);
  // indices.txt: one line per part, every training sample exactly once.
  std::istringstream lines(testing::ReadText(dir / "p/indices.txt"));
  std::vector<int> seen(60000, 0);
  std::string line;
  int parts = 0;
  for (; std::getline(lines, line); ++parts) {
    std::istringstream in(line);
    for (int64_t i; in >> i;) ++seen.at(i);
  }
  EXPECT_EQ(parts, 10);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 60000);
  EXPECT_NE(testing::ReadText(dir / "p/partition.svg").find("</svg>"), std::string::npos);
  EXPECT_NE(testing::ReadText(dir / "p/partition.csv").find("part,samples,label_0"), std::string::npos);
  // The seed decides the split; a split that cannot fit is a clear error.
  auto again = RunGeodesic({"partition", dir / "job.yaml", "--parts", "10", "--json"}, 60);
  EXPECT_NE(again.output.find(p["digest"].get<std::string>()), std::string::npos) << again.output;
  auto other = RunGeodesic({"partition", dir / "job.yaml", "--parts", "10", "--json", "--set", "seed=6"}, 60);
  EXPECT_EQ(other.output.find(p["digest"].get<std::string>()), std::string::npos) << other.output;
  auto bad = RunGeodesic({"partition", dir / "job.yaml", "--parts", "1000", "--set", "data.partition=shards:400"}, 60);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("use a smaller K"), std::string::npos) << bad.output;
}

// A job trains on the split `geodesic partition` shows, and its summary
// says which (the digest every worker computed) and what each worker held.
TEST(LaunchTest, NonIidJobReportsThePartitionItTrainedOn) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kNonIidJob);
  auto shown = RunGeodesic({"partition", dir / "job.yaml", "--out", dir / "p"}, 60);
  ASSERT_EQ(shown.exit_code, 0) << shown.output;
  auto p = testing::ReadJson(dir / "p/partition.json");
  auto r = RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--quiet"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto s = testing::ReadJson(dir / "run/summary.json");
  ASSERT_TRUE(s["partition"].is_object()) << s.dump();
  EXPECT_EQ(s["partition"]["spec"], "dirichlet:0.3");
  EXPECT_EQ(s["partition"]["digest"], p["digest"]);
  EXPECT_EQ(s["partition"]["digests_agree"], true);
  for (int w = 0; w < 2; ++w) {
    const std::string name = "worker-" + std::to_string(w);
    EXPECT_EQ(s["partition"]["samples_per_worker"][name], p["parts"][w]["samples"]) << name;
    EXPECT_EQ(s["partition"]["labels_per_worker"][name], p["parts"][w]["labels"]) << name;
  }
}

TEST(LaunchTest, InterruptStopsEveryProcessAndStillWritesASummary) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kSyntheticJob);
  testing::Process launch(
      {"launch", dir / "job.yaml", "--run-dir", dir / "run", "--set", "training.steps=1000000", "--quiet"},
      dir / "launch.log");
  ASSERT_TRUE(testing::WaitForFile(dir / "run/stats/worker-0.json", 60)) << testing::ReadText(dir / "launch.log");
  // The live view of the running job, from its run directory.
  auto st = RunGeodesic({"status", dir / "run"}, 30);
  ASSERT_EQ(st.exit_code, 0) << st.output;
  auto view = nlohmann::json::parse(st.output);
  EXPECT_EQ(view["trainingStarted"], true);
  EXPECT_EQ(view["workers"].size(), 2u);
  EXPECT_EQ(view["servers"].size(), 2u);
  EXPECT_EQ(view["stalenessBound"], "1");  // int64 is a string in protobuf's JSON
  launch.Signal(SIGINT);
  EXPECT_EQ(launch.Wait(30), 130) << testing::ReadText(dir / "launch.log");
  auto s = testing::ReadJson(dir / "run/summary.json");
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["status"], "interrupted");
  for (auto& p : s["processes"]) EXPECT_TRUE(p.contains("exit")) << p.dump();  // none left running
}

TEST(LaunchTest, AStuckWorkerIsNamedByWhoeverWaitsForIt) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kSyntheticJob);
  // BSP: pausing worker 1 blocks worker 0 until worker 1's lease expires
  // (4 s), and meanwhile the waits must explain themselves. Then worker 0
  // and the job finish without it. The pause comes 3 s into training: at
  // 1 s, on a loaded machine, it once caught worker 1 while it was still
  // writing the chunks' initial values, so worker 0 could not finish clock
  // 0 and shard 0 rightly named worker 0 (tied at clock 0) as its wait.
  auto r = RunGeodesic(
      {"launch", dir / "job.yaml", "--run-dir", dir / "run", "--quiet", "--set", "training.staleness_bound=0", "--set",
       "training.steps=400", "--set", "model.synthetic_params=2000000", "--set", "membership.lease_ms=4000", "--set",
       "membership.report_after_s=1", "--kill", "worker:1@3:STOP", "--kill", "worker:1@10:KILL"},
      120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::string w0 = testing::ReadText(dir / "run/logs/worker-0.log");
  // The pause can catch worker 1 between its pushes to the two shards; then
  // only the shard still missing its push holds pulls, so either may name it.
  std::string shards =
      testing::ReadText(dir / "run/logs/server-0.log") + testing::ReadText(dir / "run/logs/server-1.log");
  EXPECT_NE(w0.find("slowest live worker 1 at clock"), std::string::npos) << w0;
  EXPECT_NE(w0.find("(bound 0)"), std::string::npos) << w0;
  EXPECT_NE(shards.find("waits for worker 1 at clock"), std::string::npos) << shards;
  EXPECT_NE(r.output.find("SIGSTOP to worker-1"), std::string::npos) << r.output;
  auto summary = testing::ReadJson(dir / "run/summary.json");
  ASSERT_TRUE(summary.is_object());
  EXPECT_EQ(summary["step_time_breakdown"]["worker-0"]["steps"], 400);
  EXPECT_GT(summary["step_time_breakdown"]["worker-0"]["seconds"]["staleness_wait"].get<double>(), 2.0);
}

TEST(LaunchTest, StartupRendezvousTimesOutNamingWhoIsMissing) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kSyntheticJob);
  testing::Process coord(
      {"coordinator", "--job", dir / "job.yaml", "--endpoint-file", dir / "ep", "--set", "membership.report_after_s=1"},
      dir / "coord.log");
  ASSERT_TRUE(testing::WaitForFile(dir / "ep", 20));
  // Only worker 0 shows up; servers 0, 1 and worker 1 never do.
  auto r =
      RunGeodesic({"worker", "--job", dir / "job.yaml", "--id", "0", "--coordinator", testing::ReadText(dir / "ep"),
                   "--set", "membership.rendezvous_timeout_s=3", "--set", "membership.report_after_s=1"},
                  60);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("rendezvous timed out after 3 s waiting for servers 0,1; worker 1 to register"),
            std::string::npos)
      << r.output;
  coord.Signal(SIGTERM);
  EXPECT_EQ(coord.Wait(10), 0);
  EXPECT_NE(testing::ReadText(dir / "coord.log").find("for servers 0,1; worker 1 to register"), std::string::npos);
}

TEST(LaunchTest, KillFlagIsValidated) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kSyntheticJob);
  auto r = RunGeodesic({"launch", dir / "job.yaml", "--kill", "worker:9@1"}, 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("no worker 9"), std::string::npos) << r.output;
  r = RunGeodesic({"launch", dir / "job.yaml", "--kill", "worker-1"}, 30);
  EXPECT_NE(r.output.find("expected ROLE:ID@SECONDS"), std::string::npos) << r.output;
  r = RunGeodesic({"launch", dir / "job.yaml", "--kill", "worker:1@1:HUP"}, 30);
  EXPECT_NE(r.output.find("signal must be KILL, TERM, INT, STOP or CONT"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace geodesic

namespace geodesic {
namespace {

// A worker whose gradients are finite but beyond the shards' bound (+-1e18):
// a linear model whose logits are scaled by 1e20. Its push used to be
// refused (value_too_large) and counted as acknowledged, the shard never
// completed that clock, and the BSP job failed 120 s later ("pull at clock 1
// unanswered"). Now the worker stops at once, naming the reason, and the
// launcher stops the job (exit code kExitJobFatal).
TEST(LaunchTest, ADivergedModelFailsTheJobAtOnceNamingTheReason) {
  TempDir dir;
  const std::string module = dir / "diverging.pt";
  testing::WriteText(dir / "export.py",
                     "import torch\n"
                     "class M(torch.nn.Module):\n"
                     "    def __init__(self):\n"
                     "        super().__init__()\n"
                     "        self.fc = torch.nn.Linear(784, 10)\n"
                     "    def forward(self, x):\n"
                     "        return self.fc(x.flatten(1)) * 1e20\n"
                     "torch.jit.save(torch.jit.script(M()), '" +
                         module + "')\n");
  ASSERT_EQ(std::system(("/usr/bin/python3 " + (dir / "export.py")).c_str()), 0);
  testing::WriteText(dir / "job.yaml", R"(
name: diverges
regions:
  a: {servers: 2, workers: 2}
training: {steps: 50, staleness_bound: 0}
eval: {test_samples: 500}
membership: {heartbeat_ms: 100, lease_ms: 2000}
)");
  const auto start = std::chrono::steady_clock::now();
  auto r = RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "run", "--set", "model.name=torchscript",
                        "--set", "model.path=" + module},
                       200);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(took, 110) << r.output;  // before, the rpc timeout alone took 120 s
  EXPECT_EQ(r.output.find("unanswered"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("beyond +-1e18"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the model diverged"), std::string::npos) << r.output;
  auto summary = testing::ReadJson(dir / "run/summary.json");
  EXPECT_EQ(summary["status"], "failed") << summary.dump(2);
  EXPECT_NE(summary.dump().find("diverged"), std::string::npos) << summary.dump(2);
}

}  // namespace
}  // namespace geodesic

namespace geodesic {
namespace {

// training.device: cuda on a machine without CUDA fell back to the CPU with
// a warning in each worker's log; it is an error naming the key before
// anything starts. auto says what it chose.
TEST(LaunchTest, CudaWithoutCudaIsAnErrorAndAutoSaysWhatItChose) {
  TempDir dir;
  testing::WriteText(dir / "job.yaml", kSyntheticJob);
  auto cuda = RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "cuda", "--set", "training.device=cuda"}, 60);
  if (cuda.output.find("a CUDA device is present") != std::string::npos) GTEST_SKIP() << "this machine has CUDA";
  EXPECT_EQ(cuda.exit_code, 1) << cuda.output;
  EXPECT_NE(cuda.output.find("training.device: cuda, but this machine has no CUDA device"), std::string::npos)
      << cuda.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "cuda/logs"));
  auto automatic = RunGeodesic({"launch", dir / "job.yaml", "--run-dir", dir / "auto", "--set", "training.device=auto",
                                "--set", "training.steps=5"},
                               120);
  EXPECT_EQ(automatic.exit_code, 0) << automatic.output;
  EXPECT_NE(automatic.output.find("device: cpu (training.device auto: no CUDA device)"), std::string::npos)
      << automatic.output;
}

}  // namespace
}  // namespace geodesic
