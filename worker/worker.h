// Worker: one training worker's run, as RunWorker (trainer.h) starts it.
//
// Run() loads this worker's data partition, builds the model, joins the
// job, offers initial values, and then loops pull -> compute -> push, one
// clock per iteration, with the next pull already in flight while it
// computes (pipeline_depth > 1 keeps several in flight). With
// training.local_steps > 1 a clock is a round of local SGD steps whose
// progress is pushed (local_sgd.h). Re-planned jobs stop at a migration's
// barrier clock until the new shard map arrives; a worker that lost its
// lease skips to the live workers' clock. Worker 0 saves parameter
// snapshots for the accuracy curve; the stats file is rewritten every few
// seconds and at the end.
//
// Threading: the thread that calls Run() trains and owns every member but
// `progress_` (progress.h, thread-safe), which the MemberClient's heartbeat
// thread reads. Torch-free header (the tensors live in worker.cc).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "cluster/chunking.h"
#include "common/clock.h"
#include "common/push_ledger.h"
#include "common/status.h"
#include "config/job.h"
#include "proto/geodesic.pb.h"
#include "proto/stats.pb.h"
#include "transport/message.h"
#include "worker/progress.h"
#include "worker/trainer.h"

namespace at {
class Tensor;
}

namespace geodesic::cluster {
class ClientGateway;
class MemberClient;
struct MemberOptions;
}  // namespace geodesic::cluster

namespace geodesic::worker {

class FederatedRounds;
class FlatModel;
class LocalRounds;
class PsClient;
class UnitQueue;

class Worker {
 public:
  Worker(const WorkerProcessOptions& options, zmq::context_t& ctx, const std::atomic<bool>* stop);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  Status Run();
  // After Run: until the final metrics were scraped (http.linger_s at most).
  // `finished`: Run returned OK (transport::ProcessMetrics::Linger).
  void Linger(bool finished) const { metrics_.Linger(options_.http, finished); }

 private:
  struct Data;  // the partition's tensors, the sampler

  // Setup, in order: data and model, then the job (membership, shards,
  // initial values), then the first pull.
  Status LoadData();
  Status JoinJob();
  Status OpenGateway(cluster::MemberOptions& mo);
  Status FirstPull();

  // One clock: catch-up after a rejoin, the migration barrier, prefetches,
  // compute, push, the next pull.
  Status Step();
  Status CatchUp(int64_t rejoin);
  Status WaitAtBarrier();
  // The barrier in force (kNoBarrier: none); switches to a newer published map first.
  StatusOr<int64_t> Barrier();
  // Requests the pulls through `through` not requested yet (depth > 1),
  // none beyond a barrier.
  Status PullThrough(int64_t through);
  void NoteFloor();
  // This clock's gradient (or round's progress, before Finish) into `grad`;
  // false if nothing usable came out.
  bool Compute(at::Tensor& grad);
  bool ComputeGradient(int64_t step, at::Tensor& grad);
  // Federated: this executor's clients of round c_, pushed as the round's
  // share of the weighted mean update (worker/federated_rounds.h).
  bool ComputeFederated(at::Tensor& grad);
  Status RequestAhead(bool more);
  // Local SGD: ends the round, folding in the previous round's average
  // first when it travelled under this round's compute (overlap_rounds).
  Status FinishRound(at::Tensor& grad, bool* usable, TimePoint* compute_end);
  // training.fragments: the chunks clock `clock` synchronizes (none set:
  // all of them, as without fragments and at the job's last clock).
  std::optional<cluster::ChunkRange> FragmentOf(int64_t clock) const;
  // Starts the next round from the pulled average of clock c_'s chunks.
  void RestartPulled();
  Status PushOrSkip(at::Tensor& grad, bool usable);
  Status WaitPull(int64_t clock);
  // training.overlap_steps > 0, after `taken` steps of the round: folds
  // the previous round's average in once it has arrived, or waits for it
  // from the overlap_steps-th step on; an error is kept in merge_error_ for
  // Step to return.
  void MergeIfArrived(int64_t taken);
  void PublishProgress();
  void SkipBatches(int64_t from_clock, int64_t to_clock);
  std::string DescribeBlock();
  bool SnapshotDue(TimePoint now) const;
  void SaveSnapshot(int64_t clock_now);
  void CloseRoundRecord();  // federated: the round's end stamp and bytes
  stats::WorkerStats Stats(bool final);
  // Publishes the stats as metrics, and writes them to the stats file.
  void WriteStats(bool final);
  Status Finish();
  // Elastic jobs (worker_elastic.cc): the whole training set, the next data
  // unit (false: none left for us), a minibatch of it, the units whose
  // pushes were acknowledged, and leaving when stopped (scaled down).
  Status LoadElasticData();
  StatusOr<bool> TakeUnit();
  const std::vector<int64_t>& NextBatch();
  void NoteAcked();
  Status WaitUnitsConfirmed();
  Status Depart();

  const WorkerProcessOptions& options_;
  const JobSpec& job_;
  zmq::context_t& ctx_;
  const std::atomic<bool>* stop_;
  const Clock* clock_;

  std::unique_ptr<Data> data_;
  std::unique_ptr<FlatModel> model_;
  int64_t n_ = 0;            // parameters
  int64_t total_steps_ = 0;  // minibatch steps
  int64_t steps_ = 0;        // clocks: pushes (rounds of local steps)
  int local_steps_ = 1;
  int fragments_ = 1;  // training.fragments: a clock synchronizes one fragment of the model
  bool local_ = false;
  bool synthetic_ = false;
  int depth_ = 1;  // a pipeline of depth d keeps the pulls of the next d steps in flight
  int64_t bound_ = 0;

  transport::TrafficCounters counters_;
  transport::ProcessMetrics metrics_;   // published by the loop, served by its own thread
  std::atomic<bool> pub_ready_{false};  // shared: /readyz
  Progress progress_;                   // before member_: its heartbeat thread reads it until member_ is gone
  std::unique_ptr<cluster::ClientGateway> gateway_;  // before member_: its heartbeat thread authorizes keys
  std::unique_ptr<cluster::MemberClient> member_;
  wire::RegisterReply assignment_;
  std::optional<PushLedger> ledger_;
  std::unique_ptr<PsClient> ps_;
  // Local SGD: pulls land in rounds_->global(); otherwise in the model.
  std::unique_ptr<LocalRounds> rounds_;
  std::unique_ptr<FederatedRounds> federated_;  // federated jobs only
  int64_t clients_trained_ = 0, clients_dropped_ = 0, clients_unusable_ = 0, clients_clipped_ = 0;
  int64_t clients_refused_ = 0, real_updates_ = 0;
  int64_t clients_late_ = 0;
  float* pull_dest_ = nullptr;

  int64_t c_ = 0;  // the clock being trained
  TimePoint start_{}, last_snapshot_{}, last_stats_{};
  double compute_s_ = 0, comm_s_ = 0, wait_s_ = 0, loss_ema_ = -1, acc_ema_ = -1;
  int64_t samples_ = 0, skipped_ = 0, batches_ = 0, clipped_ = 0;
  int64_t jumped_ = 0;                                 // clocks skipped to catch up after a rejoin
  double barrier_s_ = 0;                               // re-planning: time spent waiting at migration barriers...
  int barriers_ = 0;                                   // ...and how many
  int64_t pending_pull_ = -1;                          // overlap_rounds: the round whose average is in flight
  std::optional<cluster::ChunkRange> pending_chunks_;  // with fragments: the chunks that average covers
  Status merge_error_;
  int64_t early_merges_ = 0;  // rounds whose average was folded in mid-round
  double merge_wait_s_ = 0;   // of which waiting for it (not compute)
  // Re-planning (docs/planner.md "In a running job"): a migration announces
  // a barrier clock M; we push no clock >= M and pull none beyond M until we
  // hold its new shard map. pulled_through_/pushed_through_ say which
  // barriers we can still honor (the floor we report).
  int64_t pulled_through_ = 0, pushed_through_ = -1;
  // Elastic jobs: the units the coordinator holds for us, the one being
  // computed and its batches, and the unit of each clock whose push is not
  // acknowledged yet.
  std::unique_ptr<UnitQueue> units_;
  int64_t unit_ = -1;
  std::vector<std::vector<int64_t>> unit_batches_;
  size_t unit_batch_ = 0;
  std::map<int64_t, int64_t> unit_of_clock_;
};

}  // namespace geodesic::worker
