// JobSpec: everything a training job needs, parsed once from a YAML job file
// (see examples/fashion_mnist.yaml and docs/job-file.md) and passed down as
// plain Options structs. Parsing rejects unknown keys, wrong types and
// out-of-range values with the offending key's path, so a typo never
// silently falls back to a default. Value type; not synchronized.
#pragma once

#include <cstdint>
#include <iterator>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace geodesic {

// The fixed-vocabulary settings of a job file. Code compares the enums; the
// words below are what job files, YAML output and logs use (ToString).
enum class ModelKind { kCnn, kMlp, kSynthetic, kTorchScript };
enum class DatasetKind { kFashionMnist, kCifar10, kSafetensors, kTokens };
enum class DataPartition { kIid, kDirichlet, kShards, kLognormal, kDocuments, kGroups };
enum class OptimizerKind { kSgd, kAdam, kAdamW };
enum class LrSchedule { kConstant, kCosine, kStep };
enum class TrainingDevice { kCpu, kCuda, kAuto };
enum class WanEmulation { kNone, kProxy, kNetns };
enum class TcpCongestionControl { kAuto, kBbr, kCubic, kReno };
enum class SecurityMode { kNone, kCurve };
enum class FederatedStrategy { kFedAvg, kFedAdam, kFedYogi, kFedAdagrad, kScaffold, kFedBuff };

// Each enum's words, in declaration order.
template <typename E>
struct EnumWords;
template <>
struct EnumWords<ModelKind> {
  static constexpr std::string_view kWords[] = {"cnn", "mlp", "synthetic", "torchscript"};
};
template <>
struct EnumWords<DatasetKind> {
  static constexpr std::string_view kWords[] = {"fashion-mnist", "cifar10", "safetensors", "tokens"};
};
template <>
struct EnumWords<DataPartition> {
  static constexpr std::string_view kWords[] = {"iid", "dirichlet", "shards", "lognormal", "documents", "groups"};
};
template <>
struct EnumWords<FederatedStrategy> {
  static constexpr std::string_view kWords[] = {"fedavg", "fedadam", "fedyogi", "fedadagrad", "scaffold", "fedbuff"};
};
template <>
struct EnumWords<OptimizerKind> {
  static constexpr std::string_view kWords[] = {"sgd", "adam", "adamw"};
};
template <>
struct EnumWords<LrSchedule> {
  static constexpr std::string_view kWords[] = {"constant", "cosine", "step"};
};
template <>
struct EnumWords<TrainingDevice> {
  static constexpr std::string_view kWords[] = {"cpu", "cuda", "auto"};
};
template <>
struct EnumWords<WanEmulation> {
  static constexpr std::string_view kWords[] = {"none", "proxy", "netns"};
};
template <>
struct EnumWords<TcpCongestionControl> {
  static constexpr std::string_view kWords[] = {"auto", "bbr", "cubic", "reno"};
};
template <>
struct EnumWords<SecurityMode> {
  static constexpr std::string_view kWords[] = {"none", "curve"};
};

template <typename E>
concept JobEnum = requires {
  EnumWords<E>::kWords;
};

template <JobEnum E>
std::string ToString(E value) {
  return std::string(EnumWords<E>::kWords[static_cast<size_t>(value)]);
}

// The value a job file's `word` names, or nullopt.
template <JobEnum E>
std::optional<E> FromString(std::string_view word) {
  const auto& words = EnumWords<E>::kWords;
  for (size_t i = 0; i < std::size(words); ++i)
    if (words[i] == word) return static_cast<E>(i);
  return std::nullopt;
}

template <JobEnum E>
std::ostream& operator<<(std::ostream& os, E value) {
  return os << EnumWords<E>::kWords[static_cast<size_t>(value)];
}

struct RegionSpec {
  std::string name;
  std::string host = "127.0.0.1";  // address the region's processes bind to
  int servers = 0;                 // parameter-server shards in this region
  int workers = 0;                 // training workers in this region
  // Elastic jobs (membership.elastic): worker ids this region keeps for
  // workers that join later (at least `workers`; the first `workers` of
  // them start with the job). Equal to `workers` otherwise.
  int max_workers = 0;
  // A regional aggregator (docs/wan.md "Regional aggregation"): the
  // region's workers push to it and pull from it, and it sends the shards
  // one combined push and one pull per clock.
  bool aggregator = false;
  // `aggregator: auto`: the launcher asks the planner whether one pays here
  // (wan/aggregator_choice.h) and sets `aggregator` before anything starts.
  bool aggregator_auto = false;
};

struct ModelSpec {
  ModelKind name = ModelKind::kCnn;
  std::vector<int> mlp_hidden = {256};  // hidden widths for mlp
  int64_t synthetic_params = 1 << 20;   // float32 parameters of `synthetic`
  // `torchscript`: a module saved with torch.jit.save (docs/models.md). A
  // relative path is made absolute against the working directory when the
  // job file is loaded, so every process of the job reads the same file.
  std::string path = {};
};

// How the training set is split across workers (worker/partition.h has the
// algorithms): "iid"; "dirichlet:ALPHA", label skew, each label's samples
// spread over the parts by proportions drawn from Dirichlet(ALPHA) (small
// ALPHA: few labels per part); "shards:K", the labels sorted and cut into
// parts * K shards, K per part (McMahan et al.); "lognormal:SIGMA", quantity
// skew, part sizes proportional to exp(SIGMA * N(0, 1)), labels IID.
// Token data (data.dataset tokens) takes "iid" (windows), "documents"
// (whole documents of the side file train.docs per part) and "groups"
// (whole groups of documents, train.groups: authors, sources).
struct PartitionSpec {
  DataPartition kind = DataPartition::kIid;
  double param = 0;  // ALPHA, K or SIGMA; 0 for iid
  bool operator==(const PartitionSpec&) const = default;
};
std::string ToString(const PartitionSpec& p);
// "dirichlet:0.3" -> {kDirichlet, 0.3}; a clear InvalidArgument otherwise.
StatusOr<PartitionSpec> ParsePartition(std::string_view text);

// Random changes to training batches (never to evaluation), drawn from
// (seed, worker, step) so that a run is reproducible.
struct AugmentSpec {
  int crop = 0;       // pad each side by this many pixels (zeros after normalization), crop back at random
  bool flip = false;  // mirror left-right with probability 1/2
};

// Where the samples come from (docs/datasets.md): "fashion-mnist", the IDX
// files of Debian's dataset-fashion-mnist in `path`; "cifar10", the binary
// version's data_batch_N.bin and test_batch.bin in `path`; "safetensors",
// train.safetensors and test.safetensors in `path`; "tokens", train.bin and
// val.bin in `path`, flat little-endian token ids (worker/tokens.h).
struct DataSpec {
  DatasetKind dataset = DatasetKind::kFashionMnist;
  // Debian's dataset-fashion-mnist by default. A relative path is made
  // absolute against the working directory when the job file is loaded.
  std::string path = "/usr/share/datasets/fashion-mnist";
  PartitionSpec partition;  // how the training set is split across workers
  int batch_size = 64;      // per worker
  // Per-channel normalization of each sample, x = (p - mean) / std, p a
  // pixel scaled to [0, 1] (uint8 data) or the stored value (float data).
  // Empty: the dataset's own (Fashion-MNIST's and CIFAR-10's published
  // values, a safetensors file's metadata, else 0 and 1).
  std::vector<double> mean = {};
  std::vector<double> std = {};
  AugmentSpec augment = {};
  // Training samples, for counting epochs: 0 is the dataset's standard size
  // (Fashion-MNIST 60,000, CIFAR-10 50,000); a safetensors dataset counted
  // in epochs needs it. Workers check it against what they load.
  int64_t train_samples = 0;
  // Token data: each sample a window of `context` tokens and the next-token
  // targets; ids of `token_bytes` (2: uint16, 4: uint32); `vocab` > 0
  // declares the vocabulary every id must fall below (0: the model's).
  int context = 128;
  int token_bytes = 2;
  int64_t vocab = 0;
};

// The optimizer of the job's steps: the shards' (each pushed gradient is a
// step) or, with training.local_steps > 1, each worker's inner optimizer
// (the shards then run the outer step of TrainingSpec). Update rules as
// torch.optim's SGD, Adam and AdamW (server/optimizer.h).
struct OptimizerSpec {
  OptimizerKind name = OptimizerKind::kSgd;  // sgd is SGD with momentum
  double lr = 0.05;                          // applied to the mean gradient of one clock
  double momentum = 0.9;                     // sgd only
  bool nesterov = false;                     // sgd: Nesterov momentum (needs momentum > 0)
  // sgd and adam: L2 (added to the gradient); adamw: decoupled (the
  // parameters shrink by lr * weight_decay before each step).
  double weight_decay = 0.0;
  double beta1 = 0.9;  // adam and adamw
  double beta2 = 0.999;
  double eps = 1e-8;
  // Learning-rate schedule over the optimizer's steps (LearningRateFactor):
  // "constant"; "cosine", lr * (1 + cos(pi * u)) / 2 with u going from 0
  // after the warm-up to 1 at the last step; "step", lr times gamma for
  // every milestone passed.
  LrSchedule schedule = LrSchedule::kConstant;
  double warmup = 0;               // share of the steps with a linear warm-up, [0, 1)
  std::vector<double> milestones;  // step: shares of the steps, increasing, in (0, 1)
  double gamma = 0.1;              // step: the factor at each milestone
  // > 0: each worker scales every minibatch gradient whose L2 norm exceeds
  // this down to it, as torch.nn.utils.clip_grad_norm_ (before the push,
  // or before the local step).
  double clip_norm = 0;
};

// training.staleness_bound 'inf' (fully asynchronous): larger than any job's clocks.
inline constexpr int64_t kUnboundedStaleness = int64_t{1} << 40;

struct TrainingSpec {
  double epochs = 3.0;  // passes over the training set, summed over all workers
  int64_t steps = 0;    // if > 0: steps per worker, overriding epochs
  // Stale synchronous parallel bound s: a worker at clock c waits until every
  // live worker has finished clock c - s. 0 is BSP; large values are async.
  int64_t staleness_bound = 2;
  // Divide each asynchronous update's learning rate by its staleness.
  bool staleness_scaling = true;
  TrainingDevice device = TrainingDevice::kCpu;
  int threads = 1;  // intra-op threads per worker; one per core is fastest
  // Threads each parameter-server shard checks and applies one update with,
  // each taking a slice of the chunk (chunks of 2 MiB and more; smaller
  // ones stay on one thread). 0: one per core of the shard's machine. The
  // result is the same bits whatever the count.
  int shard_threads = 1;
  // Send each pull before computing the step before it, so network time
  // overlaps compute. Servers answer it once the worker's previous push is
  // in or when the reply must leave to arrive in time, whichever is first.
  bool prefetch = true;
  // Pulls in flight: a worker asks for the parameters of step c + depth
  // while it computes step c, so a link's round trip hides behind `depth`
  // steps of compute. 1 reads its own previous push (read-my-writes); d > 1
  // reads what the shards had when the request arrived, about d - 1 of its
  // own steps old, which the staleness bound must allow (d <= bound + 1).
  int pipeline_depth = 1;
  // Local SGD: each clock is a round of this many minibatch steps that a
  // worker takes on its own copy of the model with the job's optimizer
  // (SGD); it then pushes its progress over the round (the model delta),
  // and the shards average the deltas of a round (BSP) into the global
  // model with an outer SGD step of outer_lr and outer_momentum. 1: every
  // step pushes its gradient (the shards run the job's optimizer).
  int local_steps = 1;
  // With local_steps > 1: start the next round's steps from the local model
  // while the round's average travels, and fold it in when the round ends
  // (the global model a worker merges is one round old; its own progress
  // since is kept). Hides a round trip behind local_steps steps of compute.
  bool overlap_rounds = true;
  // With overlap_rounds, N > 0: fold the round's average in as soon as it
  // has arrived (checked after every local step), keeping the progress made
  // since, and wait for it after N steps of the next round if it has not.
  // The average a worker folds in is then at most N steps old, not a whole
  // round. 0: fold it in when the next round ends. Where in the round the
  // merge happens depends on timing, so runs are not bit-reproducible.
  int overlap_steps = 0;
  // Streaming local SGD (DiLoCo): with local_steps > 1 and P > 1 the
  // model's chunks are cut into P contiguous fragments and each clock
  // synchronizes one of them in turn (fragment clock mod P; the job's last
  // clock all of them), so a fragment's outer round spans P clocks and each
  // exchange carries 1/P of the model. 1: every clock synchronizes all.
  int fragments = 1;
  double outer_lr = 1.0;
  double outer_momentum = 0.0;
  bool outer_nesterov = false;  // Nesterov outer momentum (DiLoCo); needs outer_momentum > 0
};

struct WireSpec {
  int64_t chunk_bytes = 64 << 10;         // parameters are cut into chunks of this size
  int64_t message_bytes = 1 << 20;        // chunks are batched into messages up to this size
  int64_t max_message_bytes = 256 << 20;  // receivers refuse larger messages
};

struct MembershipSpec {
  int heartbeat_ms = 500;          // how often members renew their lease
  int lease_ms = 3000;             // a member silent this long is dead and leaves the bound
  int rendezvous_timeout_s = 120;  // start-up wait for every expected member
  int rpc_timeout_s = 120;         // a pull or push acknowledgement not answered by then fails
  int report_after_s = 3;          // a wait longer than this is logged with whom it waits for
  // Elastic workers (docs/deploy.md "Elastic workers"): workers may join
  // (ids up to each region's max_workers) and leave while the job runs, and
  // the data is handed out by the coordinator as units (one clock's batches
  // of one epoch's permutation), each applied once by every shard.
  bool elastic = false;
  int units_ahead = 2;  // units a worker holds beyond the one it computes
};

// Gradient (push) and parameter (pull) compression. Codec names are those of
// compression/codec.h ("fp32", "int8", "topk:0.01+zstd", ...); they are
// checked at start-up by compression::ValidateJobCodecs.
struct CompressionLinkSpec {
  std::string region_a, region_b;  // the pair, either way round (a may equal b)
  std::string push, pull;          // empty: the job-wide codec
};

struct CompressionSpec {
  std::string push = "fp32";   // worker -> server gradients
  std::string pull = "fp32";   // server -> worker parameters (sent as changes since the worker's copy)
  bool error_feedback = true;  // keep what a lossy push codec dropped and send it later
  // Deep Gradient Compression's momentum correction: workers apply the SGD
  // momentum locally and push the velocity (sparsified, with error
  // feedback, momentum zeroed where sent); shards then apply pushes without
  // momentum. Their parameters then change only where something was sent,
  // so pulls of changes compress too. SGD only.
  bool momentum_correction = false;
  // Sparse push codecs (topk, randk) start denser and reach their fraction
  // after this many steps, shrinking geometrically from 25% (DGC's warm-up).
  int64_t sparsity_warmup_steps = 0;
  std::vector<CompressionLinkSpec> links;  // per region pair, overriding push and pull
};

// One direction of a link between two regions (`from` may equal `to` for
// traffic inside a region). Declared in the job file under `wan.links`; a
// `regions: [a, b]` entry declares both directions with the same shape.
struct LinkSpec {
  std::string from, to;
  double delay_ms = 0;        // one way (an entry's rtt_ms is split evenly)
  double jitter_ms = 0;       // one way, uniform in [0, jitter_ms], never reordering bytes
  double bandwidth_mbit = 0;  // 0: unlimited
  double loss = 0;            // packet loss fraction; kernel emulation only (TCP hides loss from a proxy)
};

struct WanSpec {
  // How cross-region links are emulated on one machine: none (loopback
  // speed), proxy (user-space link-emulating TCP proxies, no root), netns
  // (network namespaces per region, root).
  WanEmulation emulation = WanEmulation::kNone;
  std::vector<LinkSpec> links;  // the declared link matrix, one entry per direction
  bool probe = true;            // measure every region pair at start-up
  bool planner = true;          // place chunks with the planner (wan/planner.h) when links are declared
  // The planner re-plans when a link's measured bandwidth differs from the
  // one it planned with by more than this fraction.
  double replan_drift = 0.5;
  // How the planner predicts TCP goodput on a lossy link: loss-based
  // congestion control (cubic, reno) is capped by the Mathis formula; bbr
  // paces at the measured bottleneck rate and loses only the dropped
  // packets. auto: this machine's net.ipv4.tcp_congestion_control.
  TcpCongestionControl congestion_control = TcpCongestionControl::kAuto;
  // Re-plan a running job (docs/planner.md "In a running job"): the
  // coordinator builds the link matrix from the workers' passive estimates,
  // calls the planner's drift check, and moves chunks between live shards
  // behind a clock barrier when it returns a new plan. Off by default: a
  // migration stalls every worker for a barrier. Needs declared links, no
  // replication and no periodic checkpoints (job validation says why).
  bool replan = false;
  double replan_every_s = 10;      // least time between two drift checks that may re-plan (and after start-up)
  int64_t replan_min_samples = 5;  // throughput samples a worker's estimate needs before it counts
  // A deterministic drift for tests and demos: once the slowest live worker
  // reaches clock replan_at_clock (>= 0), the link replan_from -> replan_to
  // (server region -> worker region) is taken to measure replan_mbit
  // Mbit/s, whatever the workers measured. -1: off.
  int64_t replan_at_clock = -1;
  std::string replan_from, replan_to;
  double replan_mbit = 0;
  // Compute time of one worker step for the planner's prediction, ms; 0: its
  // estimate for the model (docs/planner.md).
  double compute_ms = 0;
  // Codecs the planner may pick per link (empty: keep compression.*).
  std::vector<std::string> planner_codecs;
};

struct EvalSpec {
  double snapshot_every_s = 4.0;  // worker 0 saves the parameters this often for the accuracy curve
  double target_accuracy = 0.88;  // the summary reports the time to reach it
  // > 0: the summary reports the time to a mean validation loss at or below
  // it (models with their own loss; docs/language-models.md).
  double target_loss = 0;
  int64_t test_samples = 0;  // 0: the whole 10k test set
  // Snapshots the curve scores at most, spread evenly, plus those around
  // the first to reach the target (worker/snapshot.h, ScoreCurve); 0: all.
  int64_t curve_points = 12;
  // Models with buffers (BatchNorm's running statistics): training samples
  // run through the model before each evaluation to recompute the buffers
  // for the weights evaluated (docs/models.md, "Buffers").
  int64_t buffer_samples = 4096;
  // Test images scored per forward pass. On CPU cores, 128 keeps the CNN's
  // activations in the caches: batches of 1000 scored 10,000 images 6.5
  // times slower (docs/benchmarks.md, "The evaluator"); a GPU wants more.
  int64_t batch = 128;
};

// Server shard checkpoints (server/checkpoint.h, docs/reliability.md). The
// launcher keeps them in <run_dir>/checkpoints; `geodesic launch --resume`
// continues from them.
struct CheckpointSpec {
  int64_t every_clocks = 200;  // a checkpoint each time the shard's clock passes a multiple of this; 0: off
  int keep = 3;                // files kept per shard (at least 2, so a corrupt newest one has a fallback)
  bool on_stop = true;         // also when the shard is stopped (Ctrl-C, SIGTERM) and when the job ends
};

// Primary-backup replication of server shards (docs/reliability.md). With
// one backup per shard, a push is acknowledged only once the shard's backup
// holds it too, so losing a primary loses no acknowledged update.
struct ReplicationSpec {
  int backups = 0;  // 0: none; 1: one backup per shard, in the next region (file order) when there are several
};

// Transport security (docs/security.md). `none`: plaintext, anyone who can
// reach a port can join. `curve`: every connection runs CurveZMQ and joining
// needs a token signed with the job's secret.
struct SecuritySpec {
  SecurityMode mode = SecurityMode::kNone;
  // The job's secret (>= 32 bytes, mode 0600). Empty: `geodesic launch`
  // creates one in the run directory; other commands then need --secret-file.
  std::string secret_file;
  int64_t token_ttl_s = 86400;  // lifetime of the tokens the launcher mints; must cover the whole job
};

// federated: rounds over a population of clients (docs/federated.md).
// Each round selects per_round clients; the workers become client
// executors that train the selected clients one after another from the
// round's global model (each on its part of data.partition, split into
// `clients` parts); the shards take the weighted mean of the updates and
// apply the strategy with server step size training.outer_lr: fedavg runs
// the outer SGD step (FedAvgM with training.outer_momentum), fedadam,
// fedyogi and fedadagrad Reddi et al.'s adaptive steps (server/strategy.h),
// scaffold FedAvg's step with control variates: the shards keep the server's
// control variate c after the model (ShardValues), each executor its
// clients' c_i; fedbuff asynchronous buffered aggregation: `concurrency`
// clients train at once in simulated time, each from the model current when
// it started, and a round is a server step over the next per_round (K)
// updates to arrive, each weighted 1/sqrt(1 + staleness) and none older than
// max_staleness versions (worker/federated/buffered.h). Off while clients is 0.
struct FederatedSpec {
  int64_t clients = 0;  // the population; 0: not federated
  int64_t per_round = 10;
  bool weighted_selection = false;  // select by samples (else uniformly)
  int64_t rounds = 50;
  double local_epochs = 1.0;  // passes over a client's samples per round
  int64_t local_steps = 0;    // > 0: this many local steps instead
  double local_lr = 0.05;
  double local_momentum = 0.0;
  double prox_mu = 0.0;       // FedProx's proximal weight (0: FedAvg)
  double availability = 1.0;  // probability that a client can be selected in a round
  double dropout = 0.0;       // probability that a selected client leaves before its update
  // Rounds in simulated time (docs/federated.md "Edge conditions"): select
  // ceil(per_round * (1 + over_selection)), aggregate the first per_round
  // to finish, and none finishing after deadline_s (> 0).
  double over_selection = 0;
  double deadline_s = 0;
  // Device profiles (log-normal: median and sigma of the log): a local
  // step's seconds, with slow_fraction of devices slow_factor times slower;
  // uplink and downlink Mbit/s; one-way latency.
  double device_step_s = 0.05, device_compute_sigma = 0;
  double device_slow_fraction = 0, device_slow_factor = 5;
  double device_uplink_mbit = 20, device_uplink_sigma = 0;
  double device_downlink_mbit = 100, device_downlink_sigma = 0;
  double device_latency_ms = 50, device_latency_sigma = 0;
  FederatedStrategy strategy = FederatedStrategy::kFedAvg;
  double beta1 = 0.9, beta2 = 0.99, tau = 1e-3;  // fedadam, fedyogi, fedadagrad
  int64_t concurrency = 0;                       // fedbuff: clients in flight (0: per_round)
  // Each client's uplink: its update goes through this codec (names of
  // compression/codec.h), or slow_uplink_codec for clients whose uplink is
  // below slow_uplink_mbit; with uplink_error_feedback each client keeps
  // what its codec dropped and sends it the next time it trains.
  std::string uplink_codec = "fp32";
  std::string slow_uplink_codec;  // empty: uplink_codec for every client
  double slow_uplink_mbit = 0;
  bool uplink_error_feedback = true;
  // > 0: a client update whose L2 norm is above this is refused (counted
  // in rounds.csv's `refused`; its weight stays in the round's total, as an
  // unusable update's does).
  double max_update_norm = 0;
  int64_t max_staleness = 10;  // fedbuff: older updates are discarded
  // Real clients (docs/federated.md "Real clients"): each executor listens
  // for `geodesic client` processes and hands a selected client's training
  // to the process that serves its id, waiting up to gateway_timeout_s for
  // its update; clients are spread over executors by id (k mod E). With no
  // process attached, a client trains virtually as before.
  bool gateway = false;
  double gateway_timeout_s = 30;
  // DP-FedAvg (docs/federated.md): > 0 clips each client's update to this
  // L2 norm, weighs clients equally over a fixed denominator (per_round),
  // and adds Gaussian noise of deviation dp_noise_multiplier * dp_clip_norm
  // to each round's sum; the summary reports (epsilon, dp_delta).
  double dp_clip_norm = 0;
  double dp_noise_multiplier = 1.0;
  double dp_delta = 1e-5;
  // Per-round results (RUN_DIR/rounds.csv): executor 0 snapshots the global
  // model every `eval_every` rounds for the test-set accuracy, and each
  // client's accuracy is taken on its first `client_eval_samples` samples
  // before it trains (0: not taken).
  int64_t eval_every = 1;
  int64_t client_eval_samples = 128;
  bool dp() const { return dp_clip_norm > 0; }
  bool scaffold() const { return enabled() && strategy == FederatedStrategy::kScaffold; }
  bool fedbuff() const { return enabled() && strategy == FederatedStrategy::kFedBuff; }
  int64_t InFlight() const { return concurrency > 0 ? concurrency : per_round; }  // fedbuff
  bool enabled() const { return clients > 0; }
};

struct JobSpec {
  std::string name = "job";
  uint64_t seed = 1;
  std::vector<RegionSpec> regions;
  std::string coordinator_region;  // empty: the first region
  ModelSpec model;
  DataSpec data;
  OptimizerSpec optimizer;
  TrainingSpec training;
  WireSpec wire;
  MembershipSpec membership;
  EvalSpec eval;
  CheckpointSpec checkpoint;
  ReplicationSpec replication;
  CompressionSpec compression;
  WanSpec wan;
  SecuritySpec security;
  FederatedSpec federated;

  int NumServers() const;
  // Worker ids: 0..NumWorkers()-1 (elastic jobs: every region's max_workers).
  int NumWorkers() const;
  // Workers that start with the job (regions' `workers`); the rest of an
  // elastic job's ids may join later.
  int InitialWorkers() const;
  bool IsInitialWorker(int id) const;
  // The first worker id of region `index` (file order).
  int FirstWorkerOfRegion(size_t index) const;
  // Each worker id's region index (file order), for NumWorkers() ids.
  std::vector<int32_t> WorkerRegions() const;
  // Whether some region says `aggregator: auto` (not yet resolved).
  bool HasAutoAggregators() const;
  // Whether some region has an aggregator.
  bool HasAggregators() const;
  // The index of the region named `name` in file order, or -1.
  int RegionIndex(const std::string& name) const;
  // Elastic jobs: samples in one data unit (batch_size x local_steps), units
  // per epoch (the permutation's full units) and units in the job.
  int64_t UnitSamples() const;
  int64_t UnitsPerEpoch() const;
  // data.train_samples, or the dataset's standard size (0 for safetensors).
  int64_t TrainSamples() const;
  int64_t TotalUnits() const;
  // The values the shards keep for a model of `model_params`: the model,
  // and under SCAFFOLD the server's control variate after it (2x).
  int64_t ShardValues(int64_t model_params) const { return federated.scaffold() ? 2 * model_params : model_params; }
  // Global ids count servers (and workers) region by region in file order.
  const RegionSpec& RegionOfServer(int id) const;
  const RegionSpec& RegionOfWorker(int id) const;
  const RegionSpec& CoordinatorRegion() const;
  // Where shard `id`'s backup runs: the region after its primary's in file
  // order (wrapping), or the primary's own when the job has one region.
  const RegionSpec& RegionOfBackup(int id) const;
  // The region named `name`, or nullptr.
  const RegionSpec* FindRegion(const std::string& name) const;
  // The codec names for traffic between a worker in `worker_region` and a
  // shard in `server_region`.
  const std::string& PushCodec(const std::string& worker_region, const std::string& server_region) const;
  const std::string& PullCodec(const std::string& worker_region, const std::string& server_region) const;
  // Steps (clocks) each worker runs: training.steps, or training.epochs over
  // the dataset's training samples, shared by all workers.
  int64_t StepsPerWorker() const;  // minibatch steps
  // Clocks (pushes) per worker: StepsPerWorker() / training.local_steps, rounded up.
  int64_t ClocksPerWorker() const;
  // The clocks a worker's requests may name: ClocksPerWorker(), or in an
  // elastic job TotalUnits() (a worker's clocks are the units it computed
  // from the clock it joined at, which never passes the units finished).
  int64_t ClockLimit() const { return membership.elastic ? TotalUnits() : ClocksPerWorker(); }
  // The optimizer the shards run: the job's, or local SGD's outer step.
  OptimizerSpec ShardOptimizer() const;
  // The declared link from one region to another, or nullptr (unshaped).
  const LinkSpec* Link(const std::string& from, const std::string& to) const;
};

// Training samples of the standard datasets.
inline constexpr int64_t kFashionTrainSamples = 60000;
inline constexpr int64_t kCifar10TrainSamples = 50000;

// The schedule's learning-rate factor [0, 1] at step `step` (0-based) of
// `steps`: a linear warm-up over the first W = ceil(warmup * steps) steps,
// (step + 1) / W, then the schedule. Cosine runs over the steps after the
// warm-up; step's milestones count from step 0.
double LearningRateFactor(const OptimizerSpec& spec, int64_t step, int64_t steps);

// Why this job's regions cannot have aggregators (docs/wan.md "Regional
// aggregation"); empty when they can.
std::vector<std::string> AggregatorLimits(const JobSpec& job);

// Parses YAML text. `overrides` are "dotted.key=value" strings applied on top
// of the file (e.g. "training.staleness_bound=0"), as the launcher's --set.
StatusOr<JobSpec> ParseJob(const std::string& yaml_text, const std::string& source_name,
                           const std::vector<std::string>& overrides = {});
StatusOr<JobSpec> LoadJobFile(const std::string& path, const std::vector<std::string>& overrides = {});
// Every key path the parser looks up while it reads `yaml_text`, present in
// it or not ("training.steps", "regions.a.host", "wan.links[0].rtt_ms"):
// what docs/job-file.md must document (tests/config/job_test.cc checks).
StatusOr<std::set<std::string>> JobFileKeys(const std::string& yaml_text);
// Writes a spec back as YAML that ParseJob reads to the same spec.
std::string JobToYaml(const JobSpec& job);
// Settings that are valid but cost what their author probably did not mean,
// one sentence each naming the keys and the way out; the launcher prints
// them before anything starts. Empty for most jobs.
std::vector<std::string> JobNotes(const JobSpec& job);

}  // namespace geodesic
