// A federated executor's rounds: what it pushes, checked against its
// clients trained one by one, and SCAFFOLD's step through the shards'
// strategy, by hand.
#include "worker/federated_rounds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "common/wire_limits.h"
#include "server/strategy.h"
#include "tests/worker/band_images.h"
#include "worker/examples.h"
#include "worker/federated/buffered.h"
#include "worker/federated/privacy.h"

namespace geodesic::worker {
namespace {

JobSpec ScaffoldJob() {
  JobSpec job;
  job.seed = 7;
  job.model.name = ModelKind::kMlp;
  job.model.mlp_hidden = {16};
  job.data.batch_size = 32;
  job.training.outer_lr = 0.5;  // η ≠ 1: the control push is scaled by 1 / η
  job.federated.clients = 4;
  job.federated.per_round = 2;
  job.federated.local_steps = 3;
  job.federated.local_lr = 0.1;
  job.federated.client_eval_samples = 0;
  job.federated.strategy = FederatedStrategy::kScaffold;
  return job;
}

// The clients of a round trained directly by a second executor: their
// updates and new controls, from `state` = [x; c] and their c_i.
struct Expected {
  std::vector<double> model_sum, control_sum;
  double weight = 0;
};

Expected TrainDirectly(const JobSpec& job, const ImageSet& train, const Partition& parts,
                       const std::vector<int64_t>& clients, int64_t round, const std::vector<float>& state,
                       std::vector<std::vector<float>>& controls) {
  const size_t n = state.size() / 2;
  auto exec = std::move(ClientExecutor::Create(job.model, job.seed, ImageExamples(train), ShapeOf(train),
                                               job.data.batch_size, {.lr = job.federated.local_lr}))
                  .value();
  Expected e{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  for (int64_t k : clients) {
    std::vector<float>& ci = controls[k];
    std::vector<float> correction(n);
    for (size_t j = 0; j < n; ++j) correction[j] = state[n + j] - ci[j];
    ClientOutcome o = std::move(exec->Train(state.data(), {.client = k,
                                                           .round = round,
                                                           .indices = &parts[k],
                                                           .local_steps = job.federated.local_steps,
                                                           .correction = correction.data(),
                                                           .server_control = state.data() + n}))
                          .value();
    EXPECT_TRUE(o.finite);
    for (size_t j = 0; j < n; ++j) {
      e.model_sum[j] += static_cast<double>(o.samples) * o.delta[j];
      e.control_sum[j] += o.control_delta[j];
      ci[j] += o.control_delta[j];
    }
    e.weight += static_cast<double>(o.samples);
  }
  return e;
}

// Two SCAFFOLD rounds on one executor. Each round's push is
// [-(Σ w_i Δ_i)/W ; -(Σ Δc_i)/(η N)], and the shards' strategy turns it
// into x += η Σ w_i Δ_i / W and c += (|S|/N) mean(Δc_i). In the second
// round the clients of the first train with their own c_i.
TEST(FederatedRoundsTest, ScaffoldStepsTheModelAndTheControlVariateByHand) {
  const JobSpec job = ScaffoldJob();
  const ImageSet train = Bands();
  auto rounds = std::move(FederatedRounds::Create(job, 0, ClientSplitOf(job, train).value())).value();
  const int64_t n = rounds->num_params();
  ASSERT_EQ(rounds->shard_values(), 2 * n);
  const Partition parts = std::move(PartitionSamples(train.labels, 10, 4, job.data.partition, job.seed, 32)).value();
  auto spec = server::FederatedStrategyOf(job);
  ASSERT_TRUE(spec.has_value());
  auto shards = server::MakeStrategyOptimizer(*spec, 2 * n);

  std::vector<float> state(2 * n, 0.0f);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0, 0.05f);
  for (int64_t j = 0; j < n; ++j) state[j] = normal(rng);
  std::vector<std::vector<float>> controls(4, std::vector<float>(n, 0.0f));
  bool some_client_twice = false;
  std::vector<int64_t> before;
  for (int64_t round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<float> push(2 * n);
    RoundReport report = std::move(rounds->Run(round, state.data(), push.data())).value();
    ASSERT_EQ(report.trained, 2);
    for (int64_t k : report.clients) some_client_twice |= std::find(before.begin(), before.end(), k) != before.end();
    before.insert(before.end(), report.clients.begin(), report.clients.end());
    const Expected e = TrainDirectly(job, train, parts, report.clients, round, state, controls);
    std::vector<float> next(2 * n);
    shards->Step(state.data(), next.data(), push.data(), 2 * n, /*grad_scale=*/1.0f, /*lr_scale=*/1.0f);
    for (int64_t j = 0; j < n; ++j) {
      const double x = state[j] + 0.5 * e.model_sum[j] / e.weight;
      const double c = state[n + j] + (2.0 / 4.0) * (e.control_sum[j] / 2.0);
      ASSERT_NEAR(next[j], x, 1e-6 + 1e-5 * std::abs(x)) << j;
      ASSERT_NEAR(next[n + j], c, 1e-5 + 1e-4 * std::abs(c)) << j;
    }
    state = next;
  }
  EXPECT_TRUE(some_client_twice);  // a client came back, with its own c_i
  EXPECT_EQ(rounds->controls_kept(), std::set<int64_t>(before.begin(), before.end()).size());
}

// Two executors under SCAFFOLD: each client trains on the executor that
// keeps its control variate, k mod 2, whatever its work.
TEST(FederatedRoundsTest, ScaffoldClientsTrainWhereTheirControlIs) {
  JobSpec job = ScaffoldJob();
  job.regions = {{.name = "a", .servers = 1, .workers = 2}};
  job.federated.per_round = 4;
  const ImageSet train = Bands();
  for (int executor = 0; executor < 2; ++executor) {
    auto rounds = std::move(FederatedRounds::Create(job, executor, ClientSplitOf(job, train).value())).value();
    std::vector<float> state(rounds->shard_values(), 0.01f), push(rounds->shard_values());
    RoundReport report = std::move(rounds->Run(0, state.data(), push.data())).value();
    EXPECT_EQ(report.clients, (executor == 0 ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{1, 3}));
  }
}

// FedBuff: each step's K updates train from the model their client
// started from, and the push is -(1/K) Σ s_i Δ_i with s_i the staleness
// weight; checked against the schedule and the clients trained directly.
TEST(FederatedRoundsTest, FedBuffTrainsEachUpdateFromItsVersionAndWeighsItsStaleness) {
  JobSpec job = ScaffoldJob();
  job.federated.strategy = FederatedStrategy::kFedBuff;
  job.federated.clients = 8;
  job.federated.per_round = 2;
  job.federated.concurrency = 4;
  job.federated.max_staleness = 3;
  job.federated.device_slow_fraction = 0.3;
  job.federated.device_compute_sigma = 0.5;
  const ImageSet train = Bands();
  auto rounds = std::move(FederatedRounds::Create(job, 0, ClientSplitOf(job, train).value())).value();
  const int64_t n = rounds->num_params();
  ASSERT_EQ(rounds->shard_values(), n);
  const Partition parts = std::move(PartitionSamples(train.labels, 10, 8, job.data.partition, job.seed, 32)).value();
  // The schedule the executor follows, built here from the same profiles.
  const federated::ProfileSpec profiles{.step_seconds = job.federated.device_step_s,
                                        .compute_sigma = 0.5,
                                        .slow_fraction = 0.3,
                                        .slow_factor = job.federated.device_slow_factor};
  std::vector<double> seconds;
  for (int64_t c = 0; c < 8; ++c)
    seconds.push_back(federated::ClientSeconds(federated::DrawProfile(profiles, c, job.seed), 3, 4.0 * n, 4.0 * n));
  federated::BufferedSchedule schedule({.concurrency = 4, .buffer = 2, .max_staleness = 3}, profiles, seconds,
                                       job.seed);
  auto direct = std::move(ClientExecutor::Create(job.model, job.seed, ImageExamples(train), ShapeOf(train), 32,
                                                 {.lr = job.federated.local_lr}))
                    .value();

  std::vector<std::vector<float>> versions;
  std::vector<float> x(n);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0, 0.05f);
  for (float& v : x) v = normal(rng);
  int64_t stale_updates = 0;
  for (int64_t round = 0; round < 8; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    versions.push_back(x);
    std::vector<float> push(n);
    RoundReport report = std::move(rounds->Run(round, x.data(), push.data())).value();
    const federated::BufferedStep step = schedule.Next();
    ASSERT_EQ(report.trained, 2);
    EXPECT_EQ(report.staleness_sum, step.staleness_sum);
    EXPECT_DOUBLE_EQ(report.seconds, step.seconds);
    std::vector<double> sum(n, 0.0);
    for (const federated::Arrival& a : step.accepted) {
      ClientOutcome o =
          std::move(
              direct->Train(versions[a.version].data(),
                            {.client = a.client, .round = a.start, .indices = &parts[a.client], .local_steps = 3}))
              .value();
      const double s = 1.0 / std::sqrt(1.0 + static_cast<double>(round - a.version));
      for (int64_t j = 0; j < n; ++j) sum[j] += s * o.delta[j];
      stale_updates += round > a.version;
    }
    for (int64_t j = 0; j < n; ++j) ASSERT_NEAR(push[j], -sum[j] / 2.0, 1e-6) << j;
    for (int64_t j = 0; j < n; ++j) x[j] -= job.training.outer_lr * push[j];  // the shards' FedAvg step
  }
  EXPECT_GT(stale_updates, 0);
}

// Per-client uplink codecs: clients below slow_uplink_mbit send with the
// slow tier's codec, the others with uplink_codec; the bytes are the
// codecs', each lossy client keeps its residual, and the push moves from
// the fp32 one by no more than the codecs' error.
TEST(FederatedRoundsTest, UplinkCodecsPerClientShrinkTheBytesAndKeepResiduals) {
  JobSpec job = ScaffoldJob();
  job.federated.strategy = FederatedStrategy::kFedAvg;
  job.federated.per_round = 4;
  job.federated.device_uplink_sigma = 1.0;
  const ImageSet train = Bands();
  auto plain = std::move(FederatedRounds::Create(job, 0, ClientSplitOf(job, train).value())).value();
  job.federated.uplink_codec = "int8";
  job.federated.slow_uplink_codec = "topk:0.25";
  job.federated.slow_uplink_mbit = 20;  // the median: about half the clients
  auto coded = std::move(FederatedRounds::Create(job, 0, ClientSplitOf(job, train).value())).value();
  const int64_t n = coded->num_params();
  int slow = 0;
  for (int64_t c = 0; c < 4; ++c) {
    const bool below = federated::DrawProfile({.uplink_sigma = 1.0}, c, job.seed).uplink_mbit < 20;
    EXPECT_EQ(coded->UplinkOf(c).codec, below ? wire::TOPK : wire::INT8) << c;
    slow += below;
  }
  ASSERT_GT(slow, 0);
  ASSERT_LT(slow, 4);
  std::vector<float> global(n, 0.01f), a(n), b(n);
  RoundReport fp32 = std::move(plain->Run(0, global.data(), a.data())).value();
  RoundReport report = std::move(coded->Run(0, global.data(), b.data())).value();
  EXPECT_DOUBLE_EQ(fp32.uplink_bytes, 4.0 * 4 * n);
  EXPECT_LT(report.uplink_bytes, (4 - slow) * 1.1 * n + slow * 0.25 * 8.5 * n);
  EXPECT_GT(report.uplink_bytes, (4 - slow) * 1.0 * n + slow * 0.25 * 4 * n);
  EXPECT_EQ(coded->residuals_kept(), 4u);
  double diff = 0, norm = 0;
  for (int64_t j = 0; j < n; ++j) diff += (a[j] - b[j]) * (a[j] - b[j]), norm += a[j] * a[j];
  EXPECT_GT(diff, 0);
  EXPECT_LT(diff, norm);  // top-k drops most of the slow clients' update, not its sign
}

// An update whose norm passes federated.max_update_norm is refused and
// counted; its weight stays in the round's total, so the push is the
// others' weighted sum over the whole round's weight.
TEST(FederatedRoundsTest, UpdatesOverTheNormBoundAreRefusedAndCounted) {
  JobSpec job = ScaffoldJob();
  job.federated.strategy = FederatedStrategy::kFedAvg;
  job.federated.per_round = 4;
  const ImageSet train = Bands();
  const Partition parts = std::move(PartitionSamples(train.labels, 10, 4, job.data.partition, job.seed, 32)).value();
  auto direct = std::move(ClientExecutor::Create(job.model, job.seed, ImageExamples(train), ShapeOf(train), 32,
                                                 {.lr = job.federated.local_lr}))
                    .value();
  const int64_t n = direct->num_params();
  std::vector<float> global(n, 0.01f);
  std::vector<ClientOutcome> outcomes;
  std::vector<double> norms;
  for (int64_t k = 0; k < 4; ++k) {
    outcomes.push_back(
        std::move(direct->Train(global.data(), {.client = k, .round = 0, .indices = &parts[k], .local_steps = 3}))
            .value());
    norms.push_back(federated::L2Norm(outcomes.back().delta.data(), n));
  }
  std::vector<double> sorted = norms;
  std::sort(sorted.begin(), sorted.end());
  job.federated.max_update_norm = (sorted[1] + sorted[2]) / 2;  // two pass, two are refused
  auto rounds = std::move(FederatedRounds::Create(job, 0, ClientSplitOf(job, train).value())).value();
  std::vector<float> push(n);
  RoundReport report = std::move(rounds->Run(0, global.data(), push.data())).value();
  EXPECT_EQ(report.refused, 2);
  EXPECT_EQ(report.trained, 2);
  std::vector<double> sum(n, 0.0);
  double total = 0;
  for (int64_t k = 0; k < 4; ++k) {
    total += static_cast<double>(outcomes[k].samples);
    if (norms[k] > job.federated.max_update_norm) continue;
    for (int64_t j = 0; j < n; ++j) sum[j] += static_cast<double>(outcomes[k].samples) * outcomes[k].delta[j];
  }
  for (int64_t j = 0; j < n; ++j) ASSERT_NEAR(push[j], -sum[j] / total, 1e-6) << j;
}

// A virtual client whose training diverged to finite but huge values (one
// local step at lr 1e25) is refused like a real client's, with no norm
// bound set: the push stays within what a shard accepts (zeros here: every
// client is refused) instead of carrying about 1e23 per value.
TEST(FederatedRoundsTest, DivergedButFiniteVirtualUpdatesAreRefusedSoThePushStaysWithinTheShardsLimit) {
  JobSpec job = ScaffoldJob();
  job.federated.strategy = FederatedStrategy::kFedAvg;
  job.federated.per_round = 4;
  job.federated.local_steps = 1;
  job.federated.local_lr = 1e25;
  const ImageSet train = Bands();
  auto rounds = std::move(FederatedRounds::Create(job, 0, ClientSplitOf(job, train).value())).value();
  const int64_t n = rounds->num_params();
  std::vector<float> global(n, 0.01f), push(n);
  RoundReport report = std::move(rounds->Run(0, global.data(), push.data())).value();
  EXPECT_EQ(report.unusable, 0) << "the updates are finite";
  EXPECT_EQ(report.refused, 4);
  EXPECT_EQ(report.trained, 0);
  for (int64_t j = 0; j < n; ++j) ASSERT_LE(std::fabs(push[j]), kMaxValueMagnitude) << j;
}

}  // namespace
}  // namespace geodesic::worker
