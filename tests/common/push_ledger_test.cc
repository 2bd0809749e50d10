#include "common/push_ledger.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/files.h"
#include "tests/scratch_dir.h"

namespace geodesic {
namespace {

using testing::ScratchDir;

TEST(PushLedgerTest, CountsReachTheFileAsTheyAreMade) {
  const ScratchDir dir("push_ledger");
  const std::string path = dir / "w.ledger";
  auto ledger = PushLedger::Create(path);
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  ledger->AddPushed(10);
  ledger->AddAcknowledged(6);
  ledger->AddDropped(1);
  ledger->AddRefused(2);
  EXPECT_EQ(ledger->counts().InFlight(), 1u);
  // Read while the writer still has it mapped: no flush, no close needed.
  auto read = PushLedger::Read(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->pushed, 10u);
  EXPECT_EQ(read->acknowledged, 6u);
  EXPECT_EQ(read->dropped, 1u);
  EXPECT_EQ(read->refused, 2u);
}

// The reason the ledger exists: SIGKILL gives a process no chance to write
// anything, yet its counts up to the kill are there afterwards.
TEST(PushLedgerTest, ACountSurvivesTheSigkillOfItsProcess) {
  const ScratchDir dir("push_ledger");
  const std::string path = dir / "killed.ledger";
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto ledger = PushLedger::Create(path);
    if (!ledger.ok()) ::_exit(2);
    for (int i = 0; i < 1000; ++i) ledger->AddPushed(3);
    for (int i = 0; i < 997; ++i) ledger->AddAcknowledged(3);
    char c = 'x';
    (void)!::write(ready[1], &c, 1);
    for (int i = 0; i < 600; ++i) ::usleep(10'000);  // bounded: killed long before
    ::_exit(3);
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL);
  auto read = PushLedger::Read(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->pushed, 3000u);
  EXPECT_EQ(read->acknowledged, 2991u);
  EXPECT_EQ(read->InFlight(), 9u);
}

TEST(PushLedgerTest, AFileThatIsNotALedgerIsRefusedWithItsReason) {
  const ScratchDir scratch("push_ledger");
  const std::string dir = scratch.path();
  ASSERT_TRUE(WriteFileAtomic(dir + "/short.ledger", "GDLEDGR1").ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/magic.ledger", std::string(40, 'x')).ok());
  for (const char* f : {"/short.ledger", "/magic.ledger"}) {
    auto r = PushLedger::Read(dir + f);
    ASSERT_FALSE(r.ok()) << f;
    EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status();
    EXPECT_NE(r.status().message().find("not a push ledger"), std::string::npos) << r.status();
  }
  EXPECT_EQ(PushLedger::Read(dir + "/missing.ledger").status().code(), Code::kNotFound);
}

TEST(PushLedgerTest, EachProcessGetsItsOwnFileBesideItsStats) {
  const std::string p = PushLedgerPath("/run/stats/worker-3.json");
  EXPECT_EQ(p, "/run/stats/worker-3." + std::to_string(::getpid()) + ".ledger");
  // A predecessor with our pid (another pid namespace) keeps its file.
  const ScratchDir scratch("push_ledger");
  const std::string dir = scratch.path();
  const std::string first = PushLedgerPath(dir + "/worker-1.json");
  ASSERT_TRUE(PushLedger::Create(first).ok());
  EXPECT_EQ(PushLedgerPath(dir + "/worker-1.json"), dir + "/worker-1." + std::to_string(::getpid()) + "-2.ledger");
}

}  // namespace
}  // namespace geodesic
