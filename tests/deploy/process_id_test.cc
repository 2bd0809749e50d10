#include "deploy/process_id.h"

#include <gtest/gtest.h>

namespace geodesic::deploy {
namespace {

TEST(ProcessIdTest, NamesAndParsesEveryRole) {
  for (const ProcessId& who :
       {ProcessId::Coordinator(), ProcessId::Server(0), ProcessId::Server(12), ProcessId::Backup(3),
        ProcessId::Worker(7), ProcessId::Evaluator(), ProcessId::Aggregator(2)}) {
    auto back = ProcessId::Parse(who.Name());
    ASSERT_TRUE(back.has_value()) << who.Name();
    EXPECT_EQ(*back, who) << who.Name();
  }
  EXPECT_EQ(ProcessId::Worker(3).Name(), "worker-3");
  EXPECT_EQ(ProcessId::Backup(0).Name(), "backup-0");
  EXPECT_EQ(ProcessId::Aggregator(1).Name(), "aggregator-1");
  EXPECT_EQ(ProcessId::Coordinator().Name(), "coordinator");
  EXPECT_TRUE(ProcessId::Parse("server-4")->is(ProcessRole::kServer));
  EXPECT_EQ(ProcessId::Parse("server-4")->id, 4);
}

TEST(ProcessIdTest, NamesNoProcessHasAreRefused) {
  for (const char* name : {"", "worker", "worker-", "worker-x", "worker-01", "worker--1", "worker-1a", "shard-1",
                           "coordinator-0", "Evaluator", "worker-9999999999"})
    EXPECT_FALSE(ProcessId::Parse(name).has_value()) << name;
}

}  // namespace
}  // namespace geodesic::deploy
