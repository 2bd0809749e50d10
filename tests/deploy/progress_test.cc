#include "deploy/progress.h"

#include <gtest/gtest.h>

namespace geodesic::deploy {
namespace {

wire::StatusReply Reply(const std::vector<std::pair<int64_t, int64_t>>& steps_and_targets) {
  wire::StatusReply st;
  for (const auto& [steps, target] : steps_and_targets) {
    auto* w = st.add_workers();
    w->set_live(true);
    w->mutable_progress()->set_steps(steps);
    w->mutable_progress()->set_target_steps(target);
  }
  return st;
}

// The line said "step 0/704" while only one of four workers had reported,
// then "step 397/2816": the total is the same from the first line on.
TEST(RenderProgressTest, TheTotalIsTheSameBeforeEveryWorkerReported) {
  EXPECT_NE(RenderProgress(Reply({{0, 704}, {0, 0}, {0, 0}, {0, 0}}), 0).find("step 0/2816 (0%)"), std::string::npos)
      << RenderProgress(Reply({{0, 704}, {0, 0}, {0, 0}, {0, 0}}), 0);
  EXPECT_NE(RenderProgress(Reply({{100, 704}, {100, 704}, {97, 704}, {100, 704}}), 0).find("step 397/2816 (14%)"),
            std::string::npos);
  // Federated executors count rounds: their mean against one executor's target.
  EXPECT_NE(RenderProgress(Reply({{10, 50}, {0, 0}}), 0, /*federated=*/true).find("round 5/50"), std::string::npos)
      << RenderProgress(Reply({{10, 50}, {0, 0}}), 0, true);
}

// Off a terminal (here: captured stdout) the line is printed at most every
// `every`, and not again while it says the same: the end of training
// repeated its last line every 5 s while the evaluator worked.
TEST(ProgressLineTest, OffATerminalAnUnchangedLineIsNotPrintedAgain) {
  ::testing::internal::CaptureStdout();
  ProgressLine line(/*quiet=*/false, std::chrono::milliseconds(0));
  line.Show("step 10/20");
  line.Show("step 10/20");
  line.Show("step 11/20");
  line.Say("an event");
  line.Show("step 11/20");
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "step 10/20\nstep 11/20\nan event\n");
  ::testing::internal::CaptureStdout();
  ProgressLine slow(/*quiet=*/false, std::chrono::hours(1));
  slow.Show("step 1/20");
  slow.Show("step 2/20");  // within the hour: not printed
  ProgressLine quiet(/*quiet=*/true);
  quiet.Show("step 3/20");
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "step 1/20\n");
}

}  // namespace
}  // namespace geodesic::deploy
