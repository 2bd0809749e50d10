// The job file's rules that span sections, checked once every section is
// parsed (parse.cc checks the rules inside one section).
#include <algorithm>
#include <cctype>

#include "common/format.h"
#include "config/reader.h"

namespace geodesic::config_internal {
namespace {

using Errors = std::vector<std::string>;

void ValidatePipeline(const TrainingSpec& t, Errors* errors) {
  Check(t.pipeline_depth >= 1 && t.pipeline_depth <= 16, errors, "training.pipeline_depth", "must be in [1, 16]");
  Check(t.pipeline_depth <= 1 || t.pipeline_depth - 1 <= t.staleness_bound, errors, "training.pipeline_depth",
        "must be at most training.staleness_bound + 1 (a deeper pipeline reads staler)");
  Check(t.pipeline_depth <= 1 || t.prefetch, errors, "training.pipeline_depth", "needs training.prefetch");
}

void ValidateLocalSteps(const JobSpec& job, Errors* errors) {
  const TrainingSpec& t = job.training;
  Check(t.local_steps >= 1 && t.local_steps <= 1000, errors, "training.local_steps", "must be in [1, 1000]");
  Check(Finite(t.outer_lr) && t.outer_lr > 0 && t.outer_lr <= 10, errors, "training.outer_lr", "must be in (0, 10]");
  Check(Finite(t.outer_momentum) && t.outer_momentum >= 0 && t.outer_momentum < 1, errors, "training.outer_momentum",
        "must be in [0, 1)");
  Check(!t.outer_nesterov || t.outer_momentum > 0, errors, "training.outer_nesterov",
        "needs training.outer_momentum > 0");
  Check(!t.outer_nesterov || t.local_steps > 1, errors, "training.outer_nesterov",
        "is the outer step of local SGD (training.local_steps > 1); use optimizer.nesterov otherwise");
  Check(t.overlap_steps >= 0 && t.overlap_steps <= std::max(1, t.local_steps), errors, "training.overlap_steps",
        "must be in [0, training.local_steps]");
  Check(t.overlap_steps == 0 || (t.local_steps > 1 && t.overlap_rounds), errors, "training.overlap_steps",
        "needs training.local_steps > 1 and training.overlap_rounds: true (it bounds how far an overlapped round "
        "runs ahead of its average)");
  Check(t.fragments >= 1 && t.fragments <= 64, errors, "training.fragments", "must be in [1, 64]");
  Check(t.fragments == 1 || t.local_steps > 1, errors, "training.fragments",
        "cuts local SGD's exchanges into fragments: needs training.local_steps > 1");
  Check(t.fragments == 1 || !t.overlap_rounds || t.overlap_steps > 0, errors, "training.fragments",
        "needs training.overlap_steps > 0 or training.overlap_rounds: false (a fragment's average is folded in "
        "before the next clock's fragment is pushed)");
  Check(t.fragments == 1 || !job.membership.elastic, errors, "training.fragments",
        "cannot be combined with membership.elastic (not supported yet)");
  if (t.local_steps <= 1) return;
  Check(t.staleness_bound == 0, errors, "training.local_steps",
        "needs training.staleness_bound: 0 (rounds are averaged synchronously; overlap_rounds hides the round "
        "trip instead)");
  Check(t.pipeline_depth == 1, errors, "training.local_steps", "cannot be combined with training.pipeline_depth");
  Check(!job.compression.momentum_correction, errors, "training.local_steps",
        "cannot be combined with compression.momentum_correction (the workers already keep the momentum)");
}

// Federated rounds run on the synchronous local-SGD path.
void ValidateFederated(const JobSpec& job, Errors* errors) {
  if (!job.federated.enabled()) return;
  const char* key = "federated.clients";
  Check(job.training.staleness_bound == 0, errors, key,
        "needs training.staleness_bound: 0 (a round aggregates its clients synchronously)");
  Check(job.training.local_steps == 1, errors, key,
        "sets clients' local training in federated.local_epochs or local_steps; leave training.local_steps at 1");
  Check(job.training.pipeline_depth == 1, errors, key, "cannot be combined with training.pipeline_depth");
  Check(job.model.name != ModelKind::kSynthetic, errors, key, "needs a model with a network (cnn, mlp or torchscript)");
  Check(job.optimizer.clip_norm == 0, errors, "optimizer.clip_norm",
        "is not applied by federated clients (their local step is federated.local_lr's SGD); "
        "federated.dp_clip_norm clips their updates");
  Check(!job.compression.momentum_correction, errors, key, "cannot be combined with compression.momentum_correction");
  Check(!job.wan.replan, errors, key, "cannot be combined with wan.replan (not supported yet)");
  Check(job.TrainSamples() == 0 || job.federated.clients * job.data.batch_size <= job.TrainSamples(), errors, key,
        "times data.batch_size must be at most the " + std::to_string(job.TrainSamples()) +
            " training samples (each client needs one batch)");
  if (job.federated.fedbuff()) {
    Check(job.federated.over_selection == 0 && job.federated.deadline_s == 0, errors, "federated.strategy",
          "fedbuff needs over_selection: 0 and deadline_s: 0 (it waits for no round: a step takes the next "
          "per_round updates to arrive)");
    Check(!job.federated.dp(), errors, "federated.strategy",
          "fedbuff cannot be combined with DP (federated.dp_clip_norm): the accountant assumes sampled rounds");
  }
  if (!job.federated.scaffold()) return;
  Check(job.training.outer_momentum == 0, errors, "federated.strategy",
        "scaffold needs training.outer_momentum: 0 (the server step would carry momentum into the control variate)");
  Check(!job.federated.dp(), errors, "federated.strategy",
        "scaffold cannot be combined with DP (federated.dp_clip_norm): the control variates are not clipped or noised");
}

void ValidateCompression(const JobSpec& job, Errors* errors) {
  Check(!job.compression.momentum_correction || job.optimizer.name == OptimizerKind::kSgd, errors,
        "compression.momentum_correction", "needs optimizer.name: sgd (it moves SGD's momentum to the workers)");
  Check(!job.compression.momentum_correction || !job.optimizer.nesterov, errors, "compression.momentum_correction",
        "cannot be combined with optimizer.nesterov (the workers' momentum is plain)");
  Check(job.optimizer.clip_norm == 0 || job.model.name != ModelKind::kSynthetic, errors, "optimizer.clip_norm",
        "needs a model with a network (the synthetic model's gradients are a fixed table)");
  for (size_t i = 0; i < job.compression.links.size(); ++i)
    for (const std::string* region : {&job.compression.links[i].region_a, &job.compression.links[i].region_b})
      Check(job.FindRegion(*region), errors, "compression.links[" + std::to_string(i) + "].regions",
            "'" + *region + "' is not a region of this job");
}

void ValidateWanLinks(const JobSpec& job, Errors* errors) {
  for (size_t i = 0; i < job.wan.links.size(); ++i) {
    const LinkSpec& l = job.wan.links[i];
    for (const std::string* region : {&l.from, &l.to})
      Check(job.FindRegion(*region), errors, "wan.links", "'" + *region + "' is not a region of this job");
    for (size_t j = 0; j < i; ++j)
      Check(job.wan.links[j].from != l.from || job.wan.links[j].to != l.to, errors, "wan.links",
            "the link " + l.from + " -> " + l.to + " is declared twice");
  }
}

void ValidateReplan(const JobSpec& job, Errors* errors) {
  if (job.wan.replan) {
    Check(!job.wan.links.empty(), errors, "wan.replan", "needs declared wan.links (the planner re-plans against them)");
    Check(job.wan.planner, errors, "wan.replan", "needs wan.planner: true");
    // A migration hands a chunk's state from one shard process to another;
    // a backup would have to follow it (not built), so refuse rather than
    // lose the replica's guarantee silently.
    Check(job.replication.backups == 0, errors, "wan.replan",
          "cannot be combined with replication.backups > 0 (moving a replicated chunk is not supported)");
    Check(job.security.mode != SecurityMode::kCurve, errors, "wan.replan",
          "cannot be combined with security.mode: curve (shard-to-shard chunk transfers are not authenticated yet)");
    // A periodic checkpoint written during a migration could miss the chunk
    // in flight, and a resume would then refuse the set.
    Check(job.checkpoint.every_clocks == 0, errors, "wan.replan",
          "needs checkpoint.every_clocks: 0 (periodic checkpoints during a migration are not supported)");
    // An overlapped round keeps a pull in flight across the barrier, which
    // the migration's floor does not account for yet; and the barrier's
    // last clock is taken from WorkerProgress.target_steps, which counts
    // minibatches, not rounds.
    Check(job.training.local_steps == 1, errors, "wan.replan",
          "cannot be combined with training.local_steps > 1 (not supported yet)");
  }
  if (job.wan.replan_at_clock >= 0) {
    Check(job.wan.replan, errors, "wan.replan_at_clock", "needs wan.replan: true");
    for (const std::string* region : {&job.wan.replan_from, &job.wan.replan_to})
      Check(job.FindRegion(*region), errors, "wan.replan_from/replan_to",
            "'" + *region + "' is not a region of this job");
    Check(job.wan.replan_mbit > 0, errors, "wan.replan_mbit", "must be > 0 with wan.replan_at_clock");
  }
}

// Elastic workers (docs/deploy.md "Elastic workers"): what they are built
// for, refused clearly elsewhere.
void ValidateElastic(const JobSpec& job, Errors* errors) {
  bool spare = false;
  for (const auto& r : job.regions) spare |= r.max_workers > r.workers;
  if (!job.membership.elastic) {
    Check(!spare, errors, "regions.*.max_workers", "needs membership.elastic: true");
    return;
  }
  const char* w = "membership.elastic";
  Check(job.training.staleness_bound >= 1, errors, w,
        "needs an asynchronous job (training.staleness_bound >= 1): a BSP round's membership is fixed");
  Check(!job.federated.enabled(), errors, w, "cannot be combined with federated (clients are sampled per round)");
  Check(!job.wan.replan, errors, w, "cannot be combined with wan.replan (not supported yet)");
  Check(job.data.partition.kind == DataPartition::kIid, errors, w,
        "hands out units of one shuffled training set: data.partition must be iid");
  Check(job.model.name != ModelKind::kSynthetic, errors, w, "needs a dataset (model synthetic has none)");
  Check(job.regions.empty() || job.IsInitialWorker(0), errors, w,
        "the first region must start with a worker: worker 0 writes the snapshots the evaluator reads");
}

void ValidateRoles(JobSpec* job, Errors* errors) {
  if (job->regions.empty()) return;
  Check(job->NumServers() >= 1, errors, "regions", "the job needs at least one server");
  Check(job->NumWorkers() >= 1, errors, "regions", "the job needs at least one worker");
  if (job->coordinator_region.empty()) job->coordinator_region = job->regions.front().name;
  Check(job->FindRegion(job->coordinator_region), errors, "coordinator_region",
        "'" + job->coordinator_region + "' is not a region of this job");
}

}  // namespace

bool ValidName(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return false;
  return true;
}

// Token data: models that define their own loss, and splits that make sense
// for windows of text; what needs the files is checked at launch
// (worker/job_check.h).
void ValidateTokens(const JobSpec& job, Errors* errors) {
  const bool tokens = job.data.dataset == DatasetKind::kTokens;
  const DataPartition p = job.data.partition.kind;
  const bool by_document = p == DataPartition::kDocuments || p == DataPartition::kGroups;
  Check(tokens || !by_document, errors, "data.partition",
        ToString(p) +
            " splits token data (data.dataset tokens) by its documents; images use iid, dirichlet, shards "
            "or lognormal");
  if (!tokens) return;
  Check(job.model.name == ModelKind::kTorchScript, errors, "model.name",
        "token data needs a torchscript module with a loss (scripts/export_model.py gpt)");
  Check(p == DataPartition::kIid || by_document, errors, "data.partition",
        "token data is split iid (windows), by documents or by groups, not by labels");
  Check(job.data.augment.crop == 0 && !job.data.augment.flip, errors, "data.augment", "is for images, not tokens");
  Check(job.data.mean.empty(), errors, "data.mean", "is for images, not tokens");
  Check(!job.membership.elastic, errors, "membership.elastic", "does not take token data yet");
}

// Data of another shape than Fashion-MNIST's needs a model that takes it,
// and epochs need the number of training samples.
void ValidateData(const JobSpec& job, Errors* errors) {
  const bool fashion = job.data.dataset == DatasetKind::kFashionMnist;
  Check(fashion || job.model.name != ModelKind::kCnn, errors, "model.name",
        "cnn takes Fashion-MNIST's 1x28x28 images; use mlp or torchscript for data.dataset " +
            ToString(job.data.dataset));
  Check(
      job.TrainSamples() > 0 || job.training.steps > 0 || job.federated.enabled(), errors, "data.train_samples",
      "needed to count training.epochs over a " + ToString(job.data.dataset) +
          " dataset (or set training.steps); for tokens, the windows of train.bin, which `geodesic partition` prints");
  ValidateTokens(job, errors);
}

void ValidateAggregators(const JobSpec& job, Errors* errors) {
  if (!job.HasAggregators()) return;
  for (const std::string& why : AggregatorLimits(job)) Check(false, errors, "regions.*.aggregator", why);
}

void ValidateJob(JobSpec* job, Errors* errors) {
  ValidateData(*job, errors);
  ValidatePipeline(job->training, errors);
  ValidateLocalSteps(*job, errors);
  ValidateFederated(*job, errors);
  ValidateCompression(*job, errors);
  ValidateWanLinks(*job, errors);
  ValidateReplan(*job, errors);
  ValidateElastic(*job, errors);
  ValidateAggregators(*job, errors);
  ValidateRoles(job, errors);
  Check(ValidName(job->name), errors, "name", "job names use letters, digits, '-' and '_' (1-63 chars)");
}

}  // namespace geodesic::config_internal

namespace geodesic {

// What a regional aggregator combines today: BSP pushes of gradients
// (fp32 from its workers; the job's codecs on its WAN leg), local-SGD
// rounds' progress (DiLoCo; streaming DiLoCo's fragments) or federated
// executors' weighted sums of their clients' updates (docs/wan.md
// "Regional aggregation").
std::vector<std::string> AggregatorLimits(const JobSpec& job) {
  const TrainingSpec& t = job.training;
  std::vector<std::string> out;
  auto need = [&](bool ok, std::string why) {
    if (!ok) out.push_back(std::move(why));
  };
  need(t.staleness_bound == 0,
       "needs training.staleness_bound: 0 (it sums each clock's pushes of its region's workers, which "
       "is BSP's round)");
  need(!job.compression.momentum_correction,
       "cannot be combined with compression.momentum_correction (its momentum masking belongs to the sender's "
       "codec, which with an aggregator is the aggregator's)");
  need(!job.membership.elastic, "cannot be combined with membership.elastic");
  need(!job.wan.replan, "cannot be combined with wan.replan in this version");
  return out;
}

std::vector<std::string> JobNotes(const JobSpec& job) {
  const TrainingSpec& t = job.training;
  std::vector<std::string> notes;
  if (t.local_steps > 1 && t.overlap_rounds && t.overlap_steps == 0 && t.outer_momentum > 0) {
    notes.push_back(
        "training.overlap_rounds folds each round's average in only when the next round ends, so every outer step "
        "lands a round late, and outer momentum " +
        Fmt("%g", t.outer_momentum) +
        " carries it further: DiLoCo on the GPT ended 10% higher so (docs/language-models.md). Set "
        "training.overlap_steps (e.g. 2) or training.overlap_rounds: false");
  }
  return notes;
}

}  // namespace geodesic
