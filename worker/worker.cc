#include "worker/worker.h"

#include <algorithm>
#include <thread>

#include "cluster/member_client.h"
#include "common/files.h"
#include "common/log.h"
#include "common/wait.h"
#include "proto/stats_json.h"
#include "worker/process_options.h"
#include "worker/ps_client.h"
#include "worker/snapshot.h"
#include "worker/steps/make_step.h"
#include "worker/worker_metrics.h"
#include "worker/zmq_shard_links.h"

namespace geodesic::worker {

Worker::Worker(const WorkerProcessOptions& options, zmq::context_t& ctx, const std::atomic<bool>* stop)
    : options_(options),
      job_(options.job),
      ctx_(ctx),
      clock_(RealClock::Get()),
      env_{.job = options.job,
           .id = options.id,
           .clock = RealClock::Get(),
           .stop = stop,
           .progress = &progress_,
           .describe = [this] { return DescribeBlock(); }} {}

Worker::~Worker() = default;

Status Worker::Run() {
  GD_RETURN_IF_ERROR(metrics_.Start(options_.http, [this] { return pub_ready_.load(); }));
  // A worker started by hand or by a rendered script (deploy/render.h) has
  // no launcher to make the directory; an unwritable one fails here, at once.
  if (options_.id == 0 && !options_.snapshot_dir.empty()) GD_RETURN_IF_ERROR(MakeDirs(options_.snapshot_dir));
  if (Status begun = Begin(); !begun.ok()) return env_.stop->load() ? StoppedStarting(begun) : begun;
  GD_LOG(INFO) << "training " << (env_.clocks - c_) << step_->ClockName() << " of batch " << job_.data.batch_size
               << " (" << job_.model.name << ", " << step_->num_params() << " parameters, staleness bound "
               << job_.training.staleness_bound << ")";
  start_ = clock_->Now();
  last_snapshot_ = start_ - std::chrono::hours(1);
  last_stats_ = start_;
  WriteStats(false);
  pub_ready_ = true;
  env_.NoteFloor();
  GD_RETURN_IF_ERROR(Train());
  if (env_.stop->load()) return Stopped();
  return Finish();
}

Status Worker::Begin() {
  GD_ASSIGN_OR_RETURN(StepParts parts, MakeStep(env_, {.ctx = &ctx_,
                                                       .traffic = &counters_,
                                                       .gateway_bind = options_.gateway_bind,
                                                       .keys = options_.credentials.keys}));
  step_ = std::move(parts.step);
  gate_ = std::move(parts.gate);
  env_.gate = gate_.get();
  GD_RETURN_IF_ERROR(JoinJob());
  c_ = start_clock_;
  return step_->Start(c_);
}

Status Worker::JoinJob() {
  cluster::MemberOptions mo =
      MemberOptionsFor(job_, wire::WORKER, options_.id, options_.coordinator, step_->signature(), options_.credentials);
  GD_RETURN_IF_ERROR(step_->BeforeJoin(mo));
  gate_->BeforeJoin(mo);
  member_ = std::make_unique<cluster::MemberClient>(ctx_, std::move(mo), &counters_, clock_);
  GD_ASSIGN_OR_RETURN(wire::RegisterReply assignment, member_->Join(env_.stop));
  env_.member = member_.get();
  start_clock_ = assignment.start_clock();
  PsClientOptions po = PsOptionsFor(job_, wire::WORKER, options_.id);
  if (job_.replication.backups > 0) po.servers_view = ServersView(*member_);
  if (!options_.stats_file.empty()) {
    GD_ASSIGN_OR_RETURN(ledger_, PushLedger::Create(PushLedgerPath(options_.stats_file)));
    po.ledger = &*ledger_;
  }
  std::optional<ShardAddress> via;
  if (!options_.aggregator.empty()) {
    // Secured jobs: the aggregator's registered key, which the coordinator
    // gives once the aggregator admits ours.
    via = ShardAddress{.id = 0, .endpoint = options_.aggregator, .curve_key = assignment.aggregator_curve_public_key()};
    if (options_.credentials.enabled() && via->curve_key.empty())
      return FailedPrecondition("the coordinator gave no CURVE key for our region's aggregator (" +
                                options_.aggregator + "): it has not registered with this coordinator");
  }
  ps_ = MakePsClient(ctx_, po, assignment, options_.credentials.keys, &counters_, clock_, via,
                     AggregatorGone(*member_, job_.RegionIndex(job_.RegionOfWorker(options_.id).name)));
  env_.ps = ps_.get();
  GD_RETURN_IF_ERROR(ps_->Connect());
  const int64_t values = job_.ShardValues(step_->num_params());
  if (ps_->shard_map().layout.num_params() != static_cast<uint64_t>(values))
    return FailedPrecondition("shard map has " + std::to_string(ps_->shard_map().layout.num_params()) +
                              " values, the job needs " + std::to_string(values));
  progress_.Start(start_clock_, env_.total_steps);
  member_->Start([this](wire::Heartbeat* hb) {
    progress_.Fill(hb);
    gate_->FillHeartbeat(hb);
  });
  // After the heartbeats start: they keep our lease, and they bring the
  // news of a shard that fails over meanwhile (the init follows it).
  return step_->Init();
}

Status Worker::Train() {
  for (; c_ < env_.clocks; ++c_) {
    if (env_.stop->load()) break;
    GD_ASSIGN_OR_RETURN(bool admitted, gate_->Admit(c_));
    if (!admitted) break;
    Status step = Step();
    if (step.ok()) continue;
    if (env_.stop->load() && gate_->departs_when_stopped()) break;  // a stop mid-step departs
    return step;
  }
  return Status::Ok();
}

Status Worker::Step() {
  // Cut off for longer than our lease (a partition), we were dropped from
  // the live set and registered again: the others went on, so skip to
  // their clock with the current model instead of making them wait while
  // we compute the clocks they already closed.
  if (int64_t rejoin = member_->TakeRejoinClock(); rejoin > c_ + 1 && rejoin < env_.clocks)
    GD_RETURN_IF_ERROR(CatchUp(rejoin));
  GD_RETURN_IF_ERROR(gate_->BeforeStep(c_));
  const bool more = c_ + 1 < env_.clocks && gate_->MayHaveMore();
  GD_RETURN_IF_ERROR(step_->BeforeCompute(c_, more));
  const TimePoint t0 = clock_->Now();
  MaybeSnapshot(t0);
  GD_ASSIGN_OR_RETURN(Update u, step_->Compute(c_));
  const double computed = Seconds(u.computed - t0) - u.waited_s;
  env_.n.compute_s += computed;
  ps_->NoteComputeSeconds(computed);
  GD_RETURN_IF_ERROR(Push(u));
  GD_RETURN_IF_ERROR(step_->AfterPush(c_, more));
  env_.NoteFloor();
  GD_RETURN_IF_ERROR(ps_->WaitAcks(step_->unacked_clocks(), env_.stop).status());
  gate_->Acked(ps_->OldestUnackedClock());
  env_.n.comm_s += Seconds(clock_->Now() - u.resumed);  // sending the push and any ack wait
  if (more) GD_RETURN_IF_ERROR(step_->AwaitNext(c_));
  PublishProgress();
  if (Seconds(clock_->Now() - last_stats_) > 2.0) {
    WriteStats(false);
    last_stats_ = clock_->Now();
  }
  return Status::Ok();
}

Status Worker::CatchUp(int64_t rejoin) {
  GD_LOG(WARNING) << "rejoined after losing our lease; skipping clocks " << c_ << ".." << rejoin - 1
                  << " to the live workers' clock " << rejoin;
  GD_ASSIGN_OR_RETURN(double drained, ps_->WaitAcks(0, env_.stop));
  env_.n.comm_s += drained;
  ps_->DropPulls();
  GD_ASSIGN_OR_RETURN(double waited, step_->Jump(c_, rejoin));
  env_.n.jumped += rejoin - c_;
  c_ = rejoin;
  env_.n.comm_s += waited;
  env_.pushed_through = c_ - 1;
  progress_.set_clock(c_);
  return Status::Ok();
}

// Nothing usable (u.values null): every shard is told the clock is skipped.
Status Worker::Push(const Update& u) {
  GD_RETURN_IF_ERROR(ps_->Push(c_, {.values = u.values, .owner = u.owner, .unit = gate_->unit(), .only = u.only}));
  gate_->Pushed(c_);
  env_.pushed_through = c_;
  return Status::Ok();
}

void Worker::PublishProgress() {
  const PsClientStats ps = ps_->Stats();
  const StepCounters& n = env_.n;
  progress_.Update(c_ + 1, [&](wire::WorkerProgress* p) {
    p->set_steps(step_->Steps(c_ + 1 - start_clock_ - n.jumped));
    p->set_samples(n.samples);
    p->set_loss(n.loss_ema);
    p->set_train_accuracy(n.acc_ema);
    p->set_compute_seconds(n.compute_s);
    p->set_comm_seconds(n.comm_s);
    p->set_wait_seconds(n.wait_s);
    p->clear_links();
    for (const LinkEstimate& e : ps.links) {
      auto* l = p->add_links();
      l->set_server_region(e.server_region);
      l->set_min_rtt_ms(e.min_rtt_ms);
      l->set_mbit(e.mbit);
      l->set_samples(e.samples);
    }
  });
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
         " (bound " + std::to_string(job_.training.staleness_bound) + ")";
}

void Worker::MaybeSnapshot(TimePoint now) {
  if (options_.id != 0 || !step_->SnapshotDue(c_, Seconds(now - last_snapshot_), job_.eval.snapshot_every_s)) return;
  SaveSnapshot(false);
  last_snapshot_ = now;
}

void Worker::SaveSnapshot(bool last) {
  if (options_.id != 0 || options_.snapshot_dir.empty()) return;
  const std::optional<SnapshotView> v = step_->Snapshot(c_, last);
  if (!v) return;
  // Values taken in before training began (the start's pull) count from its start.
  const TimePoint now = clock_->Now(), at = std::max(v->at.value_or(now), start_);
  Status s =
      WriteSnapshot(options_.snapshot_dir, v->step, Seconds(at - start_), v->values, v->count, Seconds(now - at));
  if (!s.ok()) GD_LOG(WARNING) << "snapshot: " << s;
}

// The worker's stats JSON (the launcher folds it into the job summary).
stats::WorkerStats Worker::Stats(bool final) {
  const PsClientStats ps = ps_->Stats();
  const StepCounters& n = env_.n;
  const int64_t clocks = c_ - start_clock_ - n.jumped;
  stats::WorkerStats j;
  j.set_role("worker");
  j.set_id(options_.id);
  j.set_finished(final);
  j.set_bytes_sent(counters_.bytes_sent.load());
  j.set_bytes_received(counters_.bytes_received.load());
  j.set_messages_sent(counters_.messages_sent.load());
  j.set_messages_received(counters_.messages_received.load());
  j.set_steps(step_->Steps(clocks));
  j.set_clocks(clocks);
  j.set_clocks_skipped_on_rejoin(n.jumped);
  j.set_samples(n.samples);
  j.set_skipped_steps(n.skipped);
  j.set_pushes_refused(ps.pushes_refused);
  gate_->AddStats(&j);
  step_->AddStats(&j);
  if (ledger_) {
    j.set_chunks_acknowledged(ledger_->counts().acknowledged);
    j.set_push_ledger(ledger_->path());
  }
  j.set_redirects(ps.redirects);
  j.set_pull_resyncs(ps.resyncs);
  j.set_residual_norm(ps.residual_norm);
  j.set_training_seconds(Seconds(clock_->Now() - start_));
  j.set_compute_seconds(n.compute_s);
  j.set_comm_seconds(n.comm_s);
  j.set_wait_seconds(n.wait_s);
  j.set_loss(n.loss_ema);
  j.set_train_accuracy(n.acc_ema);
  for (const LinkEstimate& e : ps.links) {
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
    const PsClientStats ps = ps_->Stats();
    WorkerLive live{.traffic = ps.traffic, .pull_latency = &ps.pull_latency, .push_latency = &ps.push_latency};
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
  GD_ASSIGN_OR_RETURN(double final_wait, ps_->WaitAcks(0, env_.stop));
  env_.n.comm_s += final_wait;
  gate_->Acked(ps_->OldestUnackedClock());
  step_->Close();
  // The model as this worker last saw it closes the accuracy curve.
  SaveSnapshot(true);
  const StepCounters& n = env_.n;
  double seconds = Seconds(clock_->Now() - start_);
  progress_.Finish(n.comm_s);
  WriteStats(true);
  GD_LOG(INFO) << "done: " << step_->Steps(c_ - start_clock_ - n.jumped) << " steps, " << n.samples << " samples in "
               << seconds << " s (compute " << n.compute_s << " s, network " << n.comm_s << " s, staleness bound "
               << n.wait_s << " s)";
  WaitForCoordinator();
  member_->Stop(true);
  return Status::Ok();
}

void Worker::WaitForCoordinator() {
  uint64_t seen = member_->replies();
  WaitReporter report(clock_, std::chrono::seconds(job_.membership.report_after_s));
  TimePoint deadline = clock_->Now() + Millis(job_.membership.lease_ms * 2);
  while ((member_->replies() < seen + 2 || !gate_->Settled()) && clock_->Now() < deadline && !env_.stop->load()) {
    if (report.Due()) GD_LOG(INFO) << "waiting for the coordinator to note that we are done";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Stopped (SIGTERM): an elastic worker leaves the job (a pod deleted, a
// scale-down); any other stops where it is.
Status Worker::Stopped() {
  if (gate_->departs_when_stopped()) return gate_->Depart(c_, [this] { WriteStats(true); });
  WriteStats(false);
  return Cancelled("stopped at clock " + std::to_string(c_));
}

// A pod deleted while it starts (a scale-down before it trained) is no
// failure of an elastic job: it has pushed nothing and holds no unit it
// has not been told to drop when it leaves.
Status Worker::StoppedStarting(const Status& why) {
  if (!gate_ || !gate_->departs_when_stopped()) return why;
  GD_LOG(INFO) << "elastic: stopped while starting (" << why.message() << "); leaving the job";
  if (member_) member_->Stop(/*leave=*/true);
  return Status::Ok();
}

}  // namespace geodesic::worker
