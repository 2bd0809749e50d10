// StepStrategy: what one clock of training does for one kind of job. The
// Worker (worker/worker.h) is the loop around it: it owns the clock,
// membership, rejoining, the gate (worker/gate.h: elasticity, migration),
// snapshots' timing, progress and stats, and asks its strategy, one per job
// kind, for each phase of a clock:
//
//   BeforeCompute(c, more)  pulls sent ahead of the compute (prefetch, pipeline)
//   Compute(c)              the clock's update (a gradient, a round's progress)
//   (the loop pushes it, then waits until few clocks are unacknowledged)
//   AfterPush(c, more)      the pull of the next clock, if not sent ahead
//   AwaitNext(c)            waits for that pull and starts clock c + 1 from it
//
// `more`: a clock follows this one. The strategies (worker/steps/):
// SgdStep, one minibatch gradient a clock (synchronous or bounded-staleness
// SGD); LocalSgdStep, a round of local SGD steps whose progress is pushed
// (local SGD, DiLoCo, streaming fragments, overlapped rounds);
// FederatedStep, a federated round of this executor's clients. A new kind
// of job is a new strategy (worker/steps/make_step.h picks one), a new
// source of minibatch gradients a new Minibatches (worker/minibatches.h).
//
// A strategy owns its model and whatever its kind keeps between clocks; it
// borrows the StepEnv, which the Worker owns and which outlives it.
// Threading: the loop's thread only (a federated strategy's client gateway
// also has the heartbeat thread authorize keys, worker/federated/client_gateway.h).
// Torch-free header.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "cluster/chunking.h"
#include "common/clock.h"
#include "common/status.h"
#include "config/job.h"
#include "proto/geodesic.pb.h"
#include "proto/stats.pb.h"

namespace geodesic::cluster {
class MemberClient;
struct MemberOptions;
}  // namespace geodesic::cluster

namespace geodesic::worker {

class PsClient;
class Progress;
class StepGate;

// A worker's counters, in one place; the stats file and the heartbeats
// report them. Each is written by the part named beside it.
struct StepCounters {
  // The loop: seconds computing, communicating, held by the staleness bound.
  double compute_s = 0, comm_s = 0, wait_s = 0;
  int64_t jumped = 0;  // the loop: clocks skipped to catch up after a rejoin
  // The strategies and their minibatches.
  double loss_ema = -1, acc_ema = -1;  // training loss and accuracy (EWMA)
  int64_t samples = 0, batches = 0;
  int64_t skipped = 0;  // minibatch steps without a usable gradient
  int64_t clipped = 0;  // minibatch gradients scaled down to optimizer.clip_norm
  // LocalSgdStep (training.overlap_steps): rounds whose average was folded in
  // mid-round, and the seconds it waited for one.
  int64_t early_merges = 0;
  double merge_wait_s = 0;
  // FederatedStep: this executor's clients by outcome.
  int64_t clients_trained = 0, clients_dropped = 0, clients_late = 0, clients_unusable = 0, clients_clipped = 0;
  int64_t clients_refused = 0, real_updates = 0;
  // MigrationGate: seconds waiting at migration barriers, and how many.
  double barrier_s = 0;
  int barriers = 0;
};

// What the Worker lends its strategy and gate. Fields the Worker sets once
// joined are null before.
struct StepEnv {
  const JobSpec& job;
  const int id;  // this worker's
  const Clock* const clock;
  const std::atomic<bool>* const stop;
  int64_t clocks = 0;       // the job's clocks for this worker (JobSpec::ClockLimit)
  int64_t total_steps = 0;  // its minibatch steps (the learning-rate schedule's length)
  PsClient* ps = nullptr;
  cluster::MemberClient* member = nullptr;
  StepGate* gate = nullptr;
  Progress* progress = nullptr;
  std::function<std::string()> describe = {};  // why a pull waits, for its periodic report
  StepCounters n = {};
  // Re-planning (docs/planner.md "In a running job"): the clocks pulled
  // and pushed so far say which migration barriers we can still honor.
  int64_t pulled_through = 0, pushed_through = -1;

  // Reports the lowest barrier clock we can still honor (progress.h).
  void NoteFloor();
  // Waits for pull `clock` into `dest`, counting the wait as staleness-bound
  // hold and communication.
  Status WaitPull(int64_t clock, float* dest);
  // Pulls clock `clock` in full values (a start: we hold no copy) into
  // `dest` and waits for it.
  StatusOr<double> PullFull(int64_t clock, float* dest);
  // A start at `clock`: PullFull, except at clock 0 when the shards' initial
  // values are all ours (PsClient::HoldsAllInitial) and `dest` holds them
  // already (returns false then, and the caller fills `dest` if it must).
  StatusOr<bool> PullStart(int64_t clock, float* dest);
};

// A clock's update, as a strategy computed it.
struct Update {
  // Null: nothing usable came out (the strategy said why); every shard is
  // told that the clock is skipped.
  const float* values = nullptr;
  std::shared_ptr<const void> owner;                       // keeps `values` alive until sent
  std::optional<cluster::ChunkRange> only = std::nullopt;  // training.fragments: the chunks pushed
  // The compute ended at `computed`, of which `waited_s` was spent waiting
  // for the network (a mid-round merge); communication counts from
  // `resumed`, later than `computed` when the strategy waited after the compute.
  TimePoint computed{}, resumed{};
  double waited_s = 0;
};

// What a snapshot records (worker 0, for the accuracy curve).
struct SnapshotView {
  const float* values = nullptr;  // the model's values, `count` of them
  int64_t count = 0;
  int64_t step = 0;  // the minibatch step it stands for
  // When the values were there (unset: now): a local-SGD worker takes the
  // shards' model in when it merges, which may be before the snapshot.
  std::optional<TimePoint> at = std::nullopt;
};

class StepStrategy {
 public:
  virtual ~StepStrategy() = default;

  // Before training: what the shards hold for this model (signature and
  // values, JobSpec::ShardValues) and, for the log, what a clock is
  // (" steps", " rounds of 4 local steps").
  virtual wire::ModelSignature signature() const = 0;
  virtual int64_t num_params() const = 0;
  virtual std::string ClockName() const = 0;
  // Joining: a strategy that serves processes of its own (a federated
  // executor's client gateway) listens first and registers its endpoint.
  virtual Status BeforeJoin(cluster::MemberOptions& mo) { return Status::Ok(); }
  // Offers the model's initial values to the shards (PsClient::Init).
  virtual Status Init() = 0;
  // Training starts at `clock`: the data of earlier clocks is skipped, the
  // shards' values of `clock` pulled in full, pulls ahead requested.
  virtual Status Start(int64_t clock) = 0;
  // After a rejoin, training jumps from clock `from` to `to` (the pulls in
  // flight were dropped): as Start; returns the seconds it waited.
  virtual StatusOr<double> Jump(int64_t from, int64_t to) = 0;

  // One clock (see the top of this file).
  virtual Status BeforeCompute(int64_t clock, bool more) { return Status::Ok(); }
  // An error here is the worker's (a diverged model: Detail::kJobFatal).
  virtual StatusOr<Update> Compute(int64_t clock) = 0;
  virtual Status AfterPush(int64_t clock, bool more) = 0;
  virtual Status AwaitNext(int64_t clock) = 0;
  // Clocks of pushes the loop lets go unacknowledged before it waits.
  virtual size_t unacked_clocks() const { return 2; }
  // The last clock's push was acknowledged: training is over.
  virtual void Close() {}

  // Minibatch steps done once `clocks` clocks were (the stats' `steps`).
  virtual int64_t Steps(int64_t clocks) const = 0;
  // Whether worker 0 snapshots at `clock`, `since_last_s` after the last
  // one: by default every `every_s` (eval.snapshot_every_s).
  virtual bool SnapshotDue(int64_t clock, double since_last_s, double every_s) const { return since_last_s >= every_s; }
  // What a snapshot at clock `clock` records; nullopt: none (a model
  // without a network). `last`: the one that closes the curve.
  virtual std::optional<SnapshotView> Snapshot(int64_t clock, bool last) const = 0;
  // Its part of the stats file.
  virtual void AddStats(stats::WorkerStats* s) const = 0;
};

// InvalidArgument (job-fatal) if `n` values hold one beyond the shards'
// bound: every shard would refuse the push (REFUSAL_VALUE_TOO_LARGE).
Status CheckPushable(const float* v, int64_t n, int64_t clock);

}  // namespace geodesic::worker
