// Aggregator: a region's tier between its workers and the shards
// (regions.NAME.aggregator; docs/wan.md "Regional aggregation"). To the
// region's workers it is their shards: they push to it and pull from it
// (worker/aggregator_links.h). To the shards it is one member, (AGGREGATOR,
// region index), with a PsClient of its own: per clock it sends one
// combined push, the region's gradients summed in worker order
// (PushRequest.covers), and one pull, whose values answer every worker of
// the region. So the region's uplink carries one push and its downlink one
// pull a clock instead of one per worker, and a BSP job ends with the same
// parameters, bit for bit, as without aggregators (server/shard.h,
// "Determinism").
//
// A clock is forwarded once every live worker of the region has pushed
// it whole (its fragment, with training.fragments) or skipped it (a
// skipped push reaches the shards from the worker too, and is never
// answered here). A worker's push is acknowledged only after the shards
// acknowledged the combined push that carries it, so an acknowledged
// gradient is on the shards, as without an aggregator.
//
// Codecs: the region's workers exchange exact fp32 values with it; towards
// the shards it uses the job's codecs for its region's links, its
// PsClient keeping the push error feedback, and its pulls are changes to
// its own copy of the shards' values (held_), which its workers get exact.
//
// Threading: one thread runs the loop (Run) and owns everything here; the
// membership client heartbeats from its own thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "aggregator/region_sums.h"
#include "cluster/member_client.h"
#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "config/job.h"
#include "transport/http_endpoint.h"
#include "transport/key_owners.h"
#include "transport/message.h"
#include "transport/security.h"
#include "worker/ps_client.h"

namespace geodesic::aggregator {

struct AggregatorOptions {
  JobSpec job;
  int region = 0;               // index in the job file; the aggregator's member id
  std::string coordinator;      // coordinator endpoint
  std::string bind;             // where the region's workers connect; empty: tcp://<region host>:*
  std::string endpoint_file;    // the bound endpoint is written here (the launcher waits for it)
  std::string stats_file;       // counts, written every 2 s and at exit (JSON)
  transport::HttpOptions http;  // /metrics, /healthz, /readyz (ready: joined)
  // Secured jobs: its keypair (its ROUTER is a CURVE server that admits its
  // region's workers' keys only), the coordinator's key, its join token
  // (role aggregator, id: the region index).
  transport::MemberCredentials credentials;
};

class Aggregator {
 public:
  Aggregator(AggregatorOptions options, zmq::context_t& ctx, const Clock* clock);
  ~Aggregator();

  // Binds, joins the job and serves until the job finishes (OK) or `stop`.
  Status Run(const std::atomic<bool>* stop);
  // At exit: keeps /metrics up until its last counts were scraped (http.linger_s).
  void Linger(bool finished) const { metrics_.Linger(options_.http, finished); }

  struct Counts {
    uint64_t pushes_taken = 0;      // worker push messages taken
    uint64_t pushes_refused = 0;    // worker messages refused (bad input)
    uint64_t clocks_forwarded = 0;  // combined pushes sent
    uint64_t late_forwards = 0;     // of these, a late worker's push alone (docs/wan.md)
    uint64_t pulls_served = 0;      // worker pull requests answered
    uint64_t upstream_pulls = 0;    // pulls sent to the shards
    uint64_t unauthorized = 0;      // of the refused, from a key that is not the sender's (secured jobs)
  };
  const Counts& counts() const { return counts_; }

 private:
  struct HeldPull {
    std::string peer;
    uint64_t request_id = 0;
    std::vector<uint32_t> chunks;
    TimePoint since;
  };
  struct ClockPull {
    bool arrived = false;
    std::optional<cluster::ChunkRange> only;  // what was pulled from the shards; unset: every chunk
    // The pulled chunks' values, from parameter `offset` on, and versions.
    std::shared_ptr<const std::vector<float>> values;
    uint64_t offset = 0;
    std::map<uint32_t, uint64_t> versions;  // chunk id -> version
    int64_t min_clock = -1;
    std::vector<HeldPull> waiting;
    bool Has(const std::vector<uint32_t>& ids) const;
  };

  Status Join(const std::atomic<bool>* stop);
  // Secured jobs: the ZAP handler (before the ROUTER binds) and the keys.
  Status StartSecurity(transport::SocketOptions* so);
  // Installs the keys of the region's workers the coordinator lists
  // (heartbeat thread).
  void Authorize(const wire::HeartbeatReply& r) GD_EXCLUDES(keys_mu_);
  // Secured jobs: whether `m`'s connection key is its sender's.
  Status CheckSender(const transport::Message& m) const GD_EXCLUDES(keys_mu_);
  void Serve(transport::Message& m);
  void OnPush(transport::Message& m);
  void OnPull(transport::Message& m);
  // The checks of a worker's push (see docs/wan.md): from a worker of this
  // region, a clock of the job, fp32 chunks of the layout with finite
  // values; the reason in `reason`.
  Status CheckPush(const transport::Message& m, wire::Refusal* reason) const;
  Status CheckChunks(const transport::Message& m, wire::Refusal* reason) const;
  // The chunks clock `clock` pushes (training.fragments); unset: all.
  std::optional<cluster::ChunkRange> FragmentOf(int64_t clock) const;
  // Pulls `clock` from the shards: `only` those chunks, or all.
  void PullUpstream(int64_t clock, ClockPull& p, std::optional<cluster::ChunkRange> only);
  // Answers the held pulls of `clock` that it holds the chunks of; pulls
  // the whole model for the others (a start or a rejoin asks every chunk).
  void AnswerWaiting(int64_t clock, ClockPull& p);
  void Refuse(const transport::Message& m, wire::Refusal reason, const Status& status);
  // Sends the sums that are ready, and the answers the shards gave.
  Status ForwardReady();
  void Acknowledge(const Reply& r);
  // Caches the membership view for this turn of the loop.
  void RefreshView();
  Status PollUpstream(const std::atomic<bool>* stop);
  // Keeps the chunks `p` pulled, as held_ has them now, for its answers.
  void Snapshot(ClockPull& p) const;
  void Answer(int64_t clock, const ClockPull& p, const HeldPull& h);
  // The clock a push's window starts at: the slowest live worker's, as the
  // coordinator last said, or the oldest clock not yet answered.
  int64_t WindowStart() const;
  void WriteStats(bool final);
  // The counts as metric families (docs/observability.md).
  std::vector<prometheus::MetricFamily> Metrics() const;

  AggregatorOptions options_;
  zmq::context_t& ctx_;
  const Clock* clock_;
  int first_worker_ = 0, num_workers_ = 0;  // the region's worker ids
  // The region's workers, the shards, the coordinator.
  transport::TrafficCounters counters_, upstream_counters_, member_counters_;
  std::unique_ptr<transport::ZapHandler> zap_;  // secured jobs: admits the region's workers' keys only
  mutable Mutex keys_mu_;
  transport::KeyOwners key_owners_ GD_GUARDED_BY(keys_mu_);
  std::unique_ptr<transport::Socket> socket_;  // ROUTER: the region's workers
  std::unique_ptr<cluster::MemberClient> member_;
  std::unique_ptr<worker::PsClient> ps_;
  cluster::ChunkLayout layout_;
  std::vector<uint32_t> fragment_cuts_;  // training.fragments' cuts of the layout (FragmentOf)
  cluster::MembershipView view_;         // as of this turn of the loop
  std::unique_ptr<RegionSums> sums_;
  std::map<int64_t, ClockPull> pulls_;  // recent clocks' pulls
  // The shards' values as last pulled: the copy a lossy pull codec's
  // changes are added to (compression.pull), exact values under fp32.
  std::vector<float> held_;
  Counts counts_;
  transport::ProcessMetrics metrics_;
  std::atomic<bool> ready_{false};  // /readyz: joined
};

// Runs the aggregator of a process until the job ends or `stop`.
Status RunAggregator(const AggregatorOptions& options, zmq::context_t& ctx, const std::atomic<bool>* stop);

}  // namespace geodesic::aggregator
