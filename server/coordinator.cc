#include "server/coordinator.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/log.h"
#include "common/wait.h"
#include "wan/planner.h"

namespace geodesic::server {
namespace {

std::string IdList(const std::vector<int>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ",";
    if (i == 8) return s + "... (" + std::to_string(ids.size()) + " in all)";
    s += std::to_string(ids[i]);
  }
  return s;
}

const char* RoleName(wire::Role role) {
  switch (role) {
    case wire::SERVER:
      return "server";
    case wire::WORKER:
      return "worker";
    case wire::EVALUATOR:
      return "evaluator";
    case wire::COORDINATOR:
      return "coordinator";
    case wire::CLIENT:
      return "client";
    case wire::BACKUP:
      return "backup of server";
    default:
      return "member";
  }
}

std::string Fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

}  // namespace

wan::LinkMatrix MeasuredLinks(const wan::LinkMatrix& planned, const std::vector<WorkerLinkReport>& reports,
                              int64_t min_samples, int* measured) {
  wan::LinkMatrix out = planned;
  std::map<std::pair<int, int>, double> sum;  // (server region, worker region) -> Mbit/s
  for (const auto& r : reports) {
    const int to = planned.Index(r.region);
    if (to < 0) continue;
    for (const auto& e : r.links) {
      const int from = planned.Index(e.server_region());
      if (from < 0 || from == to || !planned.at(from, to).declared) continue;
      if (static_cast<int64_t>(e.samples()) < min_samples || !(e.mbit() > 0) || !std::isfinite(e.mbit())) continue;
      sum[{from, to}] += e.mbit();
    }
  }
  for (const auto& [link, mbit] : sum) out.at(link.first, link.second).bandwidth_mbit = mbit;
  if (measured) *measured = static_cast<int>(sum.size());
  return out;
}

int64_t ChooseBarrier(const std::vector<int64_t>& floors, int64_t last_clock) {
  if (floors.empty()) return -1;
  const int64_t m = *std::max_element(floors.begin(), floors.end());
  return m < last_clock ? m : -1;
}

CoordinatorOptions CoordinatorOptions::FromJob(const JobSpec& job) {
  CoordinatorOptions o;
  o.job_name = job.name;
  o.num_servers = job.NumServers();
  o.num_workers = job.NumWorkers();
  o.chunk_bytes = job.wire.chunk_bytes;
  o.staleness_bound = job.training.staleness_bound;
  o.membership = job.membership;
  o.max_message_bytes = job.wire.max_message_bytes;
  for (int i = 0; i < o.num_servers; ++i) o.server_regions.push_back(job.RegionOfServer(i).name);
  for (int i = 0; i < o.num_workers; ++i) o.worker_regions.push_back(job.RegionOfWorker(i).name);
  o.backups = job.replication.backups;
  if (job.wan.replan) {
    o.replan.enabled = true;
    o.replan.every_s = job.wan.replan_every_s;
    o.replan.min_samples = job.wan.replan_min_samples;
    o.replan.pipeline_depth = job.training.pipeline_depth;
    o.replan.inject_at_clock = job.wan.replan_at_clock;
    o.replan.inject_from = job.wan.replan_from;
    o.replan.inject_to = job.wan.replan_to;
    o.replan.inject_mbit = job.wan.replan_mbit;
    auto j = std::make_shared<JobSpec>(job);
    j->wan.planner_codecs.clear();  // placement only, as at start-up
    o.replan.job = std::move(j);
  }
  if (o.backups)
    for (int i = 0; i < o.num_servers; ++i) o.backup_regions.push_back(job.RegionOfBackup(i).name);
  if (!job.wan.links.empty()) {
    o.place = [job](const cluster::ChunkLayout& layout, std::string* note, double* predicted_step_ms) {
      cluster::ShardMap balanced = cluster::PlaceChunks(layout, job.NumServers());
      // Codec choices need every process to agree; the coordinator plans
      // placement only, with the job's own codecs (geodesic plan shows codecs).
      JobSpec j = job;
      j.wan.planner_codecs.clear();
      auto planner = wan::Planner::Create(j, layout);
      if (!planner.ok()) {
        *note = "planner failed (" + planner.status().message() + "); bytes-balanced placement";
        return balanced;
      }
      wan::Plan plan = planner->MakePlan(planner->declared_links(), {balanced.owner});
      auto base = planner->Predict(balanced.owner, plan.codecs, planner->declared_links());
      if (!job.wan.planner) {
        // Placement stays bytes-balanced; the prediction is still reported.
        *predicted_step_ms = base.ok() ? base->step_ms : 0;
        *note = "bytes-balanced placement (wan.planner: false), predicted step " + std::to_string(*predicted_step_ms) +
                " ms; the planner's would be " + std::to_string(plan.prediction.step_ms) + " ms";
        return balanced;
      }
      *predicted_step_ms = plan.prediction.step_ms;
      std::string per_server;
      for (uint64_t b : plan.shard_map.BytesPerServer(job.NumServers()))
        per_server += (per_server.empty() ? "" : "/") + std::to_string(b);
      char buf[256];
      std::snprintf(buf, sizeof(buf), "planner: bytes per server %s, predicted step %.1f ms (bytes-balanced %.1f ms)",
                    per_server.c_str(), plan.prediction.step_ms, base.ok() ? base->step_ms : -1.0);
      *note = buf;
      plan.shard_map.version = balanced.version;
      return plan.shard_map;
    };
  }
  return o;
}

CoordinatorState::CoordinatorState(CoordinatorOptions options, const Clock* clock)
    : options_(std::move(options)), clock_(clock), created_(clock->Now()) {
  servers_.resize(options_.num_servers);
  workers_.resize(options_.num_workers);
  for (int i = 0; i < options_.num_servers; ++i)
    if (i < static_cast<int>(options_.server_regions.size())) servers_[i].region = options_.server_regions[i];
  for (int i = 0; i < options_.num_workers; ++i)
    if (i < static_cast<int>(options_.worker_regions.size())) workers_[i].region = options_.worker_regions[i];
  for (int i = 0; i < options_.num_workers && i < static_cast<int>(options_.worker_start_clocks.size()); ++i)
    workers_[i].clock = options_.worker_start_clocks[i];
  if (replicated()) {
    backups_.resize(options_.num_servers);
    promoted_.assign(options_.num_servers, false);
    for (int i = 0; i < options_.num_servers && i < static_cast<int>(options_.backup_regions.size()); ++i)
      backups_[i].region = options_.backup_regions[i];
  }
}

CoordinatorState::Member* CoordinatorState::Find(wire::Role role, int id) {
  return const_cast<Member*>(static_cast<const CoordinatorState*>(this)->Find(role, id));
}

const CoordinatorState::Member* CoordinatorState::Find(wire::Role role, int id) const {
  switch (role) {
    case wire::SERVER:
      return id >= 0 && id < static_cast<int>(servers_.size()) ? &servers_[id] : nullptr;
    case wire::WORKER:
      return id >= 0 && id < static_cast<int>(workers_.size()) ? &workers_[id] : nullptr;
    case wire::EVALUATOR:
      return id == 0 ? &evaluator_ : nullptr;
    case wire::BACKUP:
      if (id < 0 || id >= static_cast<int>(backups_.size())) return nullptr;
      return promoted_[id] ? &servers_[id] : &backups_[id];
    default:
      return nullptr;
  }
}

void CoordinatorState::AddServers(google::protobuf::RepeatedPtrField<wire::ServerInfo>* out) const {
  out->Clear();
  for (int i = 0; i < static_cast<int>(servers_.size()); ++i) {
    auto* s = out->Add();
    s->set_id(i);
    s->set_endpoint(servers_[i].endpoint);
    s->set_region(servers_[i].region);
    s->set_curve_public_key(servers_[i].key);
    if (replicated() && !promoted_[i] && backups_[i].live) {
      s->set_backup_endpoint(backups_[i].endpoint);
      s->set_backup_curve_public_key(backups_[i].key);
    }
  }
}

int64_t CoordinatorState::MinLiveClock() const {
  int64_t m = std::numeric_limits<int64_t>::max();
  for (const auto& w : workers_)
    if (w.live) m = std::min(m, w.clock);
  return m == std::numeric_limits<int64_t>::max() ? 0 : m;
}

std::string CoordinatorState::WaitingFor() const {
  std::vector<int> s, w;
  for (int i = 0; i < static_cast<int>(servers_.size()); ++i)
    if (!servers_[i].registered) s.push_back(i);
  for (int i = 0; i < static_cast<int>(workers_.size()); ++i)
    if (!workers_[i].registered) w.push_back(i);
  std::vector<int> b;
  for (int i = 0; i < static_cast<int>(backups_.size()); ++i)
    if (!backups_[i].registered && !promoted_[i]) b.push_back(i);
  std::string out;
  if (!s.empty()) out += std::string(s.size() == 1 ? "server " : "servers ") + IdList(s);
  if (!b.empty()) out += std::string(out.empty() ? "" : "; ") + "backups of servers " + IdList(b);
  if (!w.empty()) out += std::string(out.empty() ? "" : "; ") + (w.size() == 1 ? "worker " : "workers ") + IdList(w);
  if (out.empty() && !shard_map_) out = "a worker's model signature";
  return out;
}

void CoordinatorState::MaybeStart() {
  if (started_ || !shard_map_) return;
  for (const auto& s : servers_)
    if (!s.registered) return;
  for (const auto& w : workers_)
    if (!w.registered) return;
  for (const auto& b : backups_)
    if (!b.registered) return;
  started_ = true;
  started_at_ = clock_->Now();
  ++epoch_;
}

wire::RegisterReply CoordinatorState::Assignment(wire::Role role, const Member& m) const {
  wire::RegisterReply r;
  r.set_heartbeat_ms(options_.membership.heartbeat_ms);
  r.set_lease_ms(options_.membership.lease_ms);
  r.set_membership_epoch(epoch_);
  r.set_num_workers(options_.num_workers);
  if (!started_) {
    r.set_ready(false);
    r.set_waiting_for(WaitingFor());
    return r;
  }
  r.set_ready(true);
  *r.mutable_shard_map() = shard_map_->ToWire();
  AddServers(r.mutable_servers());
  if (role == wire::WORKER) r.set_start_clock(std::max(m.clock, 0L));
  return r;
}

std::string CoordinatorState::KeyWait(wire::Role role, int id, const Member& m) const {
  if (!secure() || !started_) return "";
  // A primary replicates to its backup, which must admit its key first
  // (ZeroMQ does not retry a connection whose handshake ZAP refused).
  if (role == wire::SERVER) {
    if (!replicated() || promoted_[id] || !backups_[id].live || backups_[id].keys_installed >= m.key_epoch) return "";
    return "the backup of server " + std::to_string(id) + " to authorize its primary's key (at its next heartbeat)";
  }
  if (role != wire::WORKER && role != wire::EVALUATOR) return "";
  // Every process that serves a shard now, or may after a failover.
  std::vector<int> behind, behind_backups;
  for (int i = 0; i < static_cast<int>(servers_.size()); ++i)
    if (servers_[i].live && servers_[i].keys_installed < m.key_epoch) behind.push_back(i);
  for (int i = 0; i < static_cast<int>(backups_.size()); ++i)
    if (!promoted_[i] && backups_[i].live && backups_[i].keys_installed < m.key_epoch) behind_backups.push_back(i);
  if (behind.empty() && behind_backups.empty()) return "";
  std::string who;
  if (!behind.empty()) who = std::string(behind.size() == 1 ? "server " : "servers ") + IdList(behind);
  if (!behind_backups.empty())
    who += (who.empty() ? "" : " and ") + std::string("the backup") +
           (behind_backups.size() == 1 ? " of server " : "s of servers ") + IdList(behind_backups);
  return who + " to authorize " + RoleName(role) + " " + std::to_string(id) + "'s key (at its next heartbeat)";
}

::geodesic::Status CoordinatorState::CheckKey(wire::Role role, int id, const std::string& peer_key) const {
  if (!secure()) return ::geodesic::Status::Ok();
  const Member* m = Find(role, id);
  if (!m || m->key.empty()) return ::geodesic::Status::Ok();
  if (peer_key != m->key)
    return PermissionDenied(std::string("request as ") + RoleName(role) + " " + std::to_string(id) +
                            " came with another CURVE key than the one it registered with");
  return ::geodesic::Status::Ok();
}

bool CoordinatorState::IsMemberKey(const std::string& peer_key) const {
  if (peer_key.empty()) return false;
  for (const auto* group : {&servers_, &backups_, &workers_})
    for (const auto& m : *group)
      if (m.key == peer_key) return true;
  return evaluator_.key == peer_key;
}

StatusOr<wire::RegisterReply> CoordinatorState::Register(wire::Role role, int id, const wire::RegisterRequest& req,
                                                         const std::string& peer_key) {
  if (secure()) {
    // Before anything else, so that a refused registration changes nothing.
    if (peer_key.empty()) return PermissionDenied("registration did not arrive over an authenticated CURVE connection");
    // A backup joins with a server token for its shard.
    auto claims = transport::VerifyToken(options_.secret, req.token(), options_.job_name,
                                         RoleName(role == wire::BACKUP ? wire::SERVER : role), id, options_.unix_now());
    if (!claims.ok()) return claims.status();
  }
  Member* m = Find(role, id);
  if (!m)
    return OutOfRange(std::string(RoleName(role)) + " id " + std::to_string(id) + " is not part of this job (" +
                      std::to_string(options_.num_servers) + " servers, " + std::to_string(options_.num_workers) +
                      " workers)");
  // A server restarted in place binds the endpoint its predecessor held,
  // which only one process can hold: the old one is gone, whatever its
  // lease says.
  const bool takeover = role == wire::SERVER && !req.endpoint().empty() && req.endpoint() == m->endpoint;
  if (m->live && m->pid != 0 && req.pid() != 0 && m->pid != req.pid() && !takeover)
    return ::geodesic::Status(Code::kAlreadyExists, std::string(RoleName(role)) + " " + std::to_string(id) +
                                                        " is already held by pid " + std::to_string(m->pid));
  // A backup declared dead (or gone) once training started stays out: its
  // primary went on alone and acknowledged updates the backup never saw,
  // so promoting it later would lose them.
  if (role == wire::BACKUP && started_ && !promoted_[id] && m->registered && (m->died || m->left))
    return FailedPrecondition("server " + std::to_string(id) +
                              "'s backup was declared dead and its primary went on alone; a backup does not "
                              "rejoin (restarting a backup is not supported)");
  if (role == wire::BACKUP && promoted_[id] && !m->live)
    return FailedPrecondition("server " + std::to_string(id) +
                              "'s backup was promoted and has died; the shard has no "
                              "replica left (restarting a backup is not supported)");
  if (role == wire::SERVER || role == wire::BACKUP) {
    if (req.endpoint().empty()) return InvalidArgument("server registration without an endpoint");
    if (started_ && m->registered && m->endpoint != req.endpoint())
      return FailedPrecondition(std::string(RoleName(role)) + " " + std::to_string(id) + " moved from " + m->endpoint +
                                " to " + req.endpoint() + "; moving shards is not supported");
    if (role == wire::BACKUP && m->endpoint != req.endpoint()) ++servers_epoch_;
    m->endpoint = req.endpoint();
  }
  if (role == wire::WORKER) {
    const auto& sig = req.model();
    if (sig.num_params() == 0) return InvalidArgument("worker registration without a model signature");
    GD_RETURN_IF_ERROR(cluster::CheckLayout(sig.num_params(), cluster::ChunkElemsFor(options_.chunk_bytes))
                           .Annotate("worker " + std::to_string(id) + "'s model (" + sig.name() + ")"));
    if (!model_) {
      model_ = sig;
      cluster::ChunkLayout layout(sig.num_params(), cluster::ChunkElemsFor(options_.chunk_bytes));
      if (options_.place) {
        shard_map_ = options_.place(layout, &plan_note_, &planned_step_ms_);
        GD_LOG(INFO) << plan_note_;
        if (options_.replan.enabled) planner_.reset();  // Tick makes it for this layout
      } else {
        shard_map_ = cluster::PlaceChunks(layout, options_.num_servers);
      }
    } else if (model_->num_params() != sig.num_params() || model_->layout_digest() != sig.layout_digest()) {
      return InvalidArgument("worker " + std::to_string(id) + "'s model (" + sig.name() + ", " +
                             std::to_string(sig.num_params()) + " params) differs from the job's (" + model_->name() +
                             ", " + std::to_string(model_->num_params()) + " params)");
    }
  }
  bool was_live = m->live;
  // A late joiner, or a worker coming back after its lease ran out, starts
  // at the live workers' current clock with the current model; the clocks
  // it missed are history (BSP closed them without it).
  if (role == wire::WORKER && started_ && (!m->registered || (!m->live && !m->done)))
    m->clock = std::max(m->clock, MinLiveClock());
  m->registered = true;
  m->live = true;
  m->left = false;
  m->died = false;
  m->pid = req.pid();
  m->last_seen = clock_->Now();
  if (secure() && m->key != peer_key) {
    m->key = peer_key;
    // A new worker's, evaluator's or (replicated jobs) primary's key goes
    // into the lists the shards and backups admit.
    if (role == wire::WORKER || role == wire::EVALUATOR || (role == wire::SERVER && replicated()))
      m->key_epoch = ++keys_epoch_;
  }
  if (!req.region().empty()) m->region = req.region();
  if (role == wire::EVALUATOR) evaluator_seen_ = true;
  if (role == wire::WORKER && !was_live) ++epoch_;
  MaybeStart();
  wire::RegisterReply reply = Assignment(role, *m);
  if (migration_ && role == wire::WORKER && reply.ready()) {
    // A (re)joining worker would start with the map that is being replaced:
    // it waits, like a rendezvous, until the new one is published.
    wire::RegisterReply not_yet;
    not_yet.set_ready(false);
    not_yet.set_waiting_for("chunk migration " + std::to_string(migration_->record.id));
    not_yet.set_heartbeat_ms(reply.heartbeat_ms());
    not_yet.set_lease_ms(reply.lease_ms());
    not_yet.set_membership_epoch(reply.membership_epoch());
    not_yet.set_num_workers(reply.num_workers());
    return not_yet;
  }
  if (std::string wait = KeyWait(role, id, *m); !wait.empty()) {
    wire::RegisterReply not_yet;
    not_yet.set_ready(false);
    not_yet.set_waiting_for(wait);
    not_yet.set_heartbeat_ms(reply.heartbeat_ms());
    not_yet.set_lease_ms(reply.lease_ms());
    not_yet.set_membership_epoch(reply.membership_epoch());
    not_yet.set_num_workers(reply.num_workers());
    return not_yet;
  }
  return reply;
}

wire::HeartbeatReply CoordinatorState::Heartbeat(wire::Role role, int id, const wire::Heartbeat& hb) {
  wire::HeartbeatReply r;
  if (role == wire::SERVER && replicated() && promoted_[id]) {
    // The old primary is alive after all (it paused, or was cut off): it
    // renews nothing and learns that its backup serves now, so it stops.
    r.set_known(true);
    r.set_membership_epoch(epoch_);
    r.set_servers_epoch(servers_epoch_);
    AddServers(r.mutable_servers());
    return r;
  }
  Member* m = Find(role, id);
  if (!m || !m->live) {
    r.set_known(false);
    return r;
  }
  r.set_known(true);
  m->last_seen = clock_->Now();
  if (role == wire::WORKER) {
    m->clock = std::max(m->clock, hb.clock());
    m->barrier_floor = hb.barrier_floor();
    m->at_barrier = hb.at_barrier();
    if (hb.has_worker()) m->worker = hb.worker();
    if (hb.done() && !m->done) {
      m->done = true;
      NoteWorkersEnd();
    }
  }
  const bool server = role == wire::SERVER || role == wire::BACKUP;
  if (server && hb.has_server()) m->server = hb.server();
  if (server) m->migration_done = hb.migration_done();
  if (options_.replan.enabled) {
    FillMigration(role, &r);
    if (shard_map_ && hb.shard_map_version() < shard_map_->version) *r.mutable_shard_map() = shard_map_->ToWire();
  }
  if (replicated() && server) {
    if (hb.servers_epoch() < servers_epoch_) {
      r.set_servers_epoch(servers_epoch_);
      AddServers(r.mutable_servers());
    }
    r.set_promoted(role == wire::BACKUP && promoted_[id]);
  }
  if (replicated() && (role == wire::WORKER || role == wire::EVALUATOR) && hb.servers_epoch() < servers_epoch_) {
    r.set_servers_epoch(servers_epoch_);
    AddServers(r.mutable_servers());
  }
  if (server && secure()) {
    m->keys_installed = std::max(m->keys_installed, hb.keys_epoch());
    if (hb.keys_epoch() < keys_epoch_) {
      r.set_keys_epoch(keys_epoch_);
      for (int i = 0; i < static_cast<int>(workers_.size()); ++i)
        if (!workers_[i].key.empty()) r.add_authorized_keys(workers_[i].key), r.add_authorized_ids(i);
      if (!evaluator_.key.empty()) r.add_authorized_keys(evaluator_.key), r.add_authorized_ids(-1);
      if (role == wire::BACKUP && !promoted_[id]) r.set_primary_key(servers_[id].key);
    }
  }
  r.set_membership_epoch(epoch_);
  int done = 0, dead = 0;
  for (int i = 0; i < static_cast<int>(workers_.size()); ++i) {
    const Member& w = workers_[i];
    if (w.live) {
      r.add_live_workers(i);
      r.add_live_worker_clocks(w.clock);
    }
    done += w.done;
    dead += (w.died || w.left) && !w.done;  // gone before finishing
  }
  r.set_done_workers(done);
  r.set_dead_workers(dead);
  r.set_job_finished(job_finished());
  return r;
}

void CoordinatorState::FillMigration(wire::Role role, wire::HeartbeatReply* r) const {
  if (!migration_) return;
  auto* mg = r->mutable_migration();
  mg->set_id(migration_->record.id);
  mg->set_barrier_clock(migration_->record.clock);
  *mg->mutable_new_map() = migration_->new_map.ToWire();
  if (migration_->transfer && (role == wire::SERVER || role == wire::BACKUP)) {
    mg->set_transfer(true);
    AddServers(mg->mutable_servers());
  }
}

std::vector<std::string> CoordinatorState::Tick() {
  std::vector<std::string> lines;
  if (!options_.replan.enabled || !options_.replan.job || !started_ || !shard_map_ || job_finished()) return lines;
  const TimePoint now = clock_->Now();
  if (!planner_) {
    last_check_ = now;
    auto planner = wan::Planner::Create(*options_.replan.job, shard_map_->layout);
    if (!planner.ok()) {
      lines.push_back("re-planning off: " + planner.status().message());
      options_.replan.enabled = false;
      return lines;
    }
    planner_.emplace(std::move(*planner));
    wan::Plan plan;
    plan.shard_map = *shard_map_;
    plan.codecs = planner_->JobCodecs();
    plan.links = planner_->declared_links();
    auto p = planner_->Predict(shard_map_->owner, plan.codecs, plan.links);
    if (p.ok()) plan.prediction = *p;
    plan_ = std::move(plan);
  }
  if (migration_)
    AdvanceMigration(now, &lines);
  else
    CheckDrift(now, &lines);
  return lines;
}

void CoordinatorState::CheckDrift(TimePoint now, std::vector<std::string>* lines) {
  const ReplanOptions& o = options_.replan;
  std::vector<WorkerLinkReport> reports;
  int64_t last_clock = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> floors;
  for (const Member& w : workers_) {
    if (w.done) return;  // the job is ending: nothing to gain
    if (!w.live) continue;
    reports.push_back({w.region, {w.worker.links().begin(), w.worker.links().end()}});
    if (w.worker.target_steps() > 0) last_clock = std::min(last_clock, w.worker.target_steps() - 1);
    floors.push_back(std::max(w.barrier_floor, w.clock + o.pipeline_depth));
  }
  if (reports.empty()) return;
  const bool inject_due = o.inject_at_clock >= 0 && !injected_ && MinLiveClock() >= o.inject_at_clock;
  const bool forced = !forced_replan_.empty();
  if (!forced && !inject_due && (o.every_s <= 0 || Seconds(now - last_check_) < o.every_s)) return;
  last_check_ = now;
  std::string reason = forced       ? forced_replan_
                       : inject_due ? "drift injected at clock " + std::to_string(MinLiveClock())
                                    : "measured drift";
  forced_replan_.clear();
  int measured_links = 0;
  wan::LinkMatrix measured = MeasuredLinks(plan_->links, reports, o.min_samples, &measured_links);
  if (inject_due) injected_ = true;
  if (injected_) {
    // The injected value stands for the link's measurement from now on.
    const int a = measured.Index(o.inject_from), b = measured.Index(o.inject_to);
    if (a >= 0 && b >= 0) {
      measured.at(a, b).bandwidth_mbit = o.inject_mbit;
      measured.at(a, b).declared = true;
    }
  }
  auto replan = planner_->CheckDrift(*plan_, measured);
  if (!replan.ok()) {
    lines->push_back("re-plan check failed: " + replan.status().message());
    return;
  }
  if (!replan->plan && forced) {
    // Asked for: plan for the links as measured even if none drifted enough.
    wan::Plan p = planner_->MakePlan(measured, {shard_map_->owner});
    replan->drifted.push_back("none beyond wan.replan_drift (" + std::to_string(measured_links) + " link(s) measured)");
    for (uint32_t c = 0; c < p.shard_map.owner.size(); ++c)
      if (p.shard_map.owner[c] != shard_map_->owner[c])
        replan->moves.push_back({c, shard_map_->owner[c], p.shard_map.owner[c]});
    replan->plan = std::move(p);
  }
  if (!replan->plan) return;
  std::string drifted;
  for (const auto& d : replan->drifted) drifted += (drifted.empty() ? "" : "; ") + d;
  if (replan->moves.empty()) {
    plan_->links = measured;
    plan_->prediction = replan->plan->prediction;
    lines->push_back("re-plan (" + reason + "): " + drifted + "; the placement stays");
    return;
  }
  const int64_t barrier = ChooseBarrier(floors, last_clock);
  if (barrier < 0) {
    lines->push_back("re-plan (" + reason + "): " + drifted + "; too close to the job's end to move chunks");
    return;
  }
  Migration mg;
  mg.plan = *replan->plan;
  mg.new_map = mg.plan.shard_map;
  mg.new_map.version = shard_map_->version + 1;
  mg.plan.shard_map = mg.new_map;
  mg.started = now;
  mg.record.id = ++migrations_started_;
  mg.record.clock = barrier;
  mg.record.reason = reason;
  mg.record.drifted = replan->drifted;
  mg.record.moves = replan->moves;
  mg.record.predicted_step_ms_before = plan_->prediction.step_ms;
  if (auto p = planner_->Predict(shard_map_->owner, plan_->codecs, measured); p.ok())
    mg.record.predicted_step_ms_before = p->step_ms;  // the current placement on the links as they are now
  mg.record.predicted_step_ms_after = mg.plan.prediction.step_ms;
  mg.record.map_version = mg.new_map.version;
  std::map<std::pair<int, int>, int> pairs;
  for (const auto& mv : replan->moves) pairs[{mv.from, mv.to}]++;
  std::string moves;
  for (const auto& [p, n] : pairs)
    moves += (moves.empty() ? "" : ", ") + std::to_string(n) + " server " + std::to_string(p.first) + " -> " +
             std::to_string(p.second);
  lines->push_back("re-plan " + std::to_string(mg.record.id) + " starts (" + reason + "): " + drifted + "; moving " +
                   std::to_string(replan->moves.size()) + " chunk(s) (" + moves + "), predicted step " +
                   Fmt(mg.record.predicted_step_ms_before) + " -> " + Fmt(mg.record.predicted_step_ms_after) +
                   " ms; barrier at clock " + std::to_string(barrier));
  migration_ = std::move(mg);
}

void CoordinatorState::AdvanceMigration(TimePoint now, std::vector<std::string>* lines) {
  Migration& mg = *migration_;
  const uint64_t id = mg.record.id;
  auto abandon = [&](const std::string& why) {
    lines->push_back("re-plan " + std::to_string(id) + " abandoned: " + why + "; the placement stays");
    migration_.reset();
    last_check_ = now;
  };
  if (!mg.transfer) {
    int64_t last_clock = std::numeric_limits<int64_t>::max(), max_floor = -1;
    bool all_at = true;
    int live = 0;
    for (const Member& w : workers_) {
      if (!w.live || w.done) continue;
      ++live;
      if (w.worker.target_steps() > 0) last_clock = std::min(last_clock, w.worker.target_steps() - 1);
      max_floor = std::max(max_floor, w.barrier_floor);
      all_at &= w.at_barrier == id && w.clock == mg.record.clock;
    }
    if (live == 0) return abandon("no live worker");
    if (max_floor > mg.record.clock) {
      // A worker had gone past the barrier before it heard of it: move the
      // barrier out to it (workers already waiting go on to the new one).
      if (max_floor >= last_clock || ++mg.raises > 20)
        return abandon("the workers could not be stopped before the job's end");
      lines->push_back("re-plan " + std::to_string(id) + ": barrier moved from clock " +
                       std::to_string(mg.record.clock) + " to " + std::to_string(max_floor));
      mg.record.clock = max_floor;
      return;
    }
    if (all_at) {
      mg.transfer = true;
      mg.at_barrier = now;
      mg.record.barrier_ms = 1e3 * Seconds(now - mg.started);
      lines->push_back("re-plan " + std::to_string(id) + ": all " + std::to_string(live) +
                       " live worker(s) at the barrier (clock " + std::to_string(mg.record.clock) + ") after " +
                       Fmt(mg.record.barrier_ms) + " ms; shards transfer " + std::to_string(mg.record.moves.size()) +
                       " chunk(s)");
      return;
    }
    if (Seconds(now - mg.started) > 120) return abandon("the workers did not reach the barrier in 120 s");
    return;
  }
  for (const Member& s : servers_)
    if (s.live && s.migration_done != id) {
      if (Seconds(now - mg.at_barrier) > 120 && static_cast<int64_t>(Seconds(now - mg.at_barrier)) % 30 == 0)
        lines->push_back("re-plan " + std::to_string(id) + ": shards still transferring after " +
                         std::to_string(static_cast<int>(Seconds(now - mg.at_barrier))) + " s");
      return;
    }
  mg.record.transfer_ms = 1e3 * Seconds(now - mg.at_barrier);
  shard_map_ = mg.new_map;
  plan_ = mg.plan;
  planned_step_ms_ = mg.record.predicted_step_ms_after;
  lines->push_back("re-plan " + std::to_string(id) + " done: shard map version " + std::to_string(mg.new_map.version) +
                   " published; " + std::to_string(mg.record.moves.size()) + " chunk(s) moved in " +
                   Fmt(mg.record.transfer_ms) + " ms after a " + Fmt(mg.record.barrier_ms) +
                   " ms barrier; predicted step " + Fmt(mg.record.predicted_step_ms_before) + " -> " +
                   Fmt(mg.record.predicted_step_ms_after) + " ms");
  replans_.push_back(mg.record);
  migration_.reset();
  last_check_ = now;
}

void CoordinatorState::Leave(wire::Role role, int id) {
  Member* m = Find(role, id);
  if (!m || !m->registered) return;
  if (m->live && role == wire::WORKER) ++epoch_;
  if (m->live && role == wire::BACKUP && !promoted_[id]) ++servers_epoch_;  // the primary goes on alone
  m->live = false;
  m->left = true;
  NoteWorkersEnd();
}

std::vector<std::string> CoordinatorState::ExpireLeases() {
  std::vector<std::string> deaths;
  TimePoint now = clock_->Now();
  Duration lease = Millis(options_.membership.lease_ms);
  auto expire = [&](Member& m, wire::Role role, int id) {
    if (!m.live || now - m.last_seen <= lease) return;
    m.live = false;
    if (!m.done) m.died = true;
    if (role == wire::WORKER) ++epoch_;
    char buf[256];
    std::snprintf(buf, sizeof(buf), "%s %d lease expired (silent %.1f s)%s", RoleName(role), id,
                  Seconds(now - m.last_seen),
                  role == wire::WORKER && !m.done ? "; it no longer counts toward the staleness bound" : "");
    deaths.emplace_back(buf);
  };
  for (int i = 0; i < static_cast<int>(servers_.size()); ++i) {
    const bool was_live = servers_[i].live;
    expire(servers_[i], promoted_.empty() || !promoted_[i] ? wire::SERVER : wire::BACKUP, i);
    if (replicated() && !promoted_[i]) {
      const bool backup_was_live = backups_[i].live;
      expire(backups_[i], wire::BACKUP, i);
      if (backup_was_live && !backups_[i].live) ++servers_epoch_;  // the primary goes on alone
      // Only once training started: before that the rendezvous (which
      // renews leases only every 200 ms) would swap members under it.
      if (started_ && was_live && !servers_[i].live && backups_[i].live) {
        // The backup holds every update the primary acknowledged: it serves now.
        servers_[i] = backups_[i];
        backups_[i] = Member{};
        backups_[i].region = servers_[i].region;
        promoted_[i] = true;
        ++promotions_;
        ++servers_epoch_;
        deaths.push_back("server " + std::to_string(i) + ": promoted its backup at " + servers_[i].endpoint);
      }
    }
  }
  for (int i = 0; i < static_cast<int>(workers_.size()); ++i) expire(workers_[i], wire::WORKER, i);
  expire(evaluator_, wire::EVALUATOR, 0);
  NoteWorkersEnd();
  return deaths;
}

void CoordinatorState::NoteWorkersEnd() {
  if (!started_ || last_worker_end_) return;
  for (const auto& w : workers_)
    if (!(w.done || w.died || w.left)) return;
  last_worker_end_ = clock_->Now();
}

bool CoordinatorState::job_finished() const {
  if (!started_) return false;
  for (const auto& w : workers_)
    if (!w.done && w.live) return false;
  for (const auto& w : workers_)
    if (!w.done && !w.died && !w.left) return false;
  if (options_.expect_evaluator && !(evaluator_seen_ && !evaluator_.live)) return false;
  return true;
}

bool CoordinatorState::all_servers_left() const {
  for (const auto& s : servers_)
    if (s.live) return false;
  for (const auto& s : backups_)
    if (s.live) return false;
  return true;
}

double CoordinatorState::training_seconds() const {
  if (!started_) return 0;
  TimePoint end = clock_->Now();
  // Training ends when the last worker is done or dead, before evaluation.
  if (last_worker_end_) end = *last_worker_end_;
  return Seconds(end - started_at_);
}

namespace {

wire::MemberSnapshot SaveMember(const auto& m) {
  wire::MemberSnapshot s;
  s.set_registered(m.registered);
  s.set_done(m.done);
  s.set_left(m.left);
  s.set_died(m.died);
  s.set_clock(m.clock);
  s.set_pid(m.pid);
  s.set_endpoint(m.endpoint);
  s.set_region(m.region);
  s.set_curve_public_key(m.key);
  s.set_key_epoch(m.key_epoch);
  return s;
}

void RestoreMember(const wire::MemberSnapshot& s, TimePoint now, auto* m) {
  m->registered = s.registered();
  m->done = s.done();
  m->left = s.left();
  m->died = s.died();
  m->clock = s.clock();
  m->pid = s.pid();
  m->endpoint = s.endpoint();
  if (!s.region().empty()) m->region = s.region();
  m->key = s.curve_public_key();
  m->key_epoch = s.key_epoch();
  m->keys_installed = 0;  // each shard reports it again with its next heartbeat
  // Whoever was there gets a lease's time to heartbeat again.
  m->live = m->registered && !m->left && !m->died && !m->done;
  m->last_seen = now;
}

}  // namespace

wire::CoordinatorSnapshot CoordinatorState::Save() const {
  wire::CoordinatorSnapshot s;
  s.set_job(options_.job_name);
  s.set_started(started_);
  s.set_training_seconds(training_seconds());
  if (last_worker_end_) {
    s.set_workers_ended(true);
    s.set_workers_ended_at(Seconds(*last_worker_end_ - started_at_));
  }
  if (model_) *s.mutable_model() = *model_;
  if (shard_map_) *s.mutable_shard_map() = shard_map_->ToWire();
  s.set_membership_epoch(epoch_);
  for (const Member& m : servers_) *s.add_servers() = SaveMember(m);
  for (const Member& m : workers_) *s.add_workers() = SaveMember(m);
  *s.mutable_evaluator() = SaveMember(evaluator_);
  s.set_evaluator_seen(evaluator_seen_);
  s.set_plan_note(plan_note_);
  s.set_planned_step_ms(planned_step_ms_);
  for (const Member& m : backups_) *s.add_backups() = SaveMember(m);
  for (bool p : promoted_) s.add_promoted(p);
  s.set_servers_epoch(servers_epoch_);
  s.set_promotions(promotions_);
  s.set_keys_epoch(keys_epoch_);
  return s;
}

::geodesic::Status CoordinatorState::Restore(const wire::CoordinatorSnapshot& s) {
  if (s.job() != options_.job_name)
    return FailedPrecondition("coordinator state of job '" + s.job() + "', not '" + options_.job_name + "'");
  if (s.backups_size() != static_cast<int>(backups_.size()))
    return FailedPrecondition("coordinator state with " + std::to_string(s.backups_size()) + " backups; this job has " +
                              std::to_string(backups_.size()));
  if (s.servers_size() != options_.num_servers || s.workers_size() != options_.num_workers)
    return FailedPrecondition("coordinator state for " + std::to_string(s.servers_size()) + " servers and " +
                              std::to_string(s.workers_size()) + " workers; this job has " +
                              std::to_string(options_.num_servers) + " and " + std::to_string(options_.num_workers));
  std::optional<cluster::ShardMap> map;
  if (s.has_shard_map()) {
    auto m = cluster::ShardMap::FromWire(s.shard_map(), options_.num_servers);
    if (!m.ok()) return m.status().Annotate("coordinator state");
    map = *m;
  }
  const TimePoint now = clock_->Now();
  started_ = s.started();
  started_at_ = now - std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s.training_seconds()));
  last_worker_end_.reset();
  if (s.workers_ended())
    last_worker_end_ =
        started_at_ + std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s.workers_ended_at()));
  model_.reset();
  if (s.has_model()) model_ = s.model();
  shard_map_ = map;
  epoch_ = s.membership_epoch() + 1;  // the live set may differ from what was saved
  for (int i = 0; i < options_.num_servers; ++i) RestoreMember(s.servers(i), now, &servers_[i]);
  for (int i = 0; i < options_.num_workers; ++i) RestoreMember(s.workers(i), now, &workers_[i]);
  RestoreMember(s.evaluator(), now, &evaluator_);
  evaluator_seen_ = s.evaluator_seen();
  // Past the saved epoch, so that every shard is sent the restored list.
  keys_epoch_ = s.keys_epoch() + 1;
  plan_note_ = s.plan_note();
  planned_step_ms_ = s.planned_step_ms();
  if (static_cast<size_t>(s.backups_size()) == backups_.size() && s.promoted_size() == s.backups_size()) {
    for (int i = 0; i < s.backups_size(); ++i) {
      RestoreMember(s.backups(i), now, &backups_[i]);
      promoted_[i] = s.promoted(i);
    }
    servers_epoch_ = s.servers_epoch() + 1;  // members re-read the serving endpoints
    promotions_ = s.promotions();
  }
  return ::geodesic::Status::Ok();
}

wire::StatusReply CoordinatorState::Status() const {
  wire::StatusReply r;
  r.set_uptime_seconds(Seconds(clock_->Now() - created_));
  r.set_training_started(started_);
  r.set_training_seconds(training_seconds());
  r.set_job_finished(job_finished());
  r.set_min_clock(MinLiveClock());
  r.set_staleness_bound(options_.staleness_bound);
  for (int i = 0; i < static_cast<int>(workers_.size()); ++i) {
    const Member& w = workers_[i];
    auto* s = r.add_workers();
    s->set_id(i);
    s->set_region(w.region);
    s->set_live(w.live);
    s->set_done(w.done);
    s->set_clock(w.clock);
    *s->mutable_progress() = w.worker;
  }
  auto describe = [](wire::ServerStatus* s, int id, const Member& m) {
    s->set_id(id);
    s->set_region(m.region);
    s->set_live(m.live);
    s->set_endpoint(m.endpoint);
    *s->mutable_progress() = m.server;
  };
  for (int i = 0; i < static_cast<int>(servers_.size()); ++i) describe(r.add_servers(), i, servers_[i]);
  for (int i = 0; i < static_cast<int>(backups_.size()); ++i)
    if (!promoted_[i] && backups_[i].registered) describe(r.add_backups(), i, backups_[i]);
  return r;
}

std::optional<wire::Header> CoordinatorState::Answer(const wire::Header& h, const std::string& peer_key,
                                                     bool* refused) {
  *refused = false;
  wire::Header reply;
  auto refuse = [&](wire::Refusal why, const ::geodesic::Status& s) {
    *refused = true;
    GD_LOG(WARNING) << "refused " << transport::BodyName(h) << " from " << RoleName(h.sender_role()) << " "
                    << h.sender_id() << ": " << s;
    reply.mutable_error_reply()->set_code(transport::ToWire(s.code()));
    reply.mutable_error_reply()->set_message(s.message());
    reply.mutable_error_reply()->set_reason(why);
    return reply;
  };
  if (h.body_case() == wire::Header::kHeartbeat || h.body_case() == wire::Header::kLeaveRequest) {
    if (::geodesic::Status s = CheckKey(h.sender_role(), h.sender_id(), peer_key); !s.ok())
      return refuse(wire::REFUSAL_UNAUTHORIZED, s);
  }
  switch (h.body_case()) {
    case wire::Header::kRegisterRequest: {
      auto r = Register(h.sender_role(), h.sender_id(), h.register_request(), peer_key);
      if (!r.ok()) return refuse(wire::REFUSAL_REGISTRATION, r.status());
      *reply.mutable_register_reply() = *r;
      return reply;
    }
    case wire::Header::kHeartbeat:
      *reply.mutable_heartbeat_reply() = Heartbeat(h.sender_role(), h.sender_id(), h.heartbeat());
      return reply;
    case wire::Header::kLeaveRequest:
      Leave(h.sender_role(), h.sender_id());
      GD_LOG(INFO) << RoleName(h.sender_role()) << " " << h.sender_id() << " left";
      return std::nullopt;  // no reply: the member is gone
    case wire::Header::kStatusRequest: {
      if (secure() && !IsMemberKey(peer_key)) {
        auto claims = peer_key.empty()
                          ? StatusOr<transport::TokenClaims>(PermissionDenied("no authenticated CURVE connection"))
                          : transport::VerifyToken(options_.secret, h.status_request().token(), options_.job_name,
                                                   "client", 0, options_.unix_now());
        if (!claims.ok()) return refuse(wire::REFUSAL_UNAUTHORIZED, claims.status());
      }
      *reply.mutable_status_reply() = Status();
      return reply;
    }
    default:
      return refuse(wire::REFUSAL_UNSUPPORTED_TYPE,
                    InvalidArgument("the coordinator does not serve " + transport::BodyName(h)));
  }
}

// ---------------------------------------------------------------------------

Coordinator::Coordinator(CoordinatorProcessOptions options, zmq::context_t& ctx, const Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      ctx_(ctx),
      socket_(ctx, zmq::socket_type::router,
              transport::SocketOptions{.job = options_.coordinator.job_name,
                                       .role = wire::COORDINATOR,
                                       .id = 0,
                                       .max_message_bytes = options_.coordinator.max_message_bytes,
                                       .curve = transport::CurveSocket{.keys = options_.keys, .server_key = {}}},
              &counters_),
      state_(options_.coordinator, clock) {}

void Coordinator::Reply(const transport::Message& request, wire::Header reply) {
  reply.set_request_id(request.header.request_id());
  Status s = socket_.Send(std::move(reply), {}, request.peer);
  if (!s.ok()) GD_LOG(WARNING) << "reply to " << request.header.sender_id() << " failed: " << s;
}

void Coordinator::Handle(transport::Message& m) {
  bool refused = false;
  std::optional<wire::Header> reply = state_.Answer(m.header, m.peer_key, &refused);
  if (refused) counters_.messages_refused++;
  // A key bound at registration is saved before the member learns it is
  // in: a coordinator restarted from a state without it would let another
  // key speak for that member.
  if (state_.secure() && m.header.has_register_request()) SaveState(true);
  if (reply) Reply(m, std::move(*reply));
}

void Coordinator::WriteStats() const {
  if (options_.stats_file.empty()) return;
  nlohmann::json j;
  j["role"] = "coordinator";
  j["bytes_sent"] = counters_.bytes_sent.load();
  j["bytes_received"] = counters_.bytes_received.load();
  j["messages_refused"] = counters_.messages_refused.load();
  j["training_seconds"] = state_.training_seconds();
  if (!state_.plan_note().empty()) {
    j["plan"] = {{"note", state_.plan_note()}, {"predicted_step_ms", state_.planned_step_ms()}};
    if (auto m = state_.shard_map())
      j["plan"]["bytes_per_server"] = m->BytesPerServer(options_.coordinator.num_servers);
  }
  if (options_.coordinator.replan.enabled) {
    nlohmann::json replans = nlohmann::json::array();
    for (const auto& r : state_.replans()) {
      nlohmann::json moves = nlohmann::json::array();
      for (const auto& mv : r.moves) moves.push_back({{"chunk", mv.chunk}, {"from", mv.from}, {"to", mv.to}});
      replans.push_back({{"id", r.id},
                         {"clock", r.clock},
                         {"reason", r.reason},
                         {"drifted", r.drifted},
                         {"moved_chunks", r.moves.size()},
                         {"moves", moves},
                         {"predicted_step_ms_before", r.predicted_step_ms_before},
                         {"predicted_step_ms_after", r.predicted_step_ms_after},
                         {"barrier_ms", r.barrier_ms},
                         {"transfer_ms", r.transfer_ms},
                         {"shard_map_version", r.map_version}});
    }
    j["replans"] = replans;
    if (auto m = state_.shard_map()) j["shard_map_version"] = m->version;
  }
  j["job_finished"] = state_.job_finished();
  Status s = WriteFileAtomic(options_.stats_file, j.dump(2), /*durable=*/false);
  if (!s.ok()) GD_LOG(WARNING) << s;
}

void Coordinator::SaveState(bool now) {
  if (options_.state_file.empty()) return;
  TimePoint t = clock_->Now();
  if (!now && t - saved_at_ < std::chrono::milliseconds(200)) return;
  wire::CoordinatorSnapshot snap = state_.Save();
  snap.clear_training_seconds();  // changes all the time; not worth a write by itself
  std::string bytes = snap.SerializeAsString();
  if (bytes == saved_state_) return;
  snap.set_training_seconds(state_.training_seconds());
  Status s = WriteFileAtomic(options_.state_file, snap.SerializeAsString(), /*durable=*/false);
  if (!s.ok()) {
    GD_LOG(WARNING) << "saving the coordinator's state: " << s;
    return;
  }
  saved_state_ = std::move(bytes);
  saved_at_ = t;
}

Status Coordinator::Run(const std::atomic<bool>* stop) {
  if (!options_.state_file.empty() && std::filesystem::exists(options_.state_file)) {
    GD_ASSIGN_OR_RETURN(std::string bytes, ReadFile(options_.state_file));
    wire::CoordinatorSnapshot snap;
    if (!snap.ParseFromString(bytes))
      return DataLoss(options_.state_file + ": the coordinator's saved state does not parse");
    GD_RETURN_IF_ERROR(state_.Restore(snap).Annotate(options_.state_file));
    int live = 0;
    for (const auto& w : snap.workers()) live += w.registered() && !w.done() && !w.died() && !w.left();
    GD_LOG(WARNING) << "restarted: continuing the job from " << options_.state_file << " ("
                    << (snap.started() ? "training for " + std::to_string(snap.training_seconds()) + " s, "
                                       : std::string("in the rendezvous, "))
                    << live << " workers live); members have " << options_.coordinator.membership.lease_ms
                    << " ms to heartbeat again";
  }
  if (!options_.keys.secret_key.empty()) {
    if (options_.coordinator.secret.empty()) return FailedPrecondition("a secured coordinator needs the job secret");
    zap_ = std::make_unique<transport::ZapHandler>(ctx_, /*admit_any=*/true);
    GD_RETURN_IF_ERROR(zap_->Start());
    if (!options_.key_file.empty()) GD_RETURN_IF_ERROR(WriteFileAtomic(options_.key_file, options_.keys.public_key));
  }
  GD_RETURN_IF_ERROR(socket_.Bind(options_.bind));
  GD_LOG(INFO) << "listening on " << socket_.endpoint() << " for " << options_.coordinator.num_servers
               << " servers and " << options_.coordinator.num_workers << " workers";
  if (!options_.endpoint_file.empty()) GD_RETURN_IF_ERROR(WriteFileAtomic(options_.endpoint_file, socket_.endpoint()));

  WaitReporter rendezvous(clock_, std::chrono::seconds(options_.coordinator.membership.report_after_s));
  TimePoint last_stats = clock_->Now();
  std::optional<TimePoint> finished_since;
  bool announced_start = false;
  while (!stop->load()) {
    if (socket_.WaitReadable(50)) {
      for (int i = 0; i < 256; ++i) {
        auto in = socket_.Receive();
        if (!in) break;
        if (!in->status.ok()) {
          GD_LOG(WARNING) << "refused a message from " << in->message.header.sender_id() << ": " << in->status;
          continue;
        }
        Handle(in->message);
      }
    }
    for (const auto& line : state_.ExpireLeases()) GD_LOG(WARNING) << line;
    if (options_.replan_requests && options_.replan_requests->load() != seen_replan_requests_) {
      seen_replan_requests_ = options_.replan_requests->load();
      state_.RequestReplan("requested (geodesic wan replan)");
    }
    for (const auto& line : state_.Tick()) GD_LOG(INFO) << line;
    SaveState(false);
    if (!state_.started() && rendezvous.Due())
      GD_LOG(INFO) << "start-up: waiting " << static_cast<int>(rendezvous.ElapsedSeconds()) << " s for "
                   << state_.WaitingFor() << " to register";
    if (state_.started() && !announced_start) {
      announced_start = true;
      auto bytes = state_.shard_map()->BytesPerServer(options_.coordinator.num_servers);
      std::string per;
      for (size_t i = 0; i < bytes.size(); ++i) per += (i ? ", " : "") + std::to_string(bytes[i] / 1024) + " KiB";
      GD_LOG(INFO) << "all members registered; " << state_.shard_map()->layout.num_chunks() << " chunks placed (" << per
                   << " per server); training starts";
    }
    TimePoint now = clock_->Now();
    if (now - last_stats > std::chrono::seconds(2)) {
      WriteStats();
      last_stats = now;
    }
    if (state_.job_finished()) {
      if (!finished_since) {
        finished_since = now;
        GD_LOG(INFO) << "job finished after " << state_.training_seconds() << " s of training";
      }
      // Give servers a few heartbeats to hear it and leave.
      if (state_.all_servers_left() || now - *finished_since > Millis(2 * options_.coordinator.membership.lease_ms))
        break;
    }
  }
  SaveState(true);
  WriteStats();
  return Status::Ok();
}

}  // namespace geodesic::server
