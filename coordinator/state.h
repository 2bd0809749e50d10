// CoordinatorState: the coordinator's state machine, without I/O (time is
// injected, no sockets, no files). It admits members (servers, backups,
// workers, the evaluator), keeps their leases, fixes the shard map, keeps
// the clock view that the live status and "blocked by" reports use, and
// re-plans a running job (wan.replan). Start-up is a rendezvous: nobody is
// told to start until every expected server and worker has registered, so
// the first clocks of a BSP job are truly synchronous. After that, members
// whose lease runs out leave the live set (and the staleness bound) and may
// register again.
//
// Its code is in parts: state.cc (membership, leases, answers),
// admission.cc (secured jobs: tokens and keys),
// elastic.cc (an elastic job's data units and timeline),
// replan.cc (drift checks and migrations) and
// store.cc (snapshots for the state file). Not synchronized:
// one thread (Coordinator::Run's) owns it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster/chunking.h"
#include "common/clock.h"
#include "common/status.h"
#include "config/job.h"
#include "coordinator/unit_ledger.h"
#include "proto/checkpoint.pb.h"
#include "proto/geodesic.pb.h"
#include "proto/stats.pb.h"
#include "transport/security.h"
#include "wan/planner.h"

namespace geodesic::coordinator {

// Re-planning a running job (wan.replan; docs/planner.md "In a running job").
struct ReplanOptions {
  bool enabled = false;
  double every_s = 10;      // least time between two drift checks (and after the start)
  int64_t min_samples = 5;  // a worker's estimate counts with at least this many throughput samples
  int pipeline_depth = 1;   // training.pipeline_depth: how far ahead of its clock a worker pulls
  // wan.replan_at_clock and friends: a deterministic drift (tests, demos).
  int64_t inject_at_clock = -1;
  std::string inject_from, inject_to;
  double inject_mbit = 0;
  std::shared_ptr<const JobSpec> job;  // what the planner plans (set by FromJob when enabled)
};

// One worker's passive link estimates (WorkerProgress.links).
struct WorkerLinkReport {
  std::string region;
  std::vector<wire::LinkEstimate> links;
};

// The link matrix the coordinator re-plans with: `planned` (the declared
// delays, losses and links), where the bandwidth of each link between two
// different regions that the plan knows as declared (server region ->
// worker region) becomes the sum, over that worker region's workers, of
// their estimates from that server region; only estimates with at least
// `min_samples` throughput samples count (a link left with none keeps its
// planned bandwidth). The sum: the workers of a region pull concurrently,
// each measuring its flow's share of the path. `measured` (optional)
// receives how many links took an estimate.
wan::LinkMatrix MeasuredLinks(const wan::LinkMatrix& planned, const std::vector<WorkerLinkReport>& reports,
                              int64_t min_samples, int* measured = nullptr);

// A migration's barrier clock: the highest of the live workers' floors
// (the lowest barrier each can still honor). -1 when there is none to
// choose or it would not be below `last_clock` (the job's last clock: a
// barrier there would move chunks for nothing).
int64_t ChooseBarrier(const std::vector<int64_t>& floors, int64_t last_clock);

struct CoordinatorOptions {
  std::string job_name;
  int num_servers = 1;
  int num_workers = 1;
  int64_t chunk_bytes = 64 << 10;
  int64_t staleness_bound = 2;
  // JobSpec::ClocksPerWorker: a worker's heartbeat clock is at most this
  // (REFUSAL_BAD_CLOCK beyond). 0: not known, only kMaxClock (common/wire_limits.h) bounds it.
  int64_t total_clocks = 0;
  bool expect_evaluator = true;  // the job ends only after an evaluator has read the final model
  MembershipSpec membership;
  int64_t max_message_bytes = 256 << 20;    // wire.max_message_bytes: larger requests are refused unread
  std::vector<std::string> server_regions;  // per server id (may be empty)
  // replication.backups: 1 gives every shard a backup (role BACKUP, same
  // id); the rendezvous waits for them, and a primary whose lease expires
  // is replaced by its live backup (docs/reliability.md).
  int backups = 0;
  std::vector<std::string> backup_regions;  // per server id (may be empty)
  std::vector<std::string> worker_regions;  // per worker id (may be empty)
  // Regional aggregators (regions.NAME.aggregator): region i's registers
  // as (AGGREGATOR, i), gets the shard map like a worker and keeps a lease;
  // the rendezvous does not wait for it (its region's workers do).
  int num_regions = 1;
  // By region index: the region's name if it has an aggregator, else empty.
  // Secured jobs: a worker of such a region waits, before it starts, for
  // the aggregator to register and to admit its key.
  std::vector<std::string> aggregator_regions;
  // Places the chunks once the model is known; unset: cluster::PlaceChunks (bytes-
  // balanced). FromJob sets the WAN planner here when the job declares links
  // and wan.planner is on. `note` receives what to log and report.
  std::function<cluster::ShardMap(const cluster::ChunkLayout&, std::string* note, double* predicted_step_ms)> place;
  // Elastic jobs (membership.elastic): the worker ids the rendezvous does
  // not wait for (they may join later), the data units handed out, and how
  // many a worker may hold beyond those it computes. total_units 0: not
  // elastic (workers train their own partitions).
  std::vector<bool> late_workers;
  int64_t total_units = 0;
  int units_ahead = 2;
  // A resumed job: the clock each worker starts at (from its ResumePlan);
  // empty: every worker starts at 0.
  std::vector<int64_t> worker_start_clocks;
  // Secured jobs (security.mode curve): the job secret that join tokens are
  // checked against. Empty: plaintext, no tokens, no keys.
  std::string secret;
  // Federated jobs with federated.gateway: workers register their client
  // gateway's endpoint, and (secured jobs) a status request with a valid
  // `client` token admits its CURVE key to the workers' gateways.
  bool client_gateway = false;
  std::function<int64_t()> unix_now = transport::UnixNow;  // token expiry clock
  ReplanOptions replan;

  static CoordinatorOptions FromJob(const JobSpec& job);
};

class CoordinatorState {
 public:
  CoordinatorState(CoordinatorOptions options, const Clock* clock);

  // `peer_key`: the CURVE key the request arrived with (secured jobs). A
  // refused registration (bad token, no key, wrong model...) changes nothing.
  StatusOr<wire::RegisterReply> Register(wire::Role role, int id, const wire::RegisterRequest& request,
                                         const std::string& peer_key = "");
  // Secured jobs: PermissionDenied unless `peer_key` is the key (role, id)
  // registered with. A member with no key bound passes (it is unknown, and
  // is told to register, which needs a token). Always OK in plaintext jobs.
  ::geodesic::Status CheckKey(wire::Role role, int id, const std::string& peer_key) const;
  // Secured jobs: whether `peer_key` belongs to a registered member.
  bool IsMemberKey(const std::string& peer_key) const;
  bool secure() const { return !options_.secret.empty(); }
  const CoordinatorOptions& options() const { return options_; }
  wire::HeartbeatReply Heartbeat(wire::Role role, int id, const wire::Heartbeat& heartbeat);
  void Leave(wire::Role role, int id);
  // Answers one request that passed the framing checks (transport::DecodeFrames),
  // by its body: the reply to send, or nullopt for none (a LeaveRequest).
  // A request the coordinator does not serve or refuses is answered with an
  // ErrorReply and sets `*refused` (the socket shell logs and counts it).
  // Heartbeats and leaves must name a member of the job, with a clock in
  // range (CheckMember). `peer_key`: the CURVE key the request arrived with
  // (secured jobs; empty otherwise). Coordinator::Run feeds every received
  // message here; tests/fuzz/fuzz_coordinator.cc feeds arbitrary bytes.
  std::optional<wire::Header> Answer(const wire::Header& request, const std::string& peer_key, bool* refused);
  // Ends every lease not renewed within lease_ms; returns a log line per death.
  std::vector<std::string> ExpireLeases();

  wire::StatusReply Status() const;
  bool started() const { return started_; }
  bool job_finished() const;
  // Whether every shard, backup and regional aggregator has left (or its
  // lease ran out): once the job finished, the coordinator stays until
  // then, so that each hears that the job finished and exits.
  bool serving_members_left() const;
  // Who the rendezvous still waits for, e.g. "server 1; workers 2,3".
  std::string WaitingFor() const;
  double training_seconds() const;
  std::optional<cluster::ShardMap> shard_map() const { return shard_map_; }
  const std::string& plan_note() const { return plan_note_; }
  double planned_step_ms() const { return planned_step_ms_; }
  uint64_t membership_epoch() const { return epoch_; }
  // Replicated jobs: bumped when a shard's serving endpoint or its backup changes.
  uint64_t servers_epoch() const { return servers_epoch_; }
  // Promotions so far (a primary's lease expired and its backup took over).
  int promotions() const { return promotions_; }
  // Elastic jobs: the data units and the membership timeline.
  bool elastic() const { return options_.total_units > 0; }
  const UnitLedger& units() const { return units_; }
  const std::vector<stats::MembershipEvent>& membership_events() const { return events_; }
  // Every worker is done, dead or gone, and (elastic) every unit finished.
  bool training_ended() const { return last_worker_end_.has_value(); }
  int LiveWorkers() const;

  // Re-planning (options().replan.enabled). Tick() checks the links for
  // drift when due (every replan.every_s, at the injected clock, or when
  // RequestReplan was called), starts a migration when the planner moves
  // chunks, and moves a migration along: barrier announced -> every live
  // worker waits at it -> shards transfer -> new map published. Returns
  // the lines to log. Called by Coordinator::Run every loop.
  std::vector<std::string> Tick();
  void RequestReplan(const std::string& why) { forced_replan_ = why; }
  struct ReplanRecord {
    uint64_t id = 0;
    int64_t clock = 0;  // the barrier
    std::string reason;
    std::vector<std::string> drifted;
    std::vector<wan::ChunkMove> moves;
    double predicted_step_ms_before = 0, predicted_step_ms_after = 0;
    double barrier_ms = 0;   // announced -> every live worker at the barrier
    double transfer_ms = 0;  // -> every shard's chunks acknowledged and the map published
    uint64_t map_version = 0;
  };
  const std::vector<ReplanRecord>& replans() const { return replans_; }
  // The migration in progress: its id (0: none) and stage.
  uint64_t migration_id() const { return migration_ ? migration_->record.id : 0; }
  bool migration_transferring() const { return migration_ && migration_->transfer; }

  // The state a restarted coordinator needs (proto/checkpoint.proto).
  wire::CoordinatorSnapshot Save() const;
  // Takes over a saved state: members keep their registration, clocks and
  // endings; those that were live get a fresh lease to heartbeat again.
  // Refuses a snapshot of another job or shape, changing nothing.
  ::geodesic::Status Restore(const wire::CoordinatorSnapshot& snapshot);

 private:
  struct Member {
    bool registered = false;  // ever registered
    bool live = false;        // holds a lease now
    bool done = false;        // workers: finished all steps
    bool left = false;        // said goodbye
    bool died = false;        // lease expired while not done
    TimePoint last_seen{};
    int64_t clock = 0;
    int64_t pid = 0;
    std::string endpoint, region;
    wire::WorkerProgress worker;
    wire::ServerProgress server;
    std::string key;              // secured jobs: CURVE public key bound at registration
    uint64_t key_epoch = 0;       // workers, evaluator, aggregators: keys_epoch_ when `key` was bound
    uint64_t keys_installed = 0;  // servers: the keys epoch the shard reports installed
    int64_t barrier_floor = 0;    // workers: Heartbeat.barrier_floor
    uint64_t at_barrier = 0;      // workers: Heartbeat.at_barrier
    uint64_t migration_done = 0;  // servers: Heartbeat.migration_done
  };
  struct Migration {
    ReplanRecord record;
    cluster::ShardMap new_map;
    wan::Plan plan;
    bool transfer = false;
    int raises = 0;
    TimePoint started{}, at_barrier{};
  };
  // Register's parts, in its order. Admit: secured jobs' token and key
  // (admission.cc); CheckRejoin: whether this member may
  // (re)join now; TakeEndpoint: a shard's or backup's endpoint; TakeModel:
  // a worker's model, placing the chunks for the first; Enroll: gives the
  // lease; RegisterAnswer: the reply, or "not yet" with why.
  ::geodesic::Status Admit(wire::Role role, int id, const wire::RegisterRequest& req,
                           const std::string& peer_key) const;
  // Whether a registration, heartbeat or leave names a member of the job
  // (REFUSAL_BAD_SENDER) and a worker's heartbeat clock is in [0,
  // total_clocks] (REFUSAL_BAD_CLOCK); `reason` says which failed.
  ::geodesic::Status CheckMember(const wire::Header& h, wire::Refusal* reason) const;
  ::geodesic::Status CheckRejoin(wire::Role role, int id, const wire::RegisterRequest& req, const Member& m) const;
  ::geodesic::Status TakeEndpoint(wire::Role role, int id, const wire::RegisterRequest& req, Member* m);
  ::geodesic::Status TakeModel(int id, const wire::ModelSignature& sig);
  void Enroll(wire::Role role, const wire::RegisterRequest& req, const std::string& peer_key, Member* m);
  wire::RegisterReply RegisterAnswer(wire::Role role, int id, const Member& m) const;
  // Tick's parts (replan.cc): a drift check, and one step of
  // the migration in progress (to the barrier, then the transfers).
  void CheckDrift(TimePoint now, std::vector<std::string>* lines);
  // Announces migration to `replan`'s placement, with its barrier at `barrier`.
  void StartMigration(TimePoint now, const std::string& reason, const std::string& drifted, const wan::Replan& replan,
                      const wan::LinkMatrix& measured, int64_t barrier, std::vector<std::string>* lines);
  void AdvanceMigration(TimePoint now, std::vector<std::string>* lines);
  void AdvanceToBarrier(TimePoint now, std::vector<std::string>* lines);
  void Abandon(TimePoint now, std::vector<std::string>* lines, const std::string& why);
  void FillMigration(wire::Role role, wire::HeartbeatReply* r) const;
  // Secured jobs: a shard's, backup's or aggregator's heartbeat reports the
  // keys it installed (`m`); the reply carries the current list when it is
  // behind (an aggregator's: its region's workers only).
  void AddKeys(wire::Role role, int id, const wire::Heartbeat& hb, Member* m, wire::HeartbeatReply* r) const;
  // The region index of worker `w`'s aggregator, or -1 (none in its region).
  int AggregatorOf(int w) const;
  // Why worker `id` waits for its region's aggregator (to register, to
  // admit its key), or empty.
  std::string AggregatorWait(int id, const Member& m) const;
  // Secured jobs with a client gateway: remembers a real client's key and
  // the client id its token names (-1: any), and gives a worker whose
  // heartbeat is behind the current list.
  void AdmitClient(const std::string& peer_key, int client);
  void AddClientKeys(const wire::Heartbeat& hb, wire::HeartbeatReply* r) const;
  // Why a worker, the evaluator or an aggregator may not start yet in a
  // secured job (a live shard, or the worker's aggregator, has not
  // installed its key), or empty.
  std::string KeyWait(wire::Role role, int id, const Member& m) const;
  Member* Find(wire::Role role, int id);
  const Member* Find(wire::Role role, int id) const;
  int64_t MinLiveClock() const;
  void MaybeStart();
  void NoteWorkersEnd();
  // Whether worker `i` need not be there: an elastic job's late id that
  // never registered.
  bool Absent(int i) const;
  // Elastic jobs (elastic.cc): a worker's units on a heartbeat,
  // its units back to the pool when it goes, and the timeline.
  void ElasticHeartbeat(int id, const wire::Heartbeat& hb, wire::HeartbeatReply* r);
  void WorkerGone(int id, const char* what);
  void NoteMember(int id, const char* what);
  wire::RegisterReply Assignment(wire::Role role, const Member& m) const;
  // The shards' serving and backup endpoints (replicated jobs).
  void AddServers(google::protobuf::RepeatedPtrField<wire::ServerInfo>* out) const;
  bool replicated() const { return options_.backups > 0; }

  CoordinatorOptions options_;
  const Clock* clock_;
  TimePoint created_;
  std::vector<Member> servers_, workers_;
  // Replicated jobs: each shard's backup, and whether it has been promoted
  // (then servers_[i] is the former backup, and (BACKUP, i) finds it there).
  std::vector<Member> backups_;
  std::vector<bool> promoted_;
  uint64_t servers_epoch_ = 1;
  int promotions_ = 0;
  Member evaluator_;
  bool evaluator_seen_ = false;
  std::vector<Member> aggregators_;  // by region index
  std::optional<wire::ModelSignature> model_;
  std::optional<cluster::ShardMap> shard_map_;
  std::string plan_note_;       // the planner's report, if it placed the chunks
  double planned_step_ms_ = 0;  // its predicted step time
  bool started_ = false;
  bool restored_ = false;  // continued from a saved state (Restore), not a fresh rendezvous
  TimePoint started_at_{};
  std::optional<TimePoint> last_worker_end_;  // when every worker became done, dead or gone
  uint64_t epoch_ = 1;
  uint64_t keys_epoch_ = 0;  // bumped when a worker's, the evaluator's or an aggregator's key changes
  // Real clients' keys and ids, oldest first (at most kMaxClientKeys), and
  // their version, bumped on every change.
  std::vector<std::pair<std::string, int>> client_keys_;
  uint64_t client_keys_epoch_ = 0;
  // Re-planning: the planner and the plan the current map came from.
  std::optional<wan::Planner> planner_;
  std::optional<wan::Plan> plan_;
  std::optional<Migration> migration_;
  std::vector<ReplanRecord> replans_;
  std::string forced_replan_;
  bool injected_ = false;
  TimePoint last_check_{};
  uint64_t migrations_started_ = 0;
  UnitLedger units_;
  std::vector<stats::MembershipEvent> events_;
};

}  // namespace geodesic::coordinator
