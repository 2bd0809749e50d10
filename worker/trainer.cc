#include "worker/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "cluster/member_client.h"
#include "common/files.h"
#include "common/log.h"
#include "common/wait.h"
#include "compression/codec.h"
#include "worker/batcher.h"
#include "worker/dataset.h"
#include "worker/local_sgd.h"
#include "worker/model.h"
#include "worker/ps_client.h"
#include "worker/snapshot.h"

namespace geodesic::worker {
namespace {

// What the training thread shares with the heartbeat thread and the stats file.
struct Progress {
  std::mutex mu;
  int64_t clock = 0;  // steps pushed
  bool done = false;
  int64_t barrier_floor = 0;  // re-planning: the lowest barrier clock we can still honor
  uint64_t at_barrier = 0;    // re-planning: the migration whose barrier we wait at
  wire::WorkerProgress p;     // guarded by mu
};

cluster::MemberOptions MemberOptionsFor(const JobSpec& job, wire::Role role, int id, const std::string& coordinator,
                                        const wire::ModelSignature& sig,
                                        const transport::MemberCredentials& credentials) {
  cluster::MemberOptions mo;
  mo.job = job.name;
  mo.role = role;
  mo.id = id;
  mo.coordinator = coordinator;
  mo.region = role == wire::WORKER ? job.RegionOfWorker(id).name : job.CoordinatorRegion().name;
  mo.model = sig;
  mo.timing = job.membership;
  mo.max_message_bytes = job.wire.max_message_bytes;
  if (credentials.enabled()) {
    mo.curve = transport::CurveSocket{.keys = credentials.keys, .server_key = credentials.coordinator_key};
    mo.token = credentials.token;
  }
  return mo;
}

PsClientOptions PsOptionsFor(const JobSpec& job, wire::Role role, int id) {
  PsClientOptions po;
  if (role == wire::WORKER) {
    const std::string& mine = job.RegionOfWorker(id).name;
    for (const auto& r : job.regions) po.push_codecs[r.name] = job.PushCodec(mine, r.name);
  }
  po.error_feedback = job.compression.error_feedback;
  if (job.compression.momentum_correction) po.local_momentum = job.optimizer.momentum;
  po.sparsity_warmup_steps = job.compression.sparsity_warmup_steps;
  po.seed = job.seed;
  po.job = job.name;
  po.role = role;
  po.id = id;
  po.wire = job.wire;
  po.timing = job.membership;
  // A shard silent for a lease has probably been restarted (its requests
  // in flight died with it): ask again then.
  po.retry_after_s = std::max(1.0, job.membership.lease_ms / 1000.0);
  return po;
}

// Replicated jobs: shard endpoints follow the coordinator's view.
std::function<uint64_t(uint64_t, std::vector<wire::ServerInfo>*)> ServersView(const cluster::MemberClient& member) {
  return [&member](uint64_t seen, std::vector<wire::ServerInfo>* out) {
    if (member.servers_epoch() <= seen) return seen;
    cluster::MembershipView v = member.view();
    *out = std::move(v.servers);
    return v.servers_epoch;
  };
}

torch::Device PickDevice(TrainingDevice want) {
  if (want == TrainingDevice::kCuda || (want == TrainingDevice::kAuto && torch::cuda::is_available())) {
    if (!torch::cuda::is_available())
      GD_LOG(WARNING) << "training.device cuda asked for but not available; using cpu";
    else
      return torch::kCUDA;
  }
  return torch::kCPU;
}

}  // namespace

Status RunWorker(const WorkerProcessOptions& options, zmq::context_t& ctx, const std::atomic<bool>* stop) {
  const JobSpec& job = options.job;
  const Clock* clock = RealClock::Get();
  torch::set_num_threads(job.training.threads);
  torch::Device device = PickDevice(job.training.device);
  if (device.is_cuda()) GD_LOG(WARNING) << "cuda training keeps parameters on the host between steps";
  device = torch::kCPU;  // Debian's LibTorch is CPU-only; the flat buffers live on the host.

  // Data first: a missing dataset should fail before we join the job.
  bool synthetic = job.model.name == ModelKind::kSynthetic;
  torch::Tensor images, labels;
  std::unique_ptr<BatchSampler> sampler;
  if (!synthetic) {
    GD_ASSIGN_OR_RETURN(ImageSet train, LoadFashionMnist(job.data.path, "train"));
    std::vector<int64_t> part = IidPartition(train.count, job.NumWorkers(), options.id, job.seed);
    // Keep only this worker's partition, renumbered 0..n-1.
    images = ImagesTensor(train, &part);
    labels = LabelsTensor(train, &part);
    std::vector<int64_t> local(part.size());
    for (size_t i = 0; i < local.size(); ++i) local[i] = static_cast<int64_t>(i);
    sampler = std::make_unique<BatchSampler>(std::move(local), job.data.batch_size, SamplerSeed(job.seed, options.id));
    GD_LOG(INFO) << "partition: " << part.size() << " of " << train.count << " training samples (iid)";
  }
  GD_ASSIGN_OR_RETURN(auto model, FlatModel::Create(job.model, job.seed, device));
  const int64_t n = model->num_params();
  const int64_t total_steps = job.StepsPerWorker();  // minibatch steps
  const int64_t steps = job.ClocksPerWorker();       // clocks: pushes (rounds of local steps)
  const int local_steps = job.training.local_steps;
  const bool local = local_steps > 1;

  transport::TrafficCounters counters;
  cluster::MemberClient member(
      ctx,
      MemberOptionsFor(job, wire::WORKER, options.id, options.coordinator, model->signature(), options.credentials),
      &counters, clock);
  GD_ASSIGN_OR_RETURN(wire::RegisterReply assignment, member.Join(stop));
  PsClientOptions po = PsOptionsFor(job, wire::WORKER, options.id);
  if (job.replication.backups > 0) po.servers_view = ServersView(member);
  po.curve_keys = options.credentials.keys;
  std::optional<PushLedger> ledger;
  if (!options.stats_file.empty()) {
    GD_ASSIGN_OR_RETURN(ledger, PushLedger::Create(PushLedgerPath(options.stats_file)));
    po.ledger = &*ledger;
  }
  PsClient ps(ctx, po, assignment, &counters, clock);
  GD_RETURN_IF_ERROR(ps.Connect());
  if (ps.num_params() != static_cast<uint64_t>(n))
    return FailedPrecondition("shard map has " + std::to_string(ps.num_params()) + " parameters, model has " +
                              std::to_string(n));
  Progress progress;
  progress.clock = assignment.start_clock();
  progress.p.set_target_steps(total_steps);
  member.Start([&progress](wire::Heartbeat* hb) {
    std::lock_guard<std::mutex> lock(progress.mu);
    hb->set_clock(progress.clock);
    hb->set_done(progress.done);
    hb->set_barrier_floor(progress.barrier_floor);
    hb->set_at_barrier(progress.at_barrier);
    *hb->mutable_worker() = progress.p;
  });
  // After the heartbeats start: they keep our lease, and they bring the
  // news of a shard that fails over meanwhile (the init follows it).
  GD_RETURN_IF_ERROR(ps.Init(model->params().data_ptr<float>(), stop));

  const int64_t bound = job.training.staleness_bound;
  auto describe_block = [&]() -> std::string {
    cluster::MembershipView v = member.view();
    if (!v.valid || v.live.empty()) return "";
    size_t slow = 0;
    for (size_t i = 1; i < v.live.size(); ++i)
      if (v.clocks[i] < v.clocks[slow]) slow = i;
    std::lock_guard<std::mutex> lock(progress.mu);
    return "worker " + std::to_string(options.id) + " at clock " + std::to_string(progress.clock) +
           "; slowest live worker " + std::to_string(v.live[slow]) + " at clock " + std::to_string(v.clocks[slow]) +
           " (bound " + std::to_string(bound) + ")";
  };

  int64_t c = assignment.start_clock();
  // A worker that starts later than clock 0 (a resumed job, a rejoin) takes
  // up its data order where step c would have it, as an uninterrupted run.
  auto skip_batches = [&](int64_t from_clock, int64_t to_clock) {
    if (sampler)
      for (int64_t k = from_clock * local_steps; k < std::min(total_steps, to_clock * local_steps); ++k)
        sampler->Next();
  };
  skip_batches(0, c);
  // Local SGD (training.local_steps > 1): pulls land in `global`, our copy
  // of the shards' model (pulls of changes add into it); the model trains
  // on its own values, and `base` is where this round's progress started.
  LocalRounds rounds(job, model->params());
  float* pull_dest = local ? rounds.global().data_ptr<float>() : model->params().data_ptr<float>();
  GD_RETURN_IF_ERROR(ps.RequestPull(c, {.full = true}));  // we hold no copy yet
  GD_ASSIGN_OR_RETURN(PullTiming first, ps.WaitPull(c, false, pull_dest, stop, describe_block));
  (void)first;
  if (local) rounds.Restart();

  GD_LOG(INFO) << "training " << (steps - c)
               << (local ? " rounds of " + std::to_string(local_steps) + " local steps" : " steps") << " of batch "
               << job.data.batch_size << " (" << job.model.name << ", " << n << " parameters, staleness bound " << bound
               << ")";
  const TimePoint start = clock->Now();
  TimePoint last_snapshot = start - std::chrono::hours(1);
  double compute_s = 0, comm_s = 0, wait_s = 0, loss_ema = -1, acc_ema = -1;
  int64_t samples = 0, skipped = 0, batches = 0;
  int64_t jumped = 0;    // clocks skipped to catch up after a rejoin
  double barrier_s = 0;  // re-planning: time spent waiting at migration barriers...
  int barriers = 0;      // ...and how many
  std::vector<torch::Tensor> synthetic_grads;
  // Local SGD snapshots the shards' model as last pulled (the average), not
  // this worker's own progress since; steps count minibatches.
  auto save_snapshot = [&](int64_t clock_now) {
    if (options.id != 0 || options.snapshot_dir.empty() || synthetic) return;
    const float* values = local ? rounds.global().data_ptr<float>() : model->params().data_ptr<float>();
    Status s = WriteSnapshot(options.snapshot_dir, local ? clock_now * local_steps : clock_now,
                             Seconds(clock->Now() - start), values, n);
    if (!s.ok()) GD_LOG(WARNING) << "snapshot: " << s;
  };
  auto write_stats = [&](bool final) {
    if (options.stats_file.empty()) return;
    nlohmann::json j;
    j["role"] = "worker";
    j["id"] = options.id;
    j["finished"] = final;
    j["bytes_sent"] = counters.bytes_sent.load();
    j["bytes_received"] = counters.bytes_received.load();
    j["messages_sent"] = counters.messages_sent.load();
    j["messages_received"] = counters.messages_received.load();
    j["steps"] = local ? batches : c - assignment.start_clock() - jumped;
    j["clocks"] = c - assignment.start_clock() - jumped;
    j["clocks_skipped_on_rejoin"] = jumped;
    j["samples"] = samples;
    j["skipped_steps"] = skipped;
    j["pushes_refused"] = ps.pushes_refused();
    if (ledger) {
      j["chunks_acknowledged"] = ledger->counts().acknowledged;
      j["push_ledger"] = ledger->path();
    }
    j["redirects"] = ps.redirects();
    if (job.wan.replan) {
      j["migration_barriers"] = barriers;
      j["migration_barrier_seconds"] = barrier_s;
      j["chunks_rerouted"] = ps.chunks_rerouted();
      j["moved_refusals"] = ps.moved_refusals();
    }
    j["pull_resyncs"] = ps.resyncs();
    j["residual_norm"] = std::sqrt(ps.error_feedback().ResidualSquaredNorm());
    j["training_seconds"] = Seconds(clock->Now() - start);
    j["compute_seconds"] = compute_s;
    j["comm_seconds"] = comm_s;
    j["wait_seconds"] = wait_s;
    j["loss"] = loss_ema;
    j["train_accuracy"] = acc_ema;
    nlohmann::json links = nlohmann::json::object();
    for (const LinkEstimate& e : ps.LinkEstimates())
      links[e.server_region] = {{"min_rtt_ms", e.min_rtt_ms}, {"mbit", e.mbit}, {"samples", e.samples}};
    j["links_from_servers"] = links;
    Status s = WriteFileAtomic(options.stats_file, j.dump(2), /*durable=*/false);
    if (!s.ok()) GD_LOG(WARNING) << s;
  };
  TimePoint last_stats = start;

  // One minibatch's gradient into `grad` (the model's .grad buffers); false
  // if the loss or the gradient is not finite.
  auto compute_gradient = [&](int64_t step, torch::Tensor& grad) -> bool {
    bool usable = true;
    if (synthetic) {
      if (synthetic_grads.empty()) {
        // Each worker its own gradients (seeded by job and worker), so that
        // sums over workers depend on their order as real ones do.
        torch::manual_seed(SamplerSeed(job.seed, options.id));
        for (int k = 0; k < 4; ++k) synthetic_grads.push_back(torch::randn({n}) * 1e-3);
      }
      grad.copy_(synthetic_grads[step % synthetic_grads.size()]);
    } else {
      const std::vector<int64_t>& idx = sampler->Next();
      torch::Tensor sel =
          torch::from_blob(const_cast<int64_t*>(idx.data()), {static_cast<int64_t>(idx.size())}, torch::kInt64);
      torch::Tensor x = images.index_select(0, sel), y = labels.index_select(0, sel);
      torch::Tensor logits = model->Forward(x);
      torch::Tensor loss = torch::nn::functional::cross_entropy(logits, y);
      loss.backward();
      double l = loss.item<double>();
      double acc = logits.argmax(1).eq(y).to(torch::kFloat32).mean().item<double>();
      usable = std::isfinite(l) && compression::CountNonFinite(grad.data_ptr<float>(), n) == 0;
      if (usable) {
        loss_ema = loss_ema < 0 ? l : 0.95 * loss_ema + 0.05 * l;
        acc_ema = acc_ema < 0 ? acc : 0.95 * acc_ema + 0.05 * acc;
      }
      samples += static_cast<int64_t>(idx.size());
    }
    return usable;
  };

  auto wait_pull = [&](int64_t clock) -> Status {
    GD_ASSIGN_OR_RETURN(PullTiming t, ps.WaitPull(clock, false, pull_dest, stop, describe_block));
    wait_s += t.bound_seconds;
    comm_s += t.wait_seconds - t.bound_seconds;
    return Status::Ok();
  };
  int64_t pending_pull = -1;  // overlap_rounds: the round whose average is in flight

  // A pipeline of depth d keeps the pulls of the next d steps in flight.
  const int depth = job.training.pipeline_depth;
  // Re-planning (docs/planner.md "In a running job"): a migration announces
  // a barrier clock M; we push no clock >= M and pull none beyond M until we
  // hold its new shard map. pulled_through/pushed_through say which
  // barriers we can still honor (the floor we report).
  constexpr int64_t kNoBarrier = std::numeric_limits<int64_t>::max();
  int64_t pulled_through = c, pushed_through = c - 1;
  auto note_floor = [&]() {
    std::lock_guard<std::mutex> lock(progress.mu);
    progress.barrier_floor = std::max(pushed_through + 1, pulled_through);
  };
  // The barrier in force (kNoBarrier: none); switches to a newer published map first.
  auto barrier = [&]() -> StatusOr<int64_t> {
    if (!job.wan.replan) return kNoBarrier;
    cluster::MembershipView v = member.view();
    if (v.shard_map.version() > ps.shard_map().version) GD_RETURN_IF_ERROR(ps.SwitchMap(v.shard_map));
    if (v.migration.id() == 0 || v.migration.new_map().version() <= ps.shard_map().version) return kNoBarrier;
    return v.migration.barrier_clock();
  };
  // Requests the pulls through `through` not requested yet (depth > 1),
  // none beyond a barrier.
  auto pull_through = [&](int64_t through) -> Status {
    GD_ASSIGN_OR_RETURN(int64_t m, barrier());
    for (int64_t k = pulled_through + 1; k <= std::min({through, m, steps - 1}); ++k) {
      GD_RETURN_IF_ERROR(ps.RequestPull(k));
      pulled_through = k;
    }
    note_floor();
    return Status::Ok();
  };
  if (depth > 1) GD_RETURN_IF_ERROR(pull_through(c + depth - 1));
  note_floor();
  for (; c < steps; ++c) {
    if (stop->load()) break;
    // Cut off for longer than our lease (a partition), we were dropped from
    // the live set and registered again: the others went on, so skip to
    // their clock with the current model instead of making them wait while
    // we compute the clocks they already closed.
    if (int64_t rejoin = member.TakeRejoinClock(); rejoin > c + 1 && rejoin < steps) {
      GD_LOG(WARNING) << "rejoined after losing our lease; skipping clocks " << c << ".." << rejoin - 1
                      << " to the live workers' clock " << rejoin;
      GD_ASSIGN_OR_RETURN(double drained, ps.WaitAcks(0, stop));
      comm_s += drained;
      ps.DropPulls();
      pending_pull = -1;
      skip_batches(c, rejoin);
      jumped += rejoin - c;
      c = rejoin;
      GD_RETURN_IF_ERROR(ps.RequestPull(c, {.full = true}));
      GD_ASSIGN_OR_RETURN(PullTiming t, ps.WaitPull(c, false, pull_dest, stop, describe_block));
      comm_s += t.wait_seconds;
      if (local) rounds.Restart();
      for (int k = 1; k < depth && c + k < steps; ++k) GD_RETURN_IF_ERROR(ps.RequestPull(c + k));
      pulled_through = std::min<int64_t>(c + depth - 1, steps - 1);
      pushed_through = c - 1;
      {
        std::lock_guard<std::mutex> lock(progress.mu);
        progress.clock = c;
      }
    }
    if (job.wan.replan) {
      GD_ASSIGN_OR_RETURN(int64_t m, barrier());
      if (c >= m) {
        // At the barrier: every push below it acknowledged, then wait for
        // the new map (or for the coordinator to drop the migration).
        GD_ASSIGN_OR_RETURN(double drained, ps.WaitAcks(0, stop));
        comm_s += drained;
        const uint64_t id = member.view().migration.id();
        GD_LOG(INFO) << "migration " << id << ": waiting at the barrier, clock " << c;
        {
          std::lock_guard<std::mutex> lock(progress.mu);
          progress.at_barrier = id;
        }
        member.Nudge();
        const TimePoint b0 = clock->Now();
        WaitReporter report(clock, std::chrono::seconds(job.membership.report_after_s));
        while (!stop->load()) {
          GD_ASSIGN_OR_RETURN(m, barrier());
          if (c < m) break;
          if (clock->Now() - b0 > std::chrono::minutes(10))
            return DeadlineExceeded("migration " + std::to_string(id) + ": no new shard map after 10 minutes");
          if (report.Due()) GD_LOG(INFO) << "migration " << id << ": still waiting at the barrier, clock " << c;
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        {
          std::lock_guard<std::mutex> lock(progress.mu);
          progress.at_barrier = 0;
        }
        barrier_s += Seconds(clock->Now() - b0);
        ++barriers;
        GD_LOG(INFO) << "migration " << id << ": through the barrier after "
                     << static_cast<int>(1e3 * Seconds(clock->Now() - b0)) << " ms (shard map version "
                     << ps.shard_map().version << ")";
      }
    }
    const bool more = c + 1 < steps;
    // Prefetch: the request (and across a WAN the reply) overlaps the compute below.
    if (!local && depth == 1 && more && job.training.prefetch) {
      GD_RETURN_IF_ERROR(ps.RequestPull(c + 1, {.after_own_push = true}));
      pulled_through = c + 1;
      note_floor();
    }
    if (depth > 1) GD_RETURN_IF_ERROR(pull_through(c + depth));

    TimePoint t0 = clock->Now();
    if (options.id == 0 && Seconds(t0 - last_snapshot) >= job.eval.snapshot_every_s) {
      save_snapshot(c);
      last_snapshot = t0;
    }
    torch::Tensor grad = model->NewGradBuffer();
    bool usable = true;
    if (!local) {
      usable = compute_gradient(c, grad);
      ++batches;
    } else {
      // A round: local steps on our own model, then its progress is pushed.
      const double lr_factor = LearningRateFactor(job.optimizer, c, steps);
      int took = 0;
      for (int64_t k = c * local_steps; k < std::min(total_steps, (c + 1) * local_steps); ++k) {
        grad.zero_();
        ++batches;
        if (!compute_gradient(k, grad)) {
          ++skipped;
          GD_LOG(ERROR) << "step " << k << ": loss or gradient is not finite; skipping this local step";
          continue;
        }
        rounds.Step(grad, lr_factor);
        ++took;
      }
      usable = took > 0;
    }
    TimePoint t1 = clock->Now();
    compute_s += Seconds(t1 - t0);
    ps.NoteComputeSeconds(Seconds(t1 - t0));

    if (local) {
      // With overlap, the previous round's average was requested when that
      // round was pushed and has had this round's compute to arrive.
      const bool merge = pending_pull == c;
      if (merge) {
        GD_RETURN_IF_ERROR(wait_pull(c));  // counted as communication there
        pending_pull = -1;
        t1 = clock->Now();
      }
      if (usable)
        grad = rounds.Finish(merge);
      else if (merge)
        rounds.Restart();
    }
    if (usable) {
      auto owner = std::make_shared<torch::Tensor>(grad);
      GD_RETURN_IF_ERROR(ps.Push(c, grad.data_ptr<float>(), std::shared_ptr<const void>(owner, owner->data_ptr())));
    } else {
      if (!local) ++skipped;
      GD_LOG(ERROR) << (local ? "round " : "step ") << c << ": loss or gradient is not finite; skipping this "
                    << (local ? "round's" : "step's") << " push";
      GD_RETURN_IF_ERROR(ps.PushSkipped(c));
    }
    pushed_through = c;
    if (more && (local || !job.training.prefetch)) {
      GD_RETURN_IF_ERROR(ps.RequestPull(c + 1));
      pulled_through = c + 1;
    }
    if (more && local && job.training.overlap_rounds) pending_pull = c + 1;
    note_floor();
    // Keep at most two clocks (or the pipeline's depth + 1) of pushes
    // unacknowledged, bounding memory.
    GD_ASSIGN_OR_RETURN(double acked_wait, ps.WaitAcks(std::max(2, depth + 1), stop));
    (void)acked_wait;
    comm_s += Seconds(clock->Now() - t1);  // sending the push and any ack wait
    if (more && pending_pull < 0) {
      GD_RETURN_IF_ERROR(wait_pull(c + 1));
      if (local) rounds.Restart();
    }
    {
      std::lock_guard<std::mutex> lock(progress.mu);
      progress.clock = c + 1;
      auto& p = progress.p;
      p.set_steps(local ? batches : c + 1 - assignment.start_clock() - jumped);
      p.set_samples(samples);
      p.set_loss(loss_ema);
      p.set_train_accuracy(acc_ema);
      p.set_compute_seconds(compute_s);
      p.set_comm_seconds(comm_s);
      p.set_wait_seconds(wait_s);
      p.clear_links();
      for (const LinkEstimate& e : ps.LinkEstimates()) {
        auto* l = p.add_links();
        l->set_server_region(e.server_region);
        l->set_min_rtt_ms(e.min_rtt_ms);
        l->set_mbit(e.mbit);
        l->set_samples(e.samples);
      }
    }
    if (Seconds(clock->Now() - last_stats) > 2.0) {
      write_stats(false);
      last_stats = clock->Now();
    }
  }
  if (stop->load()) {
    write_stats(false);
    return Cancelled("stopped at clock " + std::to_string(c));
  }
  GD_ASSIGN_OR_RETURN(double final_wait, ps.WaitAcks(0, stop));
  comm_s += final_wait;
  // The model as this worker last saw it closes the accuracy curve.
  save_snapshot(c);
  double seconds = Seconds(clock->Now() - start);
  {
    std::lock_guard<std::mutex> lock(progress.mu);
    progress.done = true;
    progress.p.set_comm_seconds(comm_s);
  }
  write_stats(true);
  GD_LOG(INFO) << "done: " << (local ? batches : c - assignment.start_clock() - jumped) << " steps, " << samples
               << " samples in " << seconds << " s (compute " << compute_s << " s, network " << comm_s
               << " s, staleness bound " << wait_s << " s)";
  // Make sure the coordinator heard "done" before we leave.
  uint64_t seen = member.replies();
  WaitReporter report(clock, std::chrono::seconds(job.membership.report_after_s));
  TimePoint deadline = clock->Now() + Millis(job.membership.lease_ms * 2);
  while (member.replies() < seen + 2 && clock->Now() < deadline && !stop->load()) {
    if (report.Due()) GD_LOG(INFO) << "waiting for the coordinator to note that we are done";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  member.Stop(true);
  return Status::Ok();
}

Status RunEvaluator(const EvaluatorOptions& options, zmq::context_t& ctx, const std::atomic<bool>* stop) {
  const JobSpec& job = options.job;
  const Clock* clock = RealClock::Get();
  GD_ASSIGN_OR_RETURN(auto model, FlatModel::Create(job.model, job.seed));
  // A missing test set should fail now, not after training; it is loaded
  // once training has ended, so that it takes no CPU from the workers.
  if (model->has_network()) {
    for (const char* f : {"/t10k-images-idx3-ubyte.gz", "/t10k-labels-idx1-ubyte.gz"})
      if (!std::filesystem::exists(job.data.path + f))
        return NotFound("Fashion-MNIST test file " + job.data.path + f +
                        " is missing; install it with `apt-get install dataset-fashion-mnist`");
  }
  transport::TrafficCounters counters;
  cluster::MemberClient member(
      ctx, MemberOptionsFor(job, wire::EVALUATOR, 0, options.coordinator, model->signature(), options.credentials),
      &counters, clock);
  GD_ASSIGN_OR_RETURN(wire::RegisterReply assignment, member.Join(stop));
  member.Start(nullptr);
  PsClientOptions po = PsOptionsFor(job, wire::EVALUATOR, 0);
  if (job.replication.backups > 0) po.servers_view = ServersView(member);
  po.curve_keys = options.credentials.keys;
  PsClient ps(ctx, po, assignment, &counters, clock);
  GD_RETURN_IF_ERROR(ps.Connect());

  // Wait, without a deadline (training takes as long as it takes), until
  // every worker is done or dead; report what we wait for.
  const int workers = job.NumWorkers();
  WaitReporter report(clock, std::chrono::seconds(30));
  while (!stop->load()) {
    cluster::MembershipView v = member.view();
    if (v.valid && v.done + v.dead >= workers) break;
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
  cluster::MembershipView end_view = member.view();
  // A re-planned job: read the chunks where they are now.
  if (end_view.shard_map.version() > ps.shard_map().version) GD_RETURN_IF_ERROR(ps.SwitchMap(end_view.shard_map));

  GD_RETURN_IF_ERROR(ps.RequestPull(0, {.final = true}));
  GD_ASSIGN_OR_RETURN(PullTiming t, ps.WaitPull(0, true, model->params().data_ptr<float>(), stop));
  (void)t;
  nlohmann::json result;
  result["workers_done"] = end_view.done;
  result["workers_dead"] = end_view.dead;
  result["num_params"] = model->num_params();
  if (!options.dump_params.empty()) {
    std::string raw(reinterpret_cast<const char*>(model->params().data_ptr<float>()),
                    static_cast<size_t>(model->num_params()) * sizeof(float));
    GD_RETURN_IF_ERROR(WriteFileAtomic(options.dump_params, raw));
  }
  if (model->has_network()) {
    GD_ASSIGN_OR_RETURN(ImageSet test, LoadFashionMnist(job.data.path, "test"));
    torch::Tensor images = ImagesTensor(test), labels = LabelsTensor(test);
    if (job.eval.test_samples > 0 && job.eval.test_samples < test.count) {
      images = images.narrow(0, 0, job.eval.test_samples);
      labels = labels.narrow(0, 0, job.eval.test_samples);
    }
    torch::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    TimePoint e0 = clock->Now();
    double acc = Evaluate(*model, images, labels);
    result["test_accuracy"] = acc;
    result["test_samples"] = images.size(0);
    GD_LOG(INFO) << "final model: test accuracy " << acc << " on " << images.size(0) << " samples";
    nlohmann::json curve = nlohmann::json::array();
    std::vector<float> values;
    std::optional<double> to_target;
    for (const auto& snap : ListSnapshots(options.snapshot_dir)) {
      if (stop->load()) return Cancelled("stopped while evaluating snapshots");
      Status s = ReadSnapshot(snap.path, model->num_params(), &values);
      if (!s.ok()) {
        GD_LOG(WARNING) << s;
        continue;
      }
      std::memcpy(model->params().data_ptr<float>(), values.data(), values.size() * sizeof(float));
      double a = Evaluate(*model, images, labels);
      curve.push_back({snap.seconds, snap.step, a});
      if (!to_target && a >= job.eval.target_accuracy) to_target = snap.seconds;
    }
    result["accuracy_curve"] = curve;
    result["target_accuracy"] = job.eval.target_accuracy;
    result["seconds_to_target"] = to_target ? nlohmann::json(*to_target) : nlohmann::json(nullptr);
    GD_LOG(INFO) << "evaluated " << curve.size() << " snapshots in " << Seconds(clock->Now() - e0) << " s";
  }
  GD_RETURN_IF_ERROR(WriteFileAtomic(options.result_file, result.dump(2)));
  member.Stop(true);
  return Status::Ok();
}

}  // namespace geodesic::worker
