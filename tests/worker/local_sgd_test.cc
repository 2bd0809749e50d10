#include "worker/local_sgd.h"

#include <gtest/gtest.h>

#include "server/optimizer.h"

namespace geodesic::worker {
namespace {

JobSpec LocalJob(double momentum, double weight_decay) {
  JobSpec job;
  job.training.local_steps = 4;
  job.training.staleness_bound = 0;
  job.optimizer.lr = 0.1;
  job.optimizer.momentum = momentum;
  job.optimizer.weight_decay = weight_decay;
  return job;
}

// The inner optimizer (LibTorch's own) against the shard's optimizer of the
// same spec, which tests/server/optimizer_test.cc checks against LibTorch:
// so local_steps = 1 and > 1 train alike, with any optimizer.
void ExpectLocalStepsMatchTheShard(const JobSpec& job) {
  torch::manual_seed(7);
  torch::Tensor params = torch::randn({257});
  std::vector<float> expect(params.data_ptr<float>(), params.data_ptr<float>() + params.numel());
  auto shard = server::MakeChunkOptimizer(job.optimizer, expect.size());
  LocalRounds rounds(job, params);
  for (int k = 0; k < 5; ++k) {
    torch::Tensor g = torch::randn({257});
    const double factor = 1.0 - 0.1 * k;  // a schedule's factor reaches both
    rounds.Step(g, factor);
    shard->Step(expect.data(), expect.data(), g.data_ptr<float>(), expect.size(), 1.0f, static_cast<float>(factor));
  }
  for (size_t i = 0; i < expect.size(); ++i) ASSERT_NEAR(params[i].item<float>(), expect[i], 1e-5) << i;
}

TEST(LocalRoundsTest, ALocalStepIsTheShardsStep) {
  for (double momentum : {0.0, 0.9}) {
    SCOPED_TRACE("sgd, momentum " + std::to_string(momentum));
    ExpectLocalStepsMatchTheShard(LocalJob(momentum, 0.01));
  }
  JobSpec nesterov = LocalJob(0.9, 0.01);
  nesterov.optimizer.nesterov = true;
  SCOPED_TRACE("nesterov");
  ExpectLocalStepsMatchTheShard(nesterov);
  for (OptimizerKind kind : {OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    SCOPED_TRACE(ToString(kind));
    JobSpec job = LocalJob(0, 0.05);
    job.optimizer.name = kind;
    job.optimizer.lr = 0.01;
    ExpectLocalStepsMatchTheShard(job);
  }
}

TEST(LocalRoundsTest, ARoundPushesItsProgressAndRestartsFromTheAverage) {
  JobSpec job = LocalJob(0.9, 0);
  torch::Tensor params = torch::zeros({8});
  LocalRounds rounds(job, params);
  rounds.global().fill_(1.0f);
  rounds.Restart();
  EXPECT_TRUE(torch::equal(params, torch::ones({8})));
  rounds.Step(torch::ones({8}), 1.0);  // params 0.9
  rounds.Step(torch::ones({8}), 1.0);  // velocity 1.9, params 0.71
  torch::Tensor push = rounds.Finish(false);
  EXPECT_TRUE(torch::allclose(push, torch::full({8}, 0.29f)));    // base - params: the "gradient" of the round
  EXPECT_TRUE(torch::allclose(params, torch::full({8}, 0.71f)));  // unmerged: the model is kept
  // Without overlap the next round starts from the pulled average.
  rounds.global().fill_(0.5f);
  rounds.Restart();
  EXPECT_TRUE(torch::equal(params, torch::full({8}, 0.5f)));
  EXPECT_TRUE(torch::equal(rounds.Finish(false), torch::zeros({8})));  // no step: nothing to push
}

// Overlapped rounds, plain SGD (lr 0.1): round 0 takes one step and is
// pushed while round 1 starts from the local model; round 1 takes one step
// (params -0.3) and then round 0's average, -0.05, arrives (the others
// moved less).
class OverlappedRoundsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rounds.Restart();                                                            // global 0
    rounds.Step(torch::ones({4}), 1.0);                                          // round 0: params -0.1
    EXPECT_TRUE(torch::allclose(rounds.Finish(false), torch::full({4}, 0.1f)));  // pushed; round 1 starts
    rounds.Step(torch::full({4}, 2.0f), 1.0);                                    // round 1: -0.3
    rounds.global().fill_(-0.05f);
  }
  JobSpec job = LocalJob(0, 0);
  torch::Tensor params = torch::zeros({4});
  LocalRounds rounds{job, params};
};

TEST_F(OverlappedRoundsTest, AtTheRoundsEndTheModelKeepsItsProgressOnTheLateAverage) {
  torch::Tensor second = rounds.Finish(true);
  // Pushed: round 1's own progress only, not round 0's again.
  EXPECT_TRUE(torch::allclose(second, torch::full({4}, 0.2f)));
  // The model: the average plus the progress made since it was asked for.
  EXPECT_TRUE(torch::allclose(params, torch::full({4}, -0.25f)));
  // And the next round's progress is measured from there.
  rounds.Step(torch::ones({4}), 1.0);
  EXPECT_TRUE(torch::allclose(rounds.Finish(false), torch::full({4}, 0.1f)));
}

// overlap_steps: the average folded in mid-round. The model takes it
// under the progress made so far, and the round's push still carries every
// step of the round (before and after the merge), not only those after.
TEST_F(OverlappedRoundsTest, AMidRoundMergeKeepsTheWholeRoundInItsPush) {
  rounds.MergeNow();
  EXPECT_TRUE(torch::allclose(params, torch::full({4}, -0.25f)));  // the average plus the progress since
  rounds.Step(torch::ones({4}), 1.0);                              // round 1, second step: -0.35
  // Round 1 pushes both of its steps (0.2 + 0.1), measured from the model
  // it would have had with the average in hand from the start.
  EXPECT_TRUE(torch::allclose(rounds.Finish(false), torch::full({4}, 0.3f)));
  EXPECT_TRUE(torch::allclose(params, torch::full({4}, -0.35f)));
}

// training.fragments: two fragments of a 6-value model, plain SGD (lr 0.1),
// gradient 1 every step. Each clock pushes one fragment's progress over its
// own outer round (two clocks) and leaves the other's model and base alone.
TEST(LocalRoundsTest, FragmentsPushTheirOwnRoundAndRestartAlone) {
  JobSpec job = LocalJob(0, 0);
  torch::Tensor params = torch::zeros({6});
  LocalRounds rounds(job, params);
  const LocalRounds::Span first{0, 4}, second{4, 2};
  rounds.Restart();
  rounds.Step(torch::ones({6}), 1.0);  // clock 0: -0.1 everywhere
  // The push buffer outside the span is left as it is (it is not sent).
  torch::Tensor push = torch::full({6}, 7.0f);
  rounds.Finish(first, push);
  EXPECT_TRUE(torch::allclose(push, torch::tensor({0.1f, 0.1f, 0.1f, 0.1f, 7.0f, 7.0f})));
  rounds.global().narrow(0, 0, 4).fill_(-0.05f);  // fragment 0's average
  rounds.Restart(first);
  EXPECT_TRUE(torch::allclose(params, torch::tensor({-0.05f, -0.05f, -0.05f, -0.05f, -0.1f, -0.1f})));
  rounds.Step(torch::ones({6}), 1.0);  // clock 1
  push.zero_();
  rounds.Finish(second, push);
  // Fragment 1 pushes both clocks' steps; fragment 0 nothing.
  EXPECT_TRUE(torch::allclose(push, torch::tensor({0.0f, 0.0f, 0.0f, 0.0f, 0.2f, 0.2f})));
  // Fragment 0's progress since its restart is still its to push.
  rounds.Step(torch::ones({6}), 1.0);  // clock 2
  push.zero_();
  rounds.Finish(first, push);
  EXPECT_TRUE(torch::allclose(push, torch::tensor({0.2f, 0.2f, 0.2f, 0.2f, 0.0f, 0.0f})));
  // An overlapped merge folds fragment 1's average (-0.3) in under the one
  // step taken since its push, and the next push of fragment 1 carries it.
  rounds.global().narrow(0, 4, 2).fill_(-0.3f);
  rounds.MergeNow(second);
  EXPECT_TRUE(torch::allclose(params.narrow(0, 4, 2), torch::full({2}, -0.4f)));
  EXPECT_TRUE(torch::allclose(params.narrow(0, 0, 4), torch::full({4}, -0.25f)));  // untouched
  rounds.Finish(second, push);
  EXPECT_TRUE(torch::allclose(push.narrow(0, 4, 2), torch::full({2}, 0.1f)));
}

}  // namespace
}  // namespace geodesic::worker
