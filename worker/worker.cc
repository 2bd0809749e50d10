#include "worker/worker.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include "cluster/client_gateway.h"
#include "cluster/member_client.h"
#include "common/files.h"
#include "common/format.h"
#include "common/log.h"
#include "common/wait.h"
#include "common/wire_limits.h"
#include "compression/codec.h"
#include "proto/stats.pb.h"
#include "proto/stats_json.h"
#include "worker/batcher.h"
#include "worker/dataset.h"
#include "worker/federated_rounds.h"
#include "worker/local_sgd.h"
#include "worker/model.h"
#include "worker/partition.h"
#include "worker/process_options.h"
#include "worker/ps_client.h"
#include "worker/snapshot.h"
#include "worker/units.h"
#include "worker/worker_data.h"
#include "worker/worker_metrics.h"

namespace geodesic::worker {
namespace {

constexpr int64_t kNoBarrier = std::numeric_limits<int64_t>::max();

// This worker's part of the training set (data.partition), and what the
// stats report about the whole split.
struct DrawnPart {
  std::vector<int64_t> indices;
  std::string digest;
  std::vector<int64_t> labels;  // samples per label
};

StatusOr<DrawnPart> DrawPart(const ImageSet& train, const JobSpec& job, int id) {
  // Every part gets at least one full batch, which the batch sampler needs.
  StatusOr<Partition> split = PartitionSamples(train.labels, train.classes, job.NumWorkers(), job.data.partition,
                                               job.seed, job.data.batch_size);
  if (!split.ok()) return InvalidArgument("data.partition: " + split.status().message());
  DrawnPart mine;
  mine.digest = PartitionDigest(*split);
  mine.labels = LabelCounts(*split, train.labels, train.classes)[id];
  mine.indices = std::move((*split)[id]);
  return mine;
}

// InvalidArgument (job-fatal) if `n` values hold one beyond the shards'
// bound: every shard would refuse the push (REFUSAL_VALUE_TOO_LARGE).
Status CheckPushable(const float* v, int64_t n, int64_t clock) {
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; ++i)
    if (!(std::fabs(v[i]) <= kMaxValueMagnitude)) {
      if (bad++ == 0) first = i;
    }
  if (bad == 0) return Status::Ok();
  return InvalidArgument("clock " + std::to_string(clock) + ": the update holds " + std::to_string(bad) +
                         " value(s) beyond +-1e18 (first " + Fmt("%g", v[first]) + " at index " +
                         std::to_string(first) +
                         "), which every shard refuses: the model diverged (lower optimizer.lr, or set "
                         "optimizer.clip_norm)")
      .WithDetail(Detail::kJobFatal);
}

double UnixNow() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

}  // namespace

Worker::Worker(const WorkerProcessOptions& options, zmq::context_t& ctx, const std::atomic<bool>* stop)
    : options_(options),
      job_(options.job),
      ctx_(ctx),
      stop_(stop),
      clock_(RealClock::Get()),
      data_(std::make_unique<Data>()) {}

Worker::~Worker() = default;

Status Worker::Run() {
  GD_RETURN_IF_ERROR(metrics_.Start(options_.http, [this] { return pub_ready_.load(); }));
  // A worker started by hand or by a rendered script (deploy/render.h) has
  // no launcher to make the directory; an unwritable one fails here, at once.
  if (options_.id == 0 && !options_.snapshot_dir.empty()) GD_RETURN_IF_ERROR(MakeDirs(options_.snapshot_dir));
  GD_RETURN_IF_ERROR(LoadData());
  GD_RETURN_IF_ERROR(JoinJob());
  GD_RETURN_IF_ERROR(FirstPull());
  const std::string unit =
      federated_ ? " federated rounds (" + ToString(job_.federated.strategy) + ")"
      : local_
          ? " rounds of " + std::to_string(local_steps_) + " local steps" +
                (fragments_ > 1 ? " (one of " + std::to_string(fragments_) + " fragments synchronized per round)" : "")
          : " steps";
  GD_LOG(INFO) << "training " << (steps_ - c_) << unit << " of batch " << job_.data.batch_size << " ("
               << job_.model.name << ", " << n_ << " parameters, staleness bound " << bound_ << ")";
  start_ = clock_->Now();
  last_snapshot_ = start_ - std::chrono::hours(1);
  last_stats_ = start_;
  WriteStats(false);
  pub_ready_ = true;
  if (depth_ > 1) GD_RETURN_IF_ERROR(PullThrough(c_ + depth_ - 1));
  NoteFloor();
  for (; c_ < steps_; ++c_) {
    if (stop_->load()) break;
    if (units_) {
      GD_ASSIGN_OR_RETURN(bool got, TakeUnit());
      if (!got) break;
    }
    Status step = Step();
    if (!step.ok() && !(units_ && stop_->load())) return step;  // elastic: a stop mid-step departs
    if (!step.ok()) break;
  }
  // Elastic jobs: stopped (a pod deleted, a scale-down) is leaving the job.
  if (stop_->load() && units_) return Depart();
  if (stop_->load()) {
    WriteStats(false);
    return Cancelled("stopped at clock " + std::to_string(c_));
  }
  return Finish();
}

Status Worker::LoadData() {
  torch::set_num_threads(job_.training.threads);
  std::string chose;
  GD_ASSIGN_OR_RETURN(torch::Device device, ResolveDevice(job_.training.device, &chose));
  GD_LOG(INFO) << "device: " << chose;
  if (device.is_cuda()) GD_LOG(WARNING) << "cuda training keeps parameters on the host between steps";
  device = torch::kCPU;  // Debian's LibTorch is CPU-only; the flat buffers live on the host.

  // Data first: a missing dataset should fail before we join the job.
  synthetic_ = job_.model.name == ModelKind::kSynthetic;
  SampleShape shape;  // synthetic: none needed
  if (job_.federated.enabled()) {
    GD_ASSIGN_OR_RETURN(ImageSet train, LoadDataset(job_.data, "train"));
    shape = ShapeOf(train);
    GD_ASSIGN_OR_RETURN(federated_, FederatedRounds::Create(job_, options_.id, train));
    data_->partition_digest = federated_->digest();
    GD_LOG(INFO) << "federated: executor " << options_.id << " of " << job_.NumWorkers() << " for "
                 << job_.federated.clients << " clients (" << ToString(job_.data.partition) << ", digest "
                 << federated_->digest() << "), " << job_.federated.per_round << " a round";
  } else if (job_.membership.elastic) {
    GD_RETURN_IF_ERROR(LoadElasticData());
    shape = ShapeOf(data_->full);
  } else if (!synthetic_) {
    GD_ASSIGN_OR_RETURN(ImageSet train, LoadDataset(job_.data, "train"));
    GD_RETURN_IF_ERROR(CheckTrainingSet(job_, train));
    shape = ShapeOf(train);
    GD_ASSIGN_OR_RETURN(DrawnPart drawn, DrawPart(train, job_, options_.id));
    std::vector<int64_t>& part = drawn.indices;
    // Keep only this worker's partition, renumbered 0..n-1.
    data_->images = ImagesTensor(train, &part);
    data_->labels = LabelsTensor(train, &part);
    data_->partition_digest = drawn.digest;
    data_->partition_labels = drawn.labels;
    std::vector<int64_t> local(part.size());
    for (size_t i = 0; i < local.size(); ++i) local[i] = static_cast<int64_t>(i);
    data_->sampler =
        std::make_unique<BatchSampler>(std::move(local), job_.data.batch_size, SamplerSeed(job_.seed, options_.id));
    GD_LOG(INFO) << "partition: " << part.size() << " of " << train.count << " training samples ("
                 << ToString(job_.data.partition) << ", digest " << drawn.digest << ")";
  }
  GD_ASSIGN_OR_RETURN(model_, FlatModel::Create(job_.model, job_.seed, device, shape));
  n_ = model_->num_params();
  total_steps_ = job_.StepsPerWorker();
  steps_ = job_.ClockLimit();
  if (job_.membership.elastic) total_steps_ = steps_ * std::max(1, job_.training.local_steps);
  local_steps_ = job_.training.local_steps;
  fragments_ = job_.training.fragments;
  local_ = local_steps_ > 1 || federated_;  // federated rounds pull into rounds_->global() too
  depth_ = job_.training.pipeline_depth;
  bound_ = job_.training.staleness_bound;
  return Status::Ok();
}

// federated.gateway: listens for real clients before joining, so that the
// registration carries the gateway's endpoint, and takes the admitted
// clients' keys from the coordinator's heartbeat replies.
Status Worker::OpenGateway(cluster::MemberOptions& mo) {
  gateway_ = std::make_unique<cluster::ClientGateway>(
      ctx_,
      cluster::GatewayOptions{
          .job = job_.name,
          .executor = options_.id,
          .executors = job_.NumWorkers(),
          .clients = job_.federated.clients,
          .num_params = n_,
          .partition_digest = federated_->digest(),
          .bind = options_.gateway_bind.empty() ? "tcp://" + job_.RegionOfWorker(options_.id).host + ":*"
                                                : options_.gateway_bind,
          .keys = options_.credentials.keys,
      },
      &counters_, clock_);
  GD_RETURN_IF_ERROR(gateway_->Start());
  mo.endpoint = gateway_->endpoint();
  cluster::ClientGateway* gateway = gateway_.get();
  mo.authorize = [gateway](const wire::HeartbeatReply& r) { gateway->Authorize(r); };
  federated_->SetGateway(gateway);
  GD_LOG(INFO) << "federated: client gateway at " << gateway_->endpoint();
  return Status::Ok();
}

Status Worker::JoinJob() {
  cluster::MemberOptions mo = MemberOptionsFor(job_, wire::WORKER, options_.id, options_.coordinator,
                                               model_->signature(), options_.credentials);
  if (federated_ && job_.federated.gateway) GD_RETURN_IF_ERROR(OpenGateway(mo));
  if (units_) mo.on_reply = [this](const wire::HeartbeatReply& r) { units_->OnReply(r); };
  member_ = std::make_unique<cluster::MemberClient>(ctx_, std::move(mo), &counters_, clock_);
  GD_ASSIGN_OR_RETURN(assignment_, member_->Join(stop_));
  PsClientOptions po = PsOptionsFor(job_, wire::WORKER, options_.id);
  if (job_.replication.backups > 0) po.servers_view = ServersView(*member_);
  po.curve_keys = options_.credentials.keys;
  if (!options_.stats_file.empty()) {
    GD_ASSIGN_OR_RETURN(ledger_, PushLedger::Create(PushLedgerPath(options_.stats_file)));
    po.ledger = &*ledger_;
  }
  ps_ = std::make_unique<PsClient>(ctx_, po, assignment_, &counters_, clock_);
  GD_RETURN_IF_ERROR(ps_->Connect());
  const int64_t values = job_.ShardValues(n_);
  if (ps_->num_params() != static_cast<uint64_t>(values))
    return FailedPrecondition("shard map has " + std::to_string(ps_->num_params()) + " values, the job needs " +
                              std::to_string(values));
  progress_.Start(assignment_.start_clock(), total_steps_);
  member_->Start([this](wire::Heartbeat* hb) {
    progress_.Fill(hb);
    if (units_) units_->Fill(hb);
  });
  // After the heartbeats start: they keep our lease, and they bring the
  // news of a shard that fails over meanwhile (the init follows it).
  // The shards start from our model (under SCAFFOLD, with c = 0 after it).
  torch::Tensor init = values == n_ ? model_->params() : torch::cat({model_->params(), torch::zeros({values - n_})});
  return ps_->Init(init.data_ptr<float>(), stop_);
}

Status Worker::FirstPull() {
  if (const uint32_t chunks = ps_->shard_map().layout.num_chunks(); fragments_ > static_cast<int>(chunks))
    return InvalidArgument("training.fragments " + std::to_string(fragments_) + " is more than the model's " +
                           std::to_string(chunks) + " chunks (wire.chunk_bytes " +
                           std::to_string(job_.wire.chunk_bytes) + "); lower it or cut smaller chunks");
  c_ = assignment_.start_clock();
  // A worker that starts later than clock 0 (a resumed job, a rejoin) takes
  // up its data order where step c would have it, as an uninterrupted run.
  SkipBatches(0, c_);
  // Local SGD (training.local_steps > 1): pulls land in `global`, our copy
  // of the shards' model (pulls of changes add into it); the model trains
  // on its own values, and `base` is where this round's progress started.
  rounds_ = std::make_unique<LocalRounds>(job_, model_->params(), local_);
  pull_dest_ = local_ ? rounds_->global().data_ptr<float>() : model_->params().data_ptr<float>();
  GD_RETURN_IF_ERROR(ps_->RequestPull(c_, {.full = true}));  // we hold no copy yet
  GD_ASSIGN_OR_RETURN(PullTiming first,
                      ps_->WaitPull(c_, false, pull_dest_, stop_, [this] { return DescribeBlock(); }));
  (void)first;
  if (local_) rounds_->Restart();
  pulled_through_ = c_;
  pushed_through_ = c_ - 1;
  return Status::Ok();
}

Status Worker::Step() {
  // Cut off for longer than our lease (a partition), we were dropped from
  // the live set and registered again: the others went on, so skip to
  // their clock with the current model instead of making them wait while
  // we compute the clocks they already closed.
  if (int64_t rejoin = member_->TakeRejoinClock(); rejoin > c_ + 1 && rejoin < steps_)
    GD_RETURN_IF_ERROR(CatchUp(rejoin));
  if (job_.wan.replan) {
    GD_ASSIGN_OR_RETURN(int64_t m, Barrier());
    if (c_ >= m) GD_RETURN_IF_ERROR(WaitAtBarrier());
  }
  const bool more = c_ + 1 < steps_ && (!units_ || units_->MayHaveMore());
  GD_RETURN_IF_ERROR(RequestAhead(more));
  TimePoint t0 = clock_->Now();
  if (SnapshotDue(t0)) {
    SaveSnapshot(c_);
    last_snapshot_ = t0;
  }
  torch::Tensor grad = federated_ ? torch::zeros({federated_->shard_values()}) : model_->NewGradBuffer();
  const double merge_wait0 = merge_wait_s_;
  bool usable = Compute(grad);
  GD_RETURN_IF_ERROR(merge_error_);
  TimePoint t1 = clock_->Now();
  const double computed = Seconds(t1 - t0) - (merge_wait_s_ - merge_wait0);  // a mid-round wait is communication
  compute_s_ += computed;
  ps_->NoteComputeSeconds(computed);
  if (local_ && !federated_) GD_RETURN_IF_ERROR(FinishRound(grad, &usable, &t1));
  GD_RETURN_IF_ERROR(PushOrSkip(grad, usable));
  if (more && (local_ || !job_.training.prefetch)) {
    GD_RETURN_IF_ERROR(ps_->RequestPull(c_ + 1, {.only = FragmentOf(c_)}));
    pulled_through_ = c_ + 1;
  }
  if (more && local_ && !federated_ && job_.training.overlap_rounds) {
    pending_pull_ = c_ + 1;
    pending_chunks_ = FragmentOf(c_);
  }
  NoteFloor();
  // Keep at most two clocks (or the pipeline's depth + 1) of pushes
  // unacknowledged, bounding memory.
  GD_ASSIGN_OR_RETURN(double acked_wait, ps_->WaitAcks(std::max(2, depth_ + 1), stop_));
  (void)acked_wait;
  NoteAcked();
  comm_s_ += Seconds(clock_->Now() - t1);  // sending the push and any ack wait
  if (more && pending_pull_ < 0) {
    GD_RETURN_IF_ERROR(WaitPull(c_ + 1));
    if (local_) RestartPulled();
  }
  if (more) CloseRoundRecord();  // the last one closes once its push is acknowledged (Finish)
  PublishProgress();
  if (Seconds(clock_->Now() - last_stats_) > 2.0) {
    WriteStats(false);
    last_stats_ = clock_->Now();
  }
  return Status::Ok();
}

// Pulls requested before the compute, to overlap it.
Status Worker::RequestAhead(bool more) {
  // Prefetch: the request (and across a WAN the reply) overlaps the compute.
  if (!local_ && depth_ == 1 && more && job_.training.prefetch) {
    GD_RETURN_IF_ERROR(ps_->RequestPull(c_ + 1, {.after_own_push = true}));
    pulled_through_ = c_ + 1;
    NoteFloor();
  }
  if (depth_ > 1) GD_RETURN_IF_ERROR(PullThrough(c_ + depth_));
  return Status::Ok();
}

namespace {

// The values of `chunks` in the flat parameter vector (all n if unset).
LocalRounds::Span SpanOf(const cluster::ChunkLayout& layout, int64_t n,
                         const std::optional<cluster::ChunkRange>& chunks) {
  if (!chunks) return {0, n};
  const int64_t begin = static_cast<int64_t>(layout.Begin(chunks->begin));
  const int64_t end = static_cast<int64_t>(layout.Begin(chunks->end - 1) + layout.Size(chunks->end - 1));
  return {begin, end - begin};
}

}  // namespace

Status Worker::FinishRound(torch::Tensor& grad, bool* usable, TimePoint* compute_end) {
  // With overlap, the previous round's average was requested when that
  // round was pushed and has had this round's compute to arrive.
  const bool merge = pending_pull_ == c_;
  if (merge) {
    GD_RETURN_IF_ERROR(WaitPull(c_));  // counted as communication there
    pending_pull_ = -1;
    *compute_end = clock_->Now();
  }
  if (fragments_ > 1) {
    // The previous clock's fragment is folded in; this clock's fragment
    // pushes its progress over its whole outer round (P clocks), which is
    // finite even when none of this clock's steps was usable.
    if (merge) rounds_->MergeNow(SpanOf(ps_->shard_map().layout, n_, pending_chunks_));
    grad = rounds_->Finish(SpanOf(ps_->shard_map().layout, n_, FragmentOf(c_)));
    *usable = true;
  } else if (*usable) {
    grad = rounds_->Finish(merge);
  } else if (merge) {
    rounds_->Restart();
  }
  return Status::Ok();
}

std::optional<cluster::ChunkRange> Worker::FragmentOf(int64_t clock) const {
  if (fragments_ <= 1 || clock + 1 >= steps_) return std::nullopt;
  return cluster::FragmentChunks(ps_->shard_map().layout.num_chunks(), fragments_,
                                 static_cast<int>(clock % fragments_));
}

void Worker::RestartPulled() {
  if (fragments_ > 1)
    rounds_->Restart(SpanOf(ps_->shard_map().layout, n_, FragmentOf(c_)));
  else
    rounds_->Restart();
}

Status Worker::CatchUp(int64_t rejoin) {
  GD_LOG(WARNING) << "rejoined after losing our lease; skipping clocks " << c_ << ".." << rejoin - 1
                  << " to the live workers' clock " << rejoin;
  GD_ASSIGN_OR_RETURN(double drained, ps_->WaitAcks(0, stop_));
  comm_s_ += drained;
  ps_->DropPulls();
  pending_pull_ = -1;
  SkipBatches(c_, rejoin);
  jumped_ += rejoin - c_;
  c_ = rejoin;
  GD_RETURN_IF_ERROR(ps_->RequestPull(c_, {.full = true}));
  GD_ASSIGN_OR_RETURN(PullTiming t, ps_->WaitPull(c_, false, pull_dest_, stop_, [this] { return DescribeBlock(); }));
  comm_s_ += t.wait_seconds;
  if (local_) rounds_->Restart();
  for (int k = 1; k < depth_ && c_ + k < steps_; ++k) GD_RETURN_IF_ERROR(ps_->RequestPull(c_ + k));
  pulled_through_ = std::min<int64_t>(c_ + depth_ - 1, steps_ - 1);
  pushed_through_ = c_ - 1;
  progress_.set_clock(c_);
  return Status::Ok();
}

// At the barrier: every push below it acknowledged, then wait for the new
// map (or for the coordinator to drop the migration).
Status Worker::WaitAtBarrier() {
  GD_ASSIGN_OR_RETURN(double drained, ps_->WaitAcks(0, stop_));
  comm_s_ += drained;
  const uint64_t id = member_->view().migration.id();
  GD_LOG(INFO) << "migration " << id << ": waiting at the barrier, clock " << c_;
  progress_.set_at_barrier(id);
  member_->Nudge();
  const TimePoint b0 = clock_->Now();
  WaitReporter report(clock_, std::chrono::seconds(job_.membership.report_after_s));
  while (!stop_->load()) {
    GD_ASSIGN_OR_RETURN(int64_t m, Barrier());
    if (c_ < m) break;
    if (clock_->Now() - b0 > std::chrono::minutes(10))
      return DeadlineExceeded("migration " + std::to_string(id) + ": no new shard map after 10 minutes");
    if (report.Due()) GD_LOG(INFO) << "migration " << id << ": still waiting at the barrier, clock " << c_;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  progress_.set_at_barrier(0);
  barrier_s_ += Seconds(clock_->Now() - b0);
  ++barriers_;
  GD_LOG(INFO) << "migration " << id << ": through the barrier after "
               << static_cast<int>(1e3 * Seconds(clock_->Now() - b0)) << " ms (shard map version "
               << ps_->shard_map().version << ")";
  return Status::Ok();
}

StatusOr<int64_t> Worker::Barrier() {
  if (!job_.wan.replan) return kNoBarrier;
  cluster::MembershipView v = member_->view();
  if (v.shard_map.version() > ps_->shard_map().version) GD_RETURN_IF_ERROR(ps_->SwitchMap(v.shard_map));
  if (v.migration.id() == 0 || v.migration.new_map().version() <= ps_->shard_map().version) return kNoBarrier;
  return v.migration.barrier_clock();
}

Status Worker::PullThrough(int64_t through) {
  GD_ASSIGN_OR_RETURN(int64_t m, Barrier());
  for (int64_t k = pulled_through_ + 1; k <= std::min({through, m, steps_ - 1}); ++k) {
    GD_RETURN_IF_ERROR(ps_->RequestPull(k));
    pulled_through_ = k;
  }
  NoteFloor();
  return Status::Ok();
}

void Worker::NoteFloor() { progress_.set_barrier_floor(std::max(pushed_through_ + 1, pulled_through_)); }

bool Worker::Compute(torch::Tensor& grad) {
  if (federated_) return ComputeFederated(grad);
  if (!local_) {
    ++batches_;
    return ComputeGradient(c_, grad);
  }
  // A round: local steps on our own model, then its progress is pushed.
  // The inner schedule runs over the minibatch steps.
  int took = 0;
  for (int64_t k = c_ * local_steps_; k < std::min(total_steps_, (c_ + 1) * local_steps_); ++k) {
    grad.zero_();
    ++batches_;
    if (!ComputeGradient(k, grad)) {
      ++skipped_;
      GD_LOG(ERROR) << "step " << k << ": loss or gradient is not finite; skipping this local step";
      continue;
    }
    rounds_->Step(grad, LearningRateFactor(job_.optimizer, k, total_steps_));
    ++took;
    MergeIfArrived(k + 1 - c_ * local_steps_);
  }
  return took > 0;
}

void Worker::MergeIfArrived(int64_t taken) {
  const int64_t bound = job_.training.overlap_steps;
  if (bound == 0 || pending_pull_ != c_ || !merge_error_.ok()) return;
  if (taken < bound && !ps_->PullArrived(c_)) return;
  TimePoint t0 = clock_->Now();
  merge_error_ = WaitPull(c_);  // at once if it has arrived; counted as communication
  merge_wait_s_ += Seconds(clock_->Now() - t0);
  if (!merge_error_.ok()) return;
  if (fragments_ > 1)
    rounds_->MergeNow(SpanOf(ps_->shard_map().layout, n_, pending_chunks_));
  else
    rounds_->MergeNow();
  pending_pull_ = -1;
  ++early_merges_;
}

// One minibatch's gradient into `grad` (the model's .grad buffers); false
// if the loss or the gradient is not finite.
bool Worker::ComputeGradient(int64_t step, torch::Tensor& grad) {
  if (synthetic_) {
    std::vector<torch::Tensor>& grads = data_->synthetic_grads;
    if (grads.empty()) {
      // Each worker its own gradients (seeded by job and worker), so that
      // sums over workers depend on their order as real ones do.
      torch::manual_seed(SamplerSeed(job_.seed, options_.id));
      for (int k = 0; k < 4; ++k) grads.push_back(torch::randn({n_}) * 1e-3);
    }
    grad.copy_(grads[step % grads.size()]);
    return true;
  }
  const std::vector<int64_t>& idx = NextBatch();
  torch::Tensor x, y;
  if (units_) {  // elastic: indices into the whole set, converted now
    x = ImagesTensor(data_->full, &idx);
    y = LabelsTensor(data_->full, &idx);
  } else {
    torch::Tensor sel =
        torch::from_blob(const_cast<int64_t*>(idx.data()), {static_cast<int64_t>(idx.size())}, torch::kInt64);
    x = data_->images.index_select(0, sel);
    y = data_->labels.index_select(0, sel);
  }
  Augment(x, job_.data.augment, AugmentSeed(job_.seed, options_.id, step));
  torch::Tensor logits = model_->Forward(x);
  torch::Tensor loss = torch::nn::functional::cross_entropy(logits, y);
  loss.backward();
  double l = loss.item<double>();
  double acc = logits.argmax(1).eq(y).to(torch::kFloat32).mean().item<double>();
  bool usable = std::isfinite(l) && compression::CountNonFinite(grad.data_ptr<float>(), n_) == 0;
  if (usable && ClipGradient(grad, job_.optimizer.clip_norm)) ++clipped_;
  if (usable) {
    loss_ema_ = loss_ema_ < 0 ? l : 0.95 * loss_ema_ + 0.05 * l;
    acc_ema_ = acc_ema_ < 0 ? acc : 0.95 * acc_ema_ + 0.05 * acc;
  }
  samples_ += static_cast<int64_t>(idx.size());
  return usable;
}

bool Worker::ComputeFederated(torch::Tensor& grad) {
  stats::RoundStats& rec = data_->round_log.emplace_back();
  rec.set_round(static_cast<uint32_t>(c_));
  rec.set_start_unix(UnixNow());
  data_->round_sent0 = counters_.bytes_sent.load();
  data_->round_received0 = counters_.bytes_received.load();
  StatusOr<RoundReport> r = federated_->Run(c_, rounds_->global().data_ptr<float>(), grad.data_ptr<float>());
  rec.set_pushed_unix(UnixNow());
  if (!r.ok()) {
    GD_LOG(ERROR) << "round " << c_ << ": " << r.status();
    return false;
  }
  rec.set_selected(static_cast<uint32_t>(r->selected));
  rec.set_trained(static_cast<uint32_t>(r->trained));
  rec.set_dropped(static_cast<uint32_t>(r->dropped));
  rec.set_late(static_cast<uint32_t>(r->late));
  rec.set_simulated_seconds(r->seconds);
  rec.set_unusable(static_cast<uint32_t>(r->unusable));
  rec.set_clipped(static_cast<uint32_t>(r->clipped));
  rec.set_samples(static_cast<uint32_t>(r->samples));
  rec.set_compute_seconds(r->compute_seconds);
  rec.set_client_eval_seconds(r->eval_seconds);
  for (float a : r->client_accuracy) rec.add_client_accuracy(a);
  for (int64_t c : r->clients) rec.add_clients(static_cast<uint32_t>(c));
  rec.set_staleness_sum(static_cast<uint32_t>(r->staleness_sum));
  rec.set_client_uplink_bytes(r->uplink_bytes);
  rec.set_refused(static_cast<uint32_t>(r->refused));
  rec.set_real(static_cast<uint32_t>(r->real));
  if (r->refused > 0) GD_LOG(WARNING) << "round " << c_ << ": " << r->refused << " client update(s) refused";
  ++batches_;
  clients_trained_ += r->trained;
  clients_dropped_ += r->dropped;
  clients_late_ += r->late;
  clients_unusable_ += r->unusable;
  clients_clipped_ += r->clipped;
  clients_refused_ += r->refused;
  real_updates_ += r->real;
  samples_ += r->samples;
  if (r->trained > 0) {
    loss_ema_ = loss_ema_ < 0 ? r->mean_loss : 0.8 * loss_ema_ + 0.2 * r->mean_loss;
    acc_ema_ = acc_ema_ < 0 ? r->mean_accuracy : 0.8 * acc_ema_ + 0.2 * r->mean_accuracy;
  }
  if (r->unusable > 0)
    GD_LOG(WARNING) << "round " << c_ << ": " << r->unusable << " client update(s) not finite; left out";
  return true;
}

Status Worker::PushOrSkip(torch::Tensor& grad, bool usable) {
  if (usable) {
    Status pushable = CheckPushable(grad.data_ptr<float>(), grad.numel(), c_);
    if (!pushable.ok() && !federated_) return pushable;
    if (!pushable.ok()) {
      // Client updates are checked at the gateway and when they are
      // combined (federated_rounds.h); a round that still came out beyond
      // the bound is left out, not pushed to be refused.
      GD_LOG(ERROR) << "round " << c_ << ": " << pushable.message() << "; the round is skipped";
      GD_RETURN_IF_ERROR(ps_->PushSkipped(c_, unit_));
      pushed_through_ = c_;
      return Status::Ok();
    }
  }
  if (usable) {
    auto owner = std::make_shared<torch::Tensor>(grad);
    GD_RETURN_IF_ERROR(ps_->Push(c_, grad.data_ptr<float>(), std::shared_ptr<const void>(owner, owner->data_ptr()),
                                 unit_, local_ ? FragmentOf(c_) : std::nullopt));
  } else {
    if (!local_) ++skipped_;
    GD_LOG(ERROR) << (local_ ? "round " : "step ") << c_ << ": loss or gradient is not finite; skipping this "
                  << (local_ ? "round's" : "step's") << " push";
    GD_RETURN_IF_ERROR(ps_->PushSkipped(c_, unit_));
  }
  if (units_) unit_of_clock_[c_] = unit_;
  pushed_through_ = c_;
  return Status::Ok();
}

Status Worker::WaitPull(int64_t clock) {
  GD_ASSIGN_OR_RETURN(PullTiming t, ps_->WaitPull(clock, false, pull_dest_, stop_, [this] { return DescribeBlock(); }));
  wait_s_ += t.bound_seconds;
  comm_s_ += t.wait_seconds - t.bound_seconds;
  return Status::Ok();
}

void Worker::PublishProgress() {
  progress_.Update(c_ + 1, [this](wire::WorkerProgress* p) {
    p->set_steps(local_ ? batches_ : c_ + 1 - assignment_.start_clock() - jumped_);
    p->set_samples(samples_);
    p->set_loss(loss_ema_);
    p->set_train_accuracy(acc_ema_);
    p->set_compute_seconds(compute_s_);
    p->set_comm_seconds(comm_s_);
    p->set_wait_seconds(wait_s_);
    p->clear_links();
    for (const LinkEstimate& e : ps_->LinkEstimates()) {
      auto* l = p->add_links();
      l->set_server_region(e.server_region);
      l->set_min_rtt_ms(e.min_rtt_ms);
      l->set_mbit(e.mbit);
      l->set_samples(e.samples);
    }
  });
}

void Worker::SkipBatches(int64_t from_clock, int64_t to_clock) {
  if (data_->sampler)
    for (int64_t k = from_clock * local_steps_; k < std::min(total_steps_, to_clock * local_steps_); ++k)
      data_->sampler->Next();
}

std::string Worker::DescribeBlock() {
  cluster::MembershipView v = member_->view();
  if (!v.valid || v.live.empty()) return "";
  // The slowest; on a tie another worker than this one, which waits and so
  // has already sent what the others wait for.
  size_t slow = 0;
  for (size_t i = 1; i < v.live.size(); ++i)
    if (v.clocks[i] < v.clocks[slow] || (v.clocks[i] == v.clocks[slow] && v.live[slow] == options_.id)) slow = i;
  return "worker " + std::to_string(options_.id) + " at clock " + std::to_string(progress_.clock()) +
         "; slowest live worker " + std::to_string(v.live[slow]) + " at clock " + std::to_string(v.clocks[slow]) +
         " (bound " + std::to_string(bound_) + ")";
}

// Federated jobs snapshot every federated.eval_every rounds (0: by time,
// as other jobs do).
bool Worker::SnapshotDue(TimePoint now) const {
  if (options_.id != 0) return false;
  if (federated_ && job_.federated.eval_every > 0) return c_ % job_.federated.eval_every == 0;
  return Seconds(now - last_snapshot_) >= job_.eval.snapshot_every_s;
}

void Worker::CloseRoundRecord() {
  if (!federated_ || data_->round_log.empty() || data_->round_log.back().end_unix() > 0) return;
  stats::RoundStats& rec = data_->round_log.back();
  rec.set_end_unix(UnixNow());
  rec.set_bytes_sent(counters_.bytes_sent.load() - data_->round_sent0);
  rec.set_bytes_received(counters_.bytes_received.load() - data_->round_received0);
}

// Local SGD snapshots the shards' model as last pulled (the average), not
// this worker's own progress since; steps count minibatches.
void Worker::SaveSnapshot(int64_t clock_now) {
  if (options_.id != 0 || options_.snapshot_dir.empty() || synthetic_) return;
  const float* values = local_ ? rounds_->global().data_ptr<float>() : model_->params().data_ptr<float>();
  Status s = WriteSnapshot(options_.snapshot_dir, local_ ? clock_now * local_steps_ : clock_now,
                           Seconds(clock_->Now() - start_), values, n_);
  if (!s.ok()) GD_LOG(WARNING) << "snapshot: " << s;
}

// The worker's stats JSON (the launcher folds it into the job summary).
stats::WorkerStats Worker::Stats(bool final) {
  stats::WorkerStats j;
  j.set_role("worker");
  j.set_id(options_.id);
  j.set_finished(final);
  j.set_bytes_sent(counters_.bytes_sent.load());
  j.set_bytes_received(counters_.bytes_received.load());
  j.set_messages_sent(counters_.messages_sent.load());
  j.set_messages_received(counters_.messages_received.load());
  j.set_steps(local_ ? batches_ : c_ - assignment_.start_clock() - jumped_);
  j.set_clocks(c_ - assignment_.start_clock() - jumped_);
  j.set_clocks_skipped_on_rejoin(jumped_);
  j.set_samples(samples_);
  j.set_skipped_steps(skipped_);
  j.set_pushes_refused(ps_->pushes_refused());
  if (units_) j.set_units_finished(units_->finished());
  if (job_.optimizer.clip_norm > 0) j.set_clipped_steps(clipped_);
  if (job_.training.overlap_steps > 0) {
    j.set_early_merges(early_merges_);
    j.set_merge_wait_seconds(merge_wait_s_);
  }
  if (ledger_) {
    j.set_chunks_acknowledged(ledger_->counts().acknowledged);
    j.set_push_ledger(ledger_->path());
  }
  j.set_redirects(ps_->redirects());
  if (job_.wan.replan) {
    j.set_migration_barriers(barriers_);
    j.set_migration_barrier_seconds(barrier_s_);
    j.set_chunks_rerouted(ps_->chunks_rerouted());
    j.set_moved_refusals(ps_->moved_refusals());
  }
  if (federated_) {
    j.set_partition(ToString(job_.data.partition));
    j.set_partition_digest(data_->partition_digest);
    j.set_clients_trained(clients_trained_);
    j.set_clients_dropped(clients_dropped_);
    j.set_client_updates_unusable(clients_unusable_);
    if (job_.federated.dp()) j.set_client_updates_clipped(clients_clipped_);
    j.set_clients_late(clients_late_);
    j.set_client_updates_refused(clients_refused_);
    if (job_.federated.gateway) j.set_real_client_updates(real_updates_);
    if (gateway_) *j.mutable_gateway() = gateway_->Stats();
    for (const stats::RoundStats& r : data_->round_log) *j.add_rounds() = r;
  } else if (!synthetic_) {
    j.set_partition(ToString(job_.data.partition));
    j.set_partition_digest(data_->partition_digest);
    j.set_partition_samples(data_->labels.size(0));
    for (int64_t n : data_->partition_labels) j.add_partition_labels(n);
  }
  j.set_pull_resyncs(ps_->resyncs());
  j.set_residual_norm(std::sqrt(ps_->error_feedback().ResidualSquaredNorm()));
  j.set_training_seconds(Seconds(clock_->Now() - start_));
  j.set_compute_seconds(compute_s_);
  j.set_comm_seconds(comm_s_);
  j.set_wait_seconds(wait_s_);
  j.set_loss(loss_ema_);
  j.set_train_accuracy(acc_ema_);
  for (const LinkEstimate& e : ps_->LinkEstimates()) {
    stats::LinkFromServer& l = (*j.mutable_links_from_servers())[e.server_region];
    l.set_min_rtt_ms(e.min_rtt_ms);
    l.set_mbit(e.mbit);
    l.set_samples(e.samples);
  }
  return j;
}

void Worker::WriteStats(bool final) {
  const stats::WorkerStats j = Stats(final);
  if (metrics_.serving()) {
    WorkerLive live{
        .traffic = ps_->TrafficByRegion(), .pull_latency = &ps_->pull_latency(), .push_latency = &ps_->push_latency()};
    metrics_.Publish(WorkerMetrics(j,
                                   {.job = job_.name,
                                    .region = job_.RegionOfWorker(options_.id).name,
                                    .role = "worker",
                                    .id = std::to_string(options_.id)},
                                   live));
  }
  if (options_.stats_file.empty()) return;
  Status s = WriteFileAtomic(options_.stats_file, StatsToJson(j), /*durable=*/false);
  if (!s.ok()) GD_LOG(WARNING) << s;
}

Status Worker::Finish() {
  GD_ASSIGN_OR_RETURN(double final_wait, ps_->WaitAcks(0, stop_));
  comm_s_ += final_wait;
  NoteAcked();
  CloseRoundRecord();
  // The model as this worker last saw it closes the accuracy curve. With
  // local rounds that is the last round's start: the shards' final model
  // is the evaluator's test_accuracy.
  SaveSnapshot(local_ ? std::max<int64_t>(c_ - 1, 0) : c_);
  double seconds = Seconds(clock_->Now() - start_);
  progress_.Finish(comm_s_);
  WriteStats(true);
  GD_LOG(INFO) << "done: " << (local_ ? batches_ : c_ - assignment_.start_clock() - jumped_) << " steps, " << samples_
               << " samples in " << seconds << " s (compute " << compute_s_ << " s, network " << comm_s_
               << " s, staleness bound " << wait_s_ << " s)";
  // Make sure the coordinator heard "done" before we leave.
  uint64_t seen = member_->replies();
  WaitReporter report(clock_, std::chrono::seconds(job_.membership.report_after_s));
  TimePoint deadline = clock_->Now() + Millis(job_.membership.lease_ms * 2);
  while ((member_->replies() < seen + 2 || (units_ && !units_->AllConfirmed())) && clock_->Now() < deadline &&
         !stop_->load()) {
    if (report.Due()) GD_LOG(INFO) << "waiting for the coordinator to note that we are done";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  member_->Stop(true);
  return Status::Ok();
}

}  // namespace geodesic::worker
