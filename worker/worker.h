// Worker: one training worker's run, as RunWorker (trainer.h) starts it.
//
// Run() loads this worker's data and model and picks how it trains
// (worker/steps/make_step.h: the one place that reads the job's kind),
// joins the job, offers initial values, and then loops one clock at a time
// over its StepStrategy (worker/step.h): pulls ahead, compute, push, the
// next pull. Around each clock it consults its StepGate (worker/gate.h: an
// elastic job's data units, a re-planned job's migration barrier), and a
// worker that lost its lease and rejoined skips to the live workers' clock.
// Worker 0 saves parameter snapshots for the accuracy curve; the stats
// file is rewritten every few seconds and at the end.
//
// Threading: the thread that calls Run() trains and owns every member but
// those grouped as shared below, which the MemberClient's heartbeat thread
// also reaches (each is thread-safe on its own, or touched there only as its
// comment says). Torch-free header.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/push_ledger.h"
#include "common/status.h"
#include "config/job.h"
#include "proto/stats.pb.h"
#include "transport/message.h"
#include "transport/metrics.h"
#include "worker/gate.h"
#include "worker/progress.h"
#include "worker/step.h"
#include "worker/trainer.h"

namespace geodesic::cluster {
class MemberClient;
}  // namespace geodesic::cluster

namespace geodesic::worker {

class PsClient;

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
  // The strategy, membership, the shards, the initial values: everything
  // before the first clock.
  Status Begin();
  Status JoinJob();
  // The clocks from c_ on, until the job's last or a stop.
  Status Train();
  // One clock: catch-up after a rejoin, the gate, the strategy's phases.
  Status Step();
  Status CatchUp(int64_t rejoin);
  Status Push(const Update& u);
  void MaybeSnapshot(TimePoint now);
  // `last`: the snapshot that closes the accuracy curve.
  void SaveSnapshot(bool last);
  void PublishProgress();
  std::string DescribeBlock();
  stats::WorkerStats Stats(bool final);
  // Publishes the stats as metrics, and writes them to the stats file.
  void WriteStats(bool final);
  Status Finish();
  // Makes sure the coordinator heard "done" (and confirmed what the gate reported).
  void WaitForCoordinator();
  // Stopped mid-training: leaving the job, or Cancelled.
  Status Stopped();
  // Stopped before the first clock (`why`, what Begin returned): an elastic
  // worker leaves as it would mid-training; any other returns `why`.
  Status StoppedStarting(const Status& why);

  // Constant after construction.
  const WorkerProcessOptions& options_;
  const JobSpec& job_;
  zmq::context_t& ctx_;
  const Clock* const clock_;

  // The loop's, lent to the strategy and the gate, which it outlives.
  StepEnv env_;

  // Shared with the heartbeat thread. member_ comes last: until it is gone,
  // its thread reads progress_, fills heartbeats through gate_ (an elastic
  // gate's unit queue) and hands replies to gate_ and step_ (a federated
  // gateway's admitted keys).
  transport::TrafficCounters counters_;  // every socket of this process counts here (atomics)
  transport::ProcessMetrics metrics_;    // published by the loop, served by its own thread
  std::atomic<bool> pub_ready_{false};   // /readyz
  Progress progress_;
  std::shared_ptr<StepGate> gate_;
  std::unique_ptr<StepStrategy> step_;
  std::unique_ptr<cluster::MemberClient> member_;

  // Owned by the loop's thread.
  std::optional<PushLedger> ledger_;  // before ps_, which counts into it
  std::unique_ptr<PsClient> ps_;
  int64_t start_clock_ = 0;  // the clock this run started at (a resumed job, a rejoin: not 0)
  int64_t c_ = 0;            // the clock being trained
  TimePoint start_{}, last_snapshot_{}, last_stats_{};
};

}  // namespace geodesic::worker
