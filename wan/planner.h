// The bandwidth-aware planner: places parameter chunks on server shards and
// picks a push and a pull codec per region pair so that the predicted time of
// one synchronous step is as small as possible, given the WAN link matrix.
//
// The cost model (docs/planner.md states it with its assumptions): every
// worker pushes every chunk to its owner, then pulls every chunk back; all
// pushes crossing a directed link in a step share its goodput (bandwidth,
// capped for a lossy link by the Mathis TCP model), and so do all pulls; a
// step takes compute + the slowest (worker region, server region) pair's
// push-then-pull time. Placement is greedy (largest chunk first onto the
// server that keeps the predicted time lowest) followed by a bounded local
// search of single-chunk moves and swaps; everything is deterministic.
//
// A Planner is immutable once created and its methods are const and
// thread-safe. Callers that want the bytes-balanced placement
// (cluster::PlaceChunks) compared pass its owners in. wan/plan_report.h
// prints a plan.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cluster/chunking.h"
#include "common/status.h"
#include "config/job.h"

namespace geodesic::wan {

// A region pair with no declared link (and a region to itself) is
// loopback-fast; a declared bandwidth of 0 ("unlimited") is this fast too.
inline constexpr double kLoopbackDelayMs = 0.05;
inline constexpr double kLoopbackMbit = 10000;
// TCP's maximum segment size on a 1500-byte MTU path, for the Mathis model.
inline constexpr double kMssBytes = 1448;
// Assumed size after the zstd stage, as a share of the codec's bytes.
inline constexpr double kZstdFactor = 0.9;
// Under BBR a push and its pull, however small, take at least this many
// RTTs beyond the round trip itself: after an idle spell BBR paces a burst
// at about the rate its last, app-limited burst was delivered at.
inline constexpr double kBbrExchangeRtts = 0.85;
// Measured compute time of one CNN step (forward + backward) on a batch of
// 64 per worker, sharing a core with the job's other processes.
inline constexpr double kCnnComputeMsPer64 = 30;

// One direction of a link as the cost model sees it.
struct LinkState {
  double delay_ms = kLoopbackDelayMs;     // mean one way (declared delay + jitter / 2)
  double bandwidth_mbit = kLoopbackMbit;  // > 0
  double loss = 0;                        // packet loss fraction in [0, 1)
  bool declared = false;                  // from wan.links (or measured), not the loopback default
};

// The link matrix between a job's regions, one LinkState per direction.
class LinkMatrix {
 public:
  LinkMatrix() = default;
  // Every pair loopback-fast.
  explicit LinkMatrix(std::vector<std::string> regions);
  // The declared wan.links of a parsed job.
  static LinkMatrix FromJob(const JobSpec& job);

  int size() const { return static_cast<int>(regions_.size()); }
  const std::vector<std::string>& regions() const { return regions_; }
  int Index(const std::string& region) const;  // -1 if not a region of the matrix
  LinkState& at(int from, int to) { return links_[from * size() + to]; }
  const LinkState& at(int from, int to) const { return links_[from * size() + to]; }
  double RttMs(int a, int b) const { return at(a, b).delay_ms + at(b, a).delay_ms; }
  // Predicted TCP goodput from -> to: the bandwidth, and with loss l at most
  // MSS / (RTT * sqrt(2l / 3)) (Mathis et al.), one connection's worth,
  // under loss-based congestion control; bandwidth * (1 - l) under BBR.
  double GoodputMbit(int from, int to) const;
  bool bbr() const { return bbr_; }
  void set_bbr(bool bbr) { bbr_ = bbr; }

 private:
  std::vector<std::string> regions_;
  std::vector<LinkState> links_;  // [from * size() + to]
  bool bbr_ = false;              // TCP senders see the links and pace with BBR (JobSpec wan.congestion_control;
                                  // false under proxy emulation)
};

// wan.congestion_control resolved: "auto" reads this machine's
// /proc/sys/net/ipv4/tcp_congestion_control (cubic if unreadable).
std::string CongestionControl(const JobSpec& job);

struct PlannerOptions {
  // Compute time of one step of one worker, in ms, added to every predicted
  // step (it does not change placement). Unset: DefaultComputeMs(job).
  std::optional<double> compute_ms;
  // Codecs are picked from wan.planner_codecs, safest first: a lossier one
  // is used on a region pair only when the safest candidate's predicted step
  // time is more than this fraction above the fastest candidate's there.
  double codec_gain = 0.10;
  // Local-search steps (one move or swap each) per starting placement.
  int max_search_steps = 10000;
};

// kCnnComputeMsPer64 scaled to the job's batch size for "cnn" and "mlp" (an
// upper bound for mlp, not measured); 0 for "synthetic" (no network).
double DefaultComputeMs(const JobSpec& job);

// Codec names per (worker region, server region), region indices as in the
// job; the same either way round, as compression.links.
struct CodecTable {
  int regions = 0;
  std::vector<std::string> push, pull;  // [worker_region * regions + server_region]

  const std::string& Push(int worker_region, int server_region) const {
    return push[worker_region * regions + server_region];
  }
  const std::string& Pull(int worker_region, int server_region) const {
    return pull[worker_region * regions + server_region];
  }
  bool operator==(const CodecTable&) const = default;
};

// One directed link in one step.
struct LinkLoad {
  std::string from, to;
  double push_bytes = 0;        // gradients from `from`'s workers to `to`'s servers
  double pull_bytes = 0;        // parameters from `from`'s servers to `to`'s workers
  double delay_ms = 0;          // one way
  double goodput_mbit = 0;      // LinkMatrix::GoodputMbit
  double serialization_ms = 0;  // (push + pull bytes) * 8 / goodput
  double recovery_ms = 0;       // expected loss recovery of the push and pull bursts (Rates::RecoveryMs)
  double time_ms = 0;           // delay + serialization + recovery; 0 for an idle link
};

// Push-then-pull time of the workers of one region with the servers of one
// region: delay + push bytes / goodput one way, then the same back for pulls.
struct PairTime {
  std::string worker_region, server_region;
  double ms = 0;
};

struct Prediction {
  double compute_ms = 0;
  double comm_ms = 0;           // the slowest pair's time
  double step_ms = 0;           // BSP: compute + comm; bounded staleness: max(compute, comm); local SGD: round / H
  int local_steps = 1;          // training.local_steps H: one exchange per round of H steps
  bool overlap_rounds = false;  // H > 1 with training.overlap_rounds
  int overlap_steps = 0;        // with overlap_rounds: training.overlap_steps N (0: the whole round)
  double round_ms = 0;          // H > 1: H * compute + comm; max(H * compute, comm) with overlap_rounds;
                                // H * compute + max(0, comm - N * compute) with overlap_steps N
  int fragments = 1;            // H > 1: training.fragments P; each round exchanges one fragment in turn
  double fragment_comm_ms = 0;  // H > 1: one round's exchange, averaged over the fragments (comm when P is 1);
                                // round_ms then takes each fragment's own exchange in place of comm
  std::vector<LinkLoad> links;  // every ordered region pair, `from`-major
  std::vector<PairTime> pairs;  // pairs with traffic, worker-region-major
  std::string bottleneck;       // the slowest pair, "asia workers <-> eu servers"; empty if none
};

struct Plan {
  cluster::ShardMap shard_map;
  CodecTable codecs;
  Prediction prediction;
  LinkMatrix links;  // the matrix planned with
};

struct ChunkMove {
  uint32_t chunk = 0;
  int32_t from = 0, to = 0;  // server ids
  bool operator==(const ChunkMove&) const = default;
};

struct Replan {
  std::vector<std::string> drifted;  // one line per link beyond wan.replan_drift; empty: keep the plan
  std::optional<Plan> plan;          // the new plan, when something drifted
  std::vector<ChunkMove> moves;      // from the previous owners to the new plan's, ascending chunk
};

class Planner {
 public:
  // InvalidArgument for a job the planner cannot plan: no servers, no
  // workers, an empty layout, or a codec (job or candidate) that does not parse.
  static StatusOr<Planner> Create(const JobSpec& job, const cluster::ChunkLayout& layout,
                                  const PlannerOptions& options = {});

  const LinkMatrix& declared_links() const;
  const cluster::ChunkLayout& layout() const;
  // Whether steps overlap compute and communication (staleness bound >= 1 with prefetch).
  bool overlapped() const;
  double compute_ms() const;
  int num_servers() const;
  const std::vector<std::string>& regions() const;
  const std::vector<int>& workers_per_region() const;
  const std::vector<int>& server_regions() const;  // region index per server id
  WanEmulation emulation() const;                  // wan.emulation
  // The job's own codecs (compression.push/pull and compression.links).
  CodecTable JobCodecs() const;

  // The plan for `links` (same regions as the job). Each owner vector in
  // `also_try` (e.g. the current placement, or PlaceChunks's) is another
  // starting point of the local search, so the plan is never predicted
  // slower than any of them with the plan's codecs; on a tie the earliest
  // start wins; one that does not cover the layout with valid server ids is
  // ignored. `links` with other regions than the job: the declared matrix.
  Plan MakePlan(const LinkMatrix& links, const std::vector<std::vector<int32_t>>& also_try = {}) const;
  Plan MakePlan() const { return MakePlan(declared_links()); }

  // The predicted step of a given placement and codecs. InvalidArgument if
  // `owner` does not cover the layout with valid server ids, or a codec is
  // neither the job's nor a candidate.
  StatusOr<Prediction> Predict(const std::vector<int32_t>& owner, const CodecTable& codecs,
                               const LinkMatrix& links) const;
  // chunk c -> server c mod num_servers.
  std::vector<int32_t> RoundRobin() const;

  // Compares `measured` with the matrix `previous` was planned with: a link
  // whose bandwidth differs by more than wan.replan_drift (a fraction of the
  // planned bandwidth) triggers a new plan, started from the previous
  // placement and relabeled so that as few chunks as possible move.
  // InvalidArgument if `measured` has other regions than the job.
  StatusOr<Replan> CheckDrift(const Plan& previous, const LinkMatrix& measured) const;

  struct Problem;  // the job as the cost model sees it (planner.cc)

 private:
  explicit Planner(std::shared_ptr<const Problem> p) : p_(std::move(p)) {}
  std::shared_ptr<const Problem> p_;
};

}  // namespace geodesic::wan
