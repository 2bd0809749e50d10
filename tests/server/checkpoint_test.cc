#include "server/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "common/files.h"
#include "server/consistency.h"
#include "server/shard.h"
#include "tests/scratch_dir.h"

namespace geodesic::server {
namespace {

ShardOptions Options(int64_t bound, const std::string& optimizer = "sgd") {
  ShardOptions o;
  o.staleness_bound = bound;
  o.optimizer.name = *FromString<OptimizerKind>(optimizer);
  o.optimizer.lr = 0.1;
  o.optimizer.momentum = 0.9;
  o.total_clocks = 20;
  return o;
}

// Gradients that differ by worker, clock and element, with no exact sums.
std::vector<float> Grad(int worker, int64_t clock, uint64_t n) {
  std::mt19937 rng(static_cast<uint32_t>(worker * 1000 + clock));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> g(n);
  for (auto& v : g) v = d(rng) * 1e-2f + 1e-7f * static_cast<float>(worker);
  return g;
}

std::vector<float> Values(const ShardState& s, uint32_t chunk) {
  auto snap = s.Read(chunk);
  return std::vector<float>(snap.values.get(), snap.values.get() + s.layout().Size(chunk));
}

bool SameBits(const ShardState& a, const ShardState& b) {
  for (uint32_t c : a.owned()) {
    auto x = Values(a, c), y = Values(b, c);
    if (x.size() != y.size() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) != 0) return false;
    if (a.Read(c).version != b.Read(c).version) return false;
  }
  return true;
}

// Runs `clocks` BSP or async clocks of `workers` workers on `s`, visiting
// workers in the order `order(clock)` gives.
void RunClocks(ShardState& s, ClockTable& table, int workers, int64_t from, int64_t to,
               const std::function<std::vector<int>(int64_t)>& order) {
  for (int64_t c = from; c < to; ++c) {
    for (int w : order(c)) {
      bool completed = false;
      for (uint32_t chunk : s.owned()) {
        auto g = Grad(w, c, s.layout().Size(chunk));
        completed |= s.Push(w, c, chunk, s.Read(chunk).version, g.data(), workers).clock_completed;
      }
      if (completed) table.Finished(w, c);
      s.CloseRounds(table);
    }
  }
}

std::vector<int> InOrder(int64_t) { return {0, 1, 2}; }
std::vector<int> Shuffled(int64_t c) {
  std::vector<int> o = {0, 1, 2};
  std::shuffle(o.begin(), o.end(), std::mt19937(static_cast<uint32_t>(c)));
  return o;
}

void InitAll(ShardState& s) {
  for (uint32_t c : s.owned()) {
    std::vector<float> v(s.layout().Size(c));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * static_cast<float>(i % 17) - 0.05f;
    s.Init(c, v.data());
  }
}

ClockTable Table(int64_t bound, int workers, int64_t start = 0) {
  ClockTable t(bound);
  std::vector<int> live;
  for (int w = 0; w < workers; ++w) live.push_back(w);
  t.SetLive(live, std::vector<int64_t>(workers, start));
  return t;
}

using TempDir = geodesic::testing::ScratchDir;

TEST(CheckpointFormat, RoundTripsAndRefusesEveryDamage) {
  ShardState s(Options(0), cluster::ChunkLayout(10, 4), {0, 1, 2});
  InitAll(s);
  ClockTable t = Table(0, 3);
  RunClocks(s, t, 3, 0, 2, InOrder);
  wire::ShardCheckpoint ck = s.ToCheckpoint(t.MinClock());
  ck.set_job("j");
  EXPECT_EQ(ck.clock(), 2);
  std::string bytes = EncodeCheckpoint(ck);
  auto back = DecodeCheckpoint(bytes, "f");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), ck.SerializeAsString());

  // Every truncation is refused, never misread.
  for (size_t len : {size_t{0}, size_t{10}, size_t{24}, bytes.size() / 2, bytes.size() - 33, bytes.size() - 1}) {
    auto r = DecodeCheckpoint(std::string_view(bytes).substr(0, len), "f");
    ASSERT_FALSE(r.ok()) << len;
    EXPECT_EQ(r.status().code(), Code::kDataLoss);
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status();
  }
  // Any flipped byte after the magic: digest mismatch (or length, if it hits the length).
  for (size_t at : {size_t{16}, size_t{30}, bytes.size() / 2, bytes.size() - 1}) {
    std::string bad = bytes;
    bad[at] ^= 0x20;
    auto r = DecodeCheckpoint(bad, "f");
    ASSERT_FALSE(r.ok()) << at;
    EXPECT_EQ(r.status().code(), Code::kDataLoss);
  }
  std::string bad = bytes;
  bad[0] = 'X';
  EXPECT_NE(DecodeCheckpoint(bad, "f").status().message().find("bad magic"), std::string::npos);
  bad = bytes;
  bad[bytes.size() / 2] ^= 1;
  EXPECT_NE(DecodeCheckpoint(bad, "f").status().message().find("digest mismatch"), std::string::npos);
}

TEST(CheckpointFiles, KeepsTheNewestAndIgnoresStrays) {
  TempDir dir;
  ShardState s(Options(0), cluster::ChunkLayout(8, 4), {0, 1});
  InitAll(s);
  wire::ShardCheckpoint ck = s.ToCheckpoint(0);
  ck.set_job("j");
  for (int64_t clock : {5, 10, 15, 20}) {
    ck.set_clock(clock);
    ASSERT_TRUE(WriteCheckpoint(dir.path(), ck, 3).ok());
  }
  ASSERT_TRUE(WriteFileAtomic(dir.path() + "/server-0/ckpt-000000000099.bin.tmp.1", "x").ok());
  auto files = ListCheckpoints(dir.path(), 0);
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].clock, 20);
  EXPECT_EQ(files[2].clock, 10);
  EXPECT_EQ(files[0].path, CheckpointPath(dir.path(), 0, 20));
  EXPECT_TRUE(ListCheckpoints(dir.path(), 7).empty());
}

// BSP rounds sum in worker order: arrival order changes nothing, to the bit.
TEST(ShardDeterminism, BspResultDoesNotDependOnArrivalOrder) {
  ShardState a(Options(0), cluster::ChunkLayout(1000, 256), {0, 1, 2, 3}),
      b(Options(0), cluster::ChunkLayout(1000, 256), {0, 1, 2, 3});
  InitAll(a);
  InitAll(b);
  ClockTable ta = Table(0, 3), tb = Table(0, 3);
  RunClocks(a, ta, 3, 0, 10, InOrder);
  RunClocks(b, tb, 3, 0, 10, Shuffled);
  EXPECT_TRUE(SameBits(a, b));
}

// A shard restored from a checkpoint continues exactly as the original.
void ExpectResumeIsExact(int64_t bound, const std::string& optimizer) {
  SCOPED_TRACE(optimizer + " bound " + std::to_string(bound));
  const cluster::ChunkLayout layout(777, 100);
  std::vector<uint32_t> owned = {0, 2, 3, 5, 7};
  ShardState orig(Options(bound, optimizer), layout, owned);
  InitAll(orig);
  ClockTable t = Table(bound, 3);
  RunClocks(orig, t, 3, 0, 6, Shuffled);
  auto bytes = EncodeCheckpoint(orig.ToCheckpoint(t.MinClock()));
  auto ck = DecodeCheckpoint(bytes, "ck");
  ASSERT_TRUE(ck.ok());
  EXPECT_EQ(ck->clock(), 6);

  ShardState resumed(Options(bound, optimizer), layout, owned);
  auto took = resumed.Restore(*ck);
  ASSERT_TRUE(took.ok()) << took.status();
  EXPECT_EQ(*took, owned.size());
  EXPECT_TRUE(resumed.AllInitialized());
  EXPECT_TRUE(SameBits(orig, resumed));
  for (int w = 0; w < 3; ++w) EXPECT_EQ(resumed.CompletedClock(w), 5);

  ClockTable t2 = Table(bound, 3, 6);
  RunClocks(orig, t, 3, 6, 12, Shuffled);
  RunClocks(resumed, t2, 3, 6, 12, InOrder);
  if (bound == 0) {
    EXPECT_TRUE(SameBits(orig, resumed));
  }
  // Async results depend on arrival order by design; in order they match.
  ShardState again(Options(bound, optimizer), layout, owned);
  ASSERT_TRUE(again.Restore(*ck).ok());
  ClockTable t3 = Table(bound, 3, 6);
  RunClocks(again, t3, 3, 6, 12, InOrder);
  EXPECT_TRUE(SameBits(resumed, again));
}

TEST(ShardCheckpoint, ResumeIsBitExact) {
  ExpectResumeIsExact(0, "sgd");
  ExpectResumeIsExact(0, "adam");
  ExpectResumeIsExact(3, "sgd");
  ExpectResumeIsExact(3, "adam");
}

TEST(ShardCheckpoint, RestoreRefusesAMismatchAndChangesNothing) {
  ShardState s(Options(0), cluster::ChunkLayout(100, 10), {0, 1});
  InitAll(s);
  wire::ShardCheckpoint ck = s.ToCheckpoint(0);

  ShardState other_layout(Options(0), cluster::ChunkLayout(100, 20), {0, 1});
  EXPECT_EQ(other_layout.Restore(ck).status().code(), Code::kFailedPrecondition);
  EXPECT_FALSE(other_layout.AllInitialized());

  ShardState other_opt(Options(0, "adam"), cluster::ChunkLayout(100, 10), {0, 1});
  auto r = other_opt.Restore(ck);
  EXPECT_NE(r.status().message().find("holds sgd state"), std::string::npos) << r.status();
  EXPECT_FALSE(other_opt.IsInitialized(0));

  // A damaged chunk (values of the wrong size) refuses the whole file.
  wire::ShardCheckpoint bad = ck;
  bad.mutable_chunks(1)->mutable_params()->resize(12);
  ShardState fresh(Options(0), cluster::ChunkLayout(100, 10), {0, 1});
  EXPECT_EQ(fresh.Restore(bad).status().code(), Code::kDataLoss);
  EXPECT_FALSE(fresh.IsInitialized(0));
  EXPECT_FALSE(fresh.IsInitialized(1));
}

// A push a checkpoint already holds is a duplicate, and still completes its
// clock on the restored shard (asynchronous checkpoints can hold half a clock).
TEST(ShardCheckpoint, DuplicatesOfCheckpointedPushesCompleteTheClock) {
  ShardState s(Options(2), cluster::ChunkLayout(20, 10), {0, 1});
  InitAll(s);
  auto g = Grad(0, 0, 10);
  s.Push(0, 0, 0, 0, g.data(), 1);  // chunk 0 of clock 0 only
  wire::ShardCheckpoint ck = s.ToCheckpoint(0);
  ShardState r(Options(2), cluster::ChunkLayout(20, 10), {0, 1});
  ASSERT_TRUE(r.Restore(ck).ok());
  EXPECT_EQ(r.CompletedClock(0), -1);
  auto first = r.Push(0, 0, 0, 0, g.data(), 1);
  EXPECT_EQ(first.result, wire::DUPLICATE);
  EXPECT_FALSE(first.clock_completed);
  auto again = r.Push(0, 0, 0, 0, g.data(), 1);  // a resend: still only one of two chunks
  EXPECT_FALSE(again.clock_completed);
  auto second = r.Push(0, 0, 1, 0, g.data(), 1);
  EXPECT_EQ(second.result, wire::APPLIED);
  EXPECT_TRUE(second.clock_completed);
  EXPECT_EQ(r.CompletedClock(0), 0);
  EXPECT_FALSE(r.Push(0, 0, 1, 0, g.data(), 1).clock_completed);  // resends after completion
}

// Writes checkpoints of `shards` shards at these clocks under `dir`.
void WriteShards(const std::string& dir, int shards, int64_t bound, const std::vector<int64_t>& clocks) {
  const cluster::ChunkLayout layout(60, 10);
  for (int id = 0; id < shards; ++id) {
    std::vector<uint32_t> owned;
    for (uint32_t c = id; c < layout.num_chunks(); c += shards) owned.push_back(c);
    ShardOptions o = Options(bound);
    o.shard_id = id;
    ShardState s(o, layout, owned);
    InitAll(s);
    ClockTable t = Table(bound, 2);
    int64_t at = 0;
    for (int64_t c : clocks) {
      RunClocks(s, t, 2, at, c, InOrder);
      at = c;
      wire::ShardCheckpoint ck = s.ToCheckpoint(t.MinClock());
      ck.set_job("j");
      ASSERT_EQ(ck.clock(), c);
      ASSERT_TRUE(WriteCheckpoint(dir, ck, 5).ok());
    }
  }
}

TEST(PlanResume, BspTakesTheNewestClockEveryShardHas) {
  TempDir dir;
  WriteShards(dir.path(), 2, 0, {4, 8});
  // Server 1 also reached clock 12; server 0 did not.
  {
    auto ck = LoadCheckpoint(CheckpointPath(dir.path(), 1, 8));
    ASSERT_TRUE(ck.ok());
    ck->set_clock(12);
    ASSERT_TRUE(WriteCheckpoint(dir.path(), *ck, 5).ok());
  }
  auto plan = PlanResume(dir.path(), "j", 2, 2, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->clock, 8);
  EXPECT_EQ(plan->files[0], CheckpointPath(dir.path(), 0, 8));
  EXPECT_EQ(plan->files[1], CheckpointPath(dir.path(), 1, 8));
  EXPECT_EQ(plan->worker_clocks, (std::vector<int64_t>{8, 8}));
  auto back = ResumePlan::FromJson(plan->ToJson(), "plan");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->files, plan->files);
  EXPECT_EQ(back->worker_clocks, plan->worker_clocks);
}

TEST(PlanResume, FallsBackFromACorruptNewestCheckpoint) {
  TempDir dir;
  WriteShards(dir.path(), 2, 0, {4, 8});
  // Corrupt server 0's newest file in place, and truncate server 1's.
  const std::string newest0 = CheckpointPath(dir.path(), 0, 8), newest1 = CheckpointPath(dir.path(), 1, 8);
  auto bytes = ReadFile(newest0);
  ASSERT_TRUE(bytes.ok());
  (*bytes)[bytes->size() / 2] ^= 0x55;
  ASSERT_TRUE(WriteFileAtomic(newest0, *bytes).ok());
  std::filesystem::resize_file(newest1, 100);

  auto plan = PlanResume(dir.path(), "j", 2, 2, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->clock, 4);
  ASSERT_EQ(plan->refused.size(), 2u);
  EXPECT_NE(plan->refused[0].find("digest mismatch"), std::string::npos) << plan->refused[0];
  EXPECT_NE(plan->refused[1].find("truncated"), std::string::npos) << plan->refused[1];

  // With every file of a shard bad, there is nothing to resume: a clear error.
  std::filesystem::resize_file(CheckpointPath(dir.path(), 1, 4), 10);
  auto none = PlanResume(dir.path(), "j", 2, 2, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no usable checkpoint of server 1"), std::string::npos) << none.status();
}

TEST(PlanResume, RefusesAnotherJobsCheckpoints) {
  TempDir dir;
  WriteShards(dir.path(), 1, 0, {4});
  auto plan = PlanResume(dir.path(), "other", 1, 2, 0);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("job 'j'"), std::string::npos) << plan.status();
}

TEST(PlanResume, AsyncWorkersStartAfterWhatEveryChunkTook) {
  TempDir dir;
  WriteShards(dir.path(), 2, 3, {5});
  // Server 0 took clock 5 of worker 1 on one chunk before its newer checkpoint.
  auto ck = LoadCheckpoint(CheckpointPath(dir.path(), 0, 5));
  ASSERT_TRUE(ck.ok());
  ck->mutable_chunks(0)->set_last_clock(1, 5);
  ck->set_clock(6);
  ASSERT_TRUE(WriteCheckpoint(dir.path(), *ck, 5).ok());
  auto plan = PlanResume(dir.path(), "j", 2, 2, 3);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->clocks, (std::vector<int64_t>{6, 5}));
  EXPECT_EQ(plan->clock, 5);
  // Every chunk took clocks 0..4 of both workers: both start at 5; worker
  // 1's resend of clock 5 to chunk 0 is a duplicate there.
  EXPECT_EQ(plan->worker_clocks, (std::vector<int64_t>{5, 5}));
}

}  // namespace
}  // namespace geodesic::server

namespace geodesic::server {
namespace {

// Checkpoints someone changed in the run directory before `geodesic launch
// --resume`: a digest recomputed over NaN values was accepted (the job failed
// at the first pull), over 1e30 values too (it "finished" at chance), a
// symlink to /dev/zero was read without limit (24 GB, then the kernel killed
// the launcher), and a FIFO blocked it until signalled. Each is refused with
// its path and reason, and the planner falls back to the older file.
TEST(PlanResume, PoisonedAndNonRegularCheckpointsAreRefusedWithTheReason) {
  const std::vector<std::pair<std::string, std::function<void(const std::string&)>>> poisons = {
      {"not finite",
       [](const std::string& path) {
         auto ck = LoadCheckpoint(path);
         ASSERT_TRUE(ck.ok());
         float nan = std::numeric_limits<float>::quiet_NaN();
         std::memcpy(ck->mutable_chunks(0)->mutable_params()->data() + 4, &nan, 4);
         ASSERT_TRUE(WriteFileAtomic(path, EncodeCheckpoint(*ck)).ok());  // with a digest that matches
       }},
      {"beyond +-1e18",
       [](const std::string& path) {
         auto ck = LoadCheckpoint(path);
         ASSERT_TRUE(ck.ok());
         std::vector<float> big(ck->chunks(1).num_elems(), 1e30f);
         ck->mutable_chunks(1)->set_params(big.data(), big.size() * 4);
         ASSERT_TRUE(WriteFileAtomic(path, EncodeCheckpoint(*ck)).ok());
       }},
      {"optimizer state holds non-finite",
       [](const std::string& path) {
         auto ck = LoadCheckpoint(path);
         ASSERT_TRUE(ck.ok() && ck->chunks(0).optimizer_arrays_size() > 0);
         float inf = std::numeric_limits<float>::infinity();
         std::memcpy(ck->mutable_chunks(0)->mutable_optimizer_arrays(0)->data(), &inf, 4);
         ASSERT_TRUE(WriteFileAtomic(path, EncodeCheckpoint(*ck)).ok());
       }},
      {"is not a regular file",
       [](const std::string& path) {
         std::filesystem::remove(path);
         std::filesystem::create_symlink("/dev/zero", path);
       }},
      {"is not a regular file",
       [](const std::string& path) {
         std::filesystem::remove(path);
         ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);  // with no writer: an open would block
       }},
      {"more than the",
       [](const std::string& path) {
         std::filesystem::resize_file(path, (uint64_t{2} << 30) + 4096);  // sparse: nothing is written
       }},
  };
  for (const auto& [why, poison] : poisons) {
    TempDir dir;
    WriteShards(dir.path(), 2, 0, {4, 8});  // momentum SGD: optimizer state too
    const std::string newest = CheckpointPath(dir.path(), 0, 8);
    poison(newest);
    auto plan = PlanResume(dir.path(), "j", 2, 2, 0);
    ASSERT_TRUE(plan.ok()) << why << ": " << plan.status();
    EXPECT_EQ(plan->clock, 4) << why;
    ASSERT_EQ(plan->refused.size(), 1u) << why;
    EXPECT_NE(plan->refused[0].find(newest), std::string::npos) << plan->refused[0];
    EXPECT_NE(plan->refused[0].find(why), std::string::npos) << plan->refused[0];
    // A shard started on it directly refuses it the same way.
    auto direct = LoadCheckpoint(newest);
    ASSERT_FALSE(direct.ok()) << why;
    EXPECT_NE(direct.status().message().find(why), std::string::npos) << direct.status();
  }
}

}  // namespace
}  // namespace geodesic::server
