// The evaluator's /metrics (worker/worker_metrics.h): what it says before and
// after the final evaluation, for classifiers and models with their own loss.
#include "worker/worker_metrics.h"

#include <gtest/gtest.h>

#include <map>

namespace geodesic::worker {
namespace {

std::map<std::string, double> Gauges(const nlohmann::json& result) {
  JobSpec job;
  job.name = "t";
  job.regions.push_back({.name = "a"});
  transport::TrafficCounters counters;
  std::map<std::string, double> out;
  for (const auto& f : EvaluatorMetrics(job, counters, result))
    if (!f.metric.empty()) out[f.name] = f.metric[0].gauge.value;
  return out;
}

TEST(EvaluatorMetricsTest, ReportsLossAndPerplexityOrAccuracyOnceEvaluated) {
  auto before = Gauges(nlohmann::json::object());
  EXPECT_EQ(before["geodesic_evaluated"], 0);
  EXPECT_EQ(before.count("geodesic_test_loss"), 0u);
  auto lm = Gauges({{"test_loss", 2.25}, {"test_perplexity", 9.4877}});
  EXPECT_EQ(lm["geodesic_evaluated"], 1);
  EXPECT_EQ(lm["geodesic_test_loss"], 2.25);
  EXPECT_EQ(lm["geodesic_test_perplexity"], 9.4877);
  EXPECT_EQ(lm.count("geodesic_test_accuracy"), 0u);
  auto classifier = Gauges({{"test_loss", 0.31}, {"test_accuracy", 0.89}});
  EXPECT_EQ(classifier["geodesic_test_accuracy"], 0.89);
  EXPECT_EQ(classifier.count("geodesic_test_perplexity"), 0u);
}

}  // namespace
}  // namespace geodesic::worker
