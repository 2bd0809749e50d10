#include "worker/evaluator.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <thread>

#include "cluster/member_client.h"
#include "common/files.h"
#include "common/log.h"
#include "common/wait.h"
#include "worker/examples.h"
#include "worker/model.h"
#include "worker/process_options.h"
#include "worker/ps_client.h"
#include "worker/snapshot.h"
#include "worker/worker_metrics.h"
#include "worker/zmq_shard_links.h"

namespace geodesic::worker {
namespace {

// Waits, without a deadline (training takes as long as it takes), until
// every worker is done or dead; reports what it waits for.
Status WaitForTraining(const JobSpec& job, const cluster::MemberClient& member, const Clock* clock,
                       const std::atomic<bool>* stop) {
  const int workers = job.NumWorkers();
  WaitReporter report(clock, std::chrono::seconds(30));
  while (!stop->load()) {
    cluster::MembershipView v = member.view();
    // Elastic jobs: ids that never joined are neither; the coordinator knows.
    if (v.valid && (v.training_ended || (!job.membership.elastic && v.done + v.dead >= workers))) break;
    if (report.Due()) {
      std::string line = "waiting for training to end: " + std::to_string(v.done) + " of " + std::to_string(workers) +
                         " workers done, " + std::to_string(v.dead) + " dead";
      if (v.seconds_since_reply > job.membership.lease_ms / 1000.0)
        line += "; coordinator silent for " + std::to_string(static_cast<int>(v.seconds_since_reply)) + " s";
      GD_LOG(INFO) << line;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (stop->load()) return Cancelled("stopped before training ended");
  return Status::Ok();
}

// When the snapshot file was written, in Unix seconds (0 if unknown): the
// launcher puts the curve on the job's clock with it (deploy/verdict.h).
double WrittenUnix(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec / 1e9;
}

// The score the curve is drawn and the target reached on: accuracy for
// classifiers (reached at or above eval.target_accuracy); the validation
// loss, negated, for other objectives (reached at or below
// eval.target_loss; without one, never).
struct CurveKey {
  bool accuracy;
  double Of(const EvalScore& e) const { return accuracy ? e.accuracy.value_or(0) : -e.loss; }
  double Target(const EvalSpec& eval) const {
    if (accuracy) return eval.target_accuracy;
    return eval.target_loss > 0 ? -eval.target_loss : std::numeric_limits<double>::infinity();
  }
};

// The snapshots in `snapshot_dir` (all, or as many as eval.curve_points
// picks: ScoreCurve), scored into result's curves: accuracy_curve
// (classifiers) and loss_curve, entries [seconds, step, value].
Status EvaluateSnapshots(const JobSpec& job, const std::string& snapshot_dir, FlatModel& model, const Examples& test,
                         const std::atomic<bool>* stop, nlohmann::json* result) {
  const std::vector<SnapshotInfo> snaps = ListSnapshots(snapshot_dir);
  const CurveKey key{model.objective().classifies()};
  std::vector<float> values;
  std::map<size_t, EvalScore> scores;
  auto score = [&](size_t i) -> std::optional<double> {
    if (stop->load()) return std::nullopt;
    Status s = ReadSnapshot(snaps[i].path, model.num_params(), &values);
    if (!s.ok()) {
      GD_LOG(WARNING) << s;
      return std::nullopt;
    }
    std::memcpy(model.params().data_ptr<float>(), values.data(), values.size() * sizeof(float));
    scores[i] = ScoreOn(model, test.x, test.y, job.eval.batch);
    return key.Of(scores[i]);
  };
  // A federated job's rounds table wants every snapshot it asked for.
  const int64_t points = job.federated.clients > 0 && job.federated.eval_every > 0 ? 0 : job.eval.curve_points;
  const double target = key.Target(job.eval);
  const auto scored = ScoreCurve(snaps.size(), points, target, score);
  if (stop->load()) return Cancelled("stopped while evaluating snapshots");
  nlohmann::json accuracy = nlohmann::json::array(), loss = nlohmann::json::array();
  nlohmann::json written = nlohmann::json::array();
  std::optional<double> to_target;
  for (const auto& [i, v] : scored) {
    if (key.accuracy) accuracy.push_back({snaps[i].seconds, snaps[i].step, v});
    loss.push_back({snaps[i].seconds, snaps[i].step, scores[i].loss});
    written.push_back(WrittenUnix(snaps[i].path));
    if (!to_target && v >= target) to_target = snaps[i].seconds;
  }
  if (key.accuracy) {
    (*result)["accuracy_curve"] = accuracy;
    (*result)["target_accuracy"] = job.eval.target_accuracy;
  } else if (job.eval.target_loss > 0) {
    (*result)["target_loss"] = job.eval.target_loss;
  }
  (*result)["loss_curve"] = loss;
  (*result)["curve_unix"] = written;
  (*result)["snapshots"] = snaps.size();
  (*result)["seconds_to_target"] = to_target ? nlohmann::json(*to_target) : nlohmann::json(nullptr);
  return Status::Ok();
}

}  // namespace

Status EvaluateOnTestSet(const JobSpec& job, const SplitExamples& split, const std::string& snapshot_dir,
                         FlatModel& model, const Clock* clock, const std::atomic<bool>* stop, nlohmann::json* result) {
  const Examples test = job.eval.test_samples > 0 ? split.examples.Head(job.eval.test_samples) : split.examples;
  torch::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  if (model.num_buffer_values() > 0) {
    // Buffers are recomputed from the head of the training set (docs/models.md).
    GD_ASSIGN_OR_RETURN(const SplitExamples head, LoadExamples(job.data, "train", job.eval.buffer_samples));
    model.SetBufferImages(head.examples.x);
    (*result)["buffers"] = {
        {"values", model.num_buffer_values()},
        {"policy", "recomputed before each evaluation from the first " + std::to_string(head.examples.size()) +
                       " training samples (PreciseBN); not trained, not sent"}};
  }
  TimePoint e0 = clock->Now();
  const EvalScore final_score = ScoreOn(model, test.x, test.y, job.eval.batch);
  (*result)["test_loss"] = final_score.loss;
  (*result)["test_samples"] = test.size();
  std::string line = "final model: test loss " + std::to_string(final_score.loss);
  if (final_score.accuracy) {
    (*result)["test_accuracy"] = *final_score.accuracy;
    line += ", accuracy " + std::to_string(*final_score.accuracy);
  }
  if (test.tokens()) {
    (*result)["test_perplexity"] = std::exp(final_score.loss);
    (*result)["test_tokens"] = test.y.numel();
    line += ", perplexity " + std::to_string(std::exp(final_score.loss));
  }
  GD_LOG(INFO) << line << " on " << test.size() << (test.tokens() ? " windows" : " samples");
  GD_RETURN_IF_ERROR(EvaluateSnapshots(job, snapshot_dir, model, test, stop, result));
  GD_LOG(INFO) << "evaluated " << (*result)["loss_curve"].size() << " of " << (*result)["snapshots"] << " snapshots in "
               << Seconds(clock->Now() - e0) << " s";
  return Status::Ok();
}

namespace {

// The evaluation itself; `metrics` gets its traffic and, at the end, the accuracy.
Status Evaluate(const EvaluatorOptions& options, zmq::context_t& ctx, const std::atomic<bool>* stop,
                transport::ProcessMetrics& metrics, std::atomic<bool>& joined) {
  const JobSpec& job = options.job;
  const Clock* clock = RealClock::Get();
  // The test set, read now: a missing or malformed one fails before training, not after it.
  SplitExamples test;  // synthetic: none needed
  if (job.model.name != ModelKind::kSynthetic) {
    GD_ASSIGN_OR_RETURN(test, LoadExamples(job.data, "test"));
  }
  GD_ASSIGN_OR_RETURN(auto model, FlatModel::Create(job.model, job.seed, torch::kCPU, test.shape));
  transport::TrafficCounters counters;
  cluster::MemberClient member(
      ctx, MemberOptionsFor(job, wire::EVALUATOR, 0, options.coordinator, model->signature(), options.credentials),
      &counters, clock);
  GD_ASSIGN_OR_RETURN(wire::RegisterReply assignment, member.Join(stop));
  member.Start(nullptr);
  if (metrics.serving()) metrics.Publish(EvaluatorMetrics(job, counters, {}));
  joined = true;
  PsClientOptions po = PsOptionsFor(job, wire::EVALUATOR, 0);
  if (job.replication.backups > 0) po.servers_view = ServersView(member);
  std::unique_ptr<PsClient> client = MakePsClient(ctx, po, assignment, options.credentials.keys, &counters, clock);
  PsClient& ps = *client;
  GD_RETURN_IF_ERROR(ps.Connect());
  GD_RETURN_IF_ERROR(WaitForTraining(job, member, clock, stop));
  cluster::MembershipView end_view = member.view();
  // A re-planned job: read the chunks where they are now.
  if (end_view.shard_map.version() > ps.shard_map().version) GD_RETURN_IF_ERROR(ps.SwitchMap(end_view.shard_map));

  GD_RETURN_IF_ERROR(ps.Pull(0, {.final = true}));
  // The shards' values start with the model (SCAFFOLD's c follows it).
  const int64_t n = model->num_params();
  torch::Tensor values = job.ShardValues(n) == n ? model->params() : torch::zeros({job.ShardValues(n)});
  GD_ASSIGN_OR_RETURN(PullTiming t, ps.WaitPull(kFinalPull, {.params = values.data_ptr<float>(), .stop = stop}));
  (void)t;
  if (values.numel() != n) {
    torch::NoGradGuard ng;
    model->params().copy_(values.narrow(0, 0, n));
  }
  nlohmann::json result;
  result["workers_done"] = end_view.done;
  result["workers_dead"] = end_view.dead;
  result["num_params"] = model->num_params();
  // The accuracy is worth more than the file: a parameter dump that cannot
  // be written (a full disk) is named in the result, not fatal.
  if (!options.dump_params.empty()) {
    std::string raw(reinterpret_cast<const char*>(model->params().data_ptr<float>()),
                    static_cast<size_t>(model->num_params()) * sizeof(float));
    Status dumped = WriteFileAtomic(options.dump_params, raw);
    if (!dumped.ok()) {
      GD_LOG(ERROR) << "final parameters not written: " << dumped;
      result["unwritten"][std::filesystem::path(options.dump_params).filename().string()] = dumped.message();
    }
  }
  if (model->has_network())
    GD_RETURN_IF_ERROR(EvaluateOnTestSet(job, test, options.snapshot_dir, *model, clock, stop, &result));
  Status written = WriteFileAtomic(options.result_file, result.dump(2));
  if (metrics.serving()) metrics.Publish(EvaluatorMetrics(job, counters, result));
  member.Stop(true);
  if (!written.ok())
    return written.Annotate("the result (test accuracy " +
                            (result.contains("test_accuracy") ? result["test_accuracy"].dump() : std::string("none")) +
                            ") could not be written");
  return Status::Ok();
}

}  // namespace

Status RunEvaluator(const EvaluatorOptions& options, zmq::context_t& ctx, const std::atomic<bool>* stop) {
  transport::ProcessMetrics metrics;
  std::atomic<bool> joined{false};
  GD_RETURN_IF_ERROR(metrics.Start(options.http, [&joined] { return joined.load(); }));
  Status s = Evaluate(options, ctx, stop, metrics, joined);
  metrics.Linger(options.http, s.ok());
  return s;
}

}  // namespace geodesic::worker
