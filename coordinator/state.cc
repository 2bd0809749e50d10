#include "coordinator/state.h"

#include <algorithm>
#include <limits>

#include "common/log.h"
#include "coordinator/names.h"
#include "transport/message.h"

namespace geodesic::coordinator {
using names::IdList;
using names::RoleName;

CoordinatorOptions CoordinatorOptions::FromJob(const JobSpec& job) {
  CoordinatorOptions o;
  o.job_name = job.name;
  o.num_servers = job.NumServers();
  o.num_workers = job.NumWorkers();
  o.chunk_bytes = job.wire.chunk_bytes;
  o.staleness_bound = job.training.staleness_bound;
  o.total_clocks = job.ClocksPerWorker();
  o.membership = job.membership;
  if (job.membership.elastic) {
    // A worker's clocks are the units it computed, from the clock it joined at.
    o.total_units = job.TotalUnits();
    o.total_clocks = o.total_units;
    o.units_ahead = job.membership.units_ahead;
    for (int i = 0; i < job.NumWorkers(); ++i) o.late_workers.push_back(!job.IsInitialWorker(i));
  }
  o.max_message_bytes = job.wire.max_message_bytes;
  for (int i = 0; i < o.num_servers; ++i) o.server_regions.push_back(job.RegionOfServer(i).name);
  for (int i = 0; i < o.num_workers; ++i) o.worker_regions.push_back(job.RegionOfWorker(i).name);
  o.num_regions = static_cast<int>(job.regions.size());
  for (const RegionSpec& r : job.regions) o.aggregator_regions.push_back(r.aggregator ? r.name : "");
  o.backups = job.replication.backups;
  o.client_gateway = job.federated.enabled() && job.federated.gateway;
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
    : options_(std::move(options)), clock_(clock), created_(clock->Now()), units_(options_.total_units) {
  servers_.resize(options_.num_servers);
  workers_.resize(options_.num_workers);
  aggregators_.resize(std::max(options_.num_regions, 1));
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
    case wire::AGGREGATOR:
      return id >= 0 && id < static_cast<int>(aggregators_.size()) ? &aggregators_[id] : nullptr;
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
    if (!workers_[i].registered && !Absent(i)) w.push_back(i);
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
  for (int i = 0; i < static_cast<int>(workers_.size()); ++i)
    if (!workers_[i].registered && !Absent(i)) return;
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
  if (const int a = role == wire::WORKER ? AggregatorOf(static_cast<int>(&m - workers_.data())) : -1; a >= 0)
    r.set_aggregator_curve_public_key(aggregators_[a].key);
  return r;
}

StatusOr<wire::RegisterReply> CoordinatorState::Register(wire::Role role, int id, const wire::RegisterRequest& req,
                                                         const std::string& peer_key) {
  // Before anything else, so that a refused registration changes nothing.
  GD_RETURN_IF_ERROR(Admit(role, id, req, peer_key));
  Member* m = Find(role, id);
  if (!m)
    return OutOfRange(std::string(RoleName(role)) + " id " + std::to_string(id) + " is not part of this job (" +
                      std::to_string(options_.num_servers) + " servers, " + std::to_string(options_.num_workers) +
                      " workers)");
  GD_RETURN_IF_ERROR(CheckRejoin(role, id, req, *m));
  if (role == wire::SERVER || role == wire::BACKUP) GD_RETURN_IF_ERROR(TakeEndpoint(role, id, req, m));
  if (role == wire::WORKER) GD_RETURN_IF_ERROR(TakeModel(id, req.model()));
  if (role == wire::WORKER && options_.client_gateway) m->endpoint = req.endpoint();
  Enroll(role, req, peer_key, m);
  MaybeStart();
  return RegisterAnswer(role, id, *m);
}

::geodesic::Status CoordinatorState::CheckRejoin(wire::Role role, int id, const wire::RegisterRequest& req,
                                                 const Member& m) const {
  // A server restarted in place binds the endpoint its predecessor held,
  // which only one process can hold: the old one is gone, whatever its
  // lease says.
  const bool takeover = role == wire::SERVER && !req.endpoint().empty() && req.endpoint() == m.endpoint;
  if (m.live && m.pid != 0 && req.pid() != 0 && m.pid != req.pid() && !takeover)
    return ::geodesic::Status(Code::kAlreadyExists, std::string(RoleName(role)) + " " + std::to_string(id) +
                                                        " is already held by pid " + std::to_string(m.pid));
  // A backup declared dead (or gone) once training started stays out: its
  // primary went on alone and acknowledged updates the backup never saw,
  // so promoting it later would lose them.
  if (role == wire::BACKUP && started_ && !promoted_[id] && m.registered && (m.died || m.left))
    return FailedPrecondition("server " + std::to_string(id) +
                              "'s backup was declared dead and its primary went on alone; a backup does not "
                              "rejoin (restarting a backup is not supported)");
  if (role == wire::BACKUP && promoted_[id] && !m.live)
    return FailedPrecondition("server " + std::to_string(id) +
                              "'s backup was promoted and has died; the shard has no "
                              "replica left (restarting a backup is not supported)");
  return ::geodesic::Status::Ok();
}

::geodesic::Status CoordinatorState::TakeEndpoint(wire::Role role, int id, const wire::RegisterRequest& req,
                                                  Member* m) {
  if (req.endpoint().empty()) return InvalidArgument("server registration without an endpoint");
  if (started_ && m->registered && m->endpoint != req.endpoint())
    return FailedPrecondition(std::string(RoleName(role)) + " " + std::to_string(id) + " moved from " + m->endpoint +
                              " to " + req.endpoint() + "; moving shards is not supported");
  if (role == wire::BACKUP && m->endpoint != req.endpoint()) ++servers_epoch_;
  m->endpoint = req.endpoint();
  return ::geodesic::Status::Ok();
}

::geodesic::Status CoordinatorState::TakeModel(int id, const wire::ModelSignature& sig) {
  if (sig.num_params() == 0) return InvalidArgument("worker registration without a model signature");
  GD_RETURN_IF_ERROR(cluster::CheckLayout(sig.num_params(), cluster::ChunkElemsFor(options_.chunk_bytes))
                         .Annotate("worker " + std::to_string(id) + "'s model (" + sig.name() + ")"));
  GD_RETURN_IF_ERROR(cluster::CheckBlocks({sig.block_starts().begin(), sig.block_starts().end()}, sig.num_params())
                         .Annotate("worker " + std::to_string(id) + "'s model (" + sig.name() + ")"));
  if (!model_) {
    model_ = sig;
    cluster::ChunkLayout layout(sig.num_params(), cluster::ChunkElemsFor(options_.chunk_bytes),
                                {sig.block_starts().begin(), sig.block_starts().end()});
    if (options_.place) {
      shard_map_ = options_.place(layout, &plan_note_, &planned_step_ms_);
      GD_LOG(INFO) << plan_note_;
      if (options_.replan.enabled) planner_.reset();  // Tick makes it for this layout
    } else {
      shard_map_ = cluster::PlaceChunks(layout, options_.num_servers);
    }
  } else if (model_->num_params() != sig.num_params() || model_->layout_digest() != sig.layout_digest() ||
             !std::equal(model_->block_starts().begin(), model_->block_starts().end(), sig.block_starts().begin(),
                         sig.block_starts().end())) {
    return InvalidArgument("worker " + std::to_string(id) + "'s model (" + sig.name() + ", " +
                           std::to_string(sig.num_params()) + " params) differs from the job's (" + model_->name() +
                           ", " + std::to_string(model_->num_params()) + " params)");
  }
  return ::geodesic::Status::Ok();
}

void CoordinatorState::Enroll(wire::Role role, const wire::RegisterRequest& req, const std::string& peer_key,
                              Member* m) {
  bool was_live = m->live;
  const bool rejoin = m->registered;
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
    // A new worker's, evaluator's, aggregator's or (replicated jobs)
    // primary's key goes into the lists the shards, backups and
    // aggregators admit.
    if (role == wire::WORKER || role == wire::EVALUATOR || role == wire::AGGREGATOR ||
        (role == wire::SERVER && replicated()))
      m->key_epoch = ++keys_epoch_;
  }
  if (!req.region().empty()) m->region = req.region();
  if (role == wire::EVALUATOR) evaluator_seen_ = true;
  if (role == wire::WORKER && !was_live) {
    ++epoch_;
    if (started_ && elastic()) NoteMember(static_cast<int>(m - workers_.data()), rejoin ? "rejoined" : "joined");
  }
}

wire::RegisterReply CoordinatorState::RegisterAnswer(wire::Role role, int id, const Member& m) const {
  wire::RegisterReply reply = Assignment(role, m);
  auto not_yet = [&](const std::string& why) {
    wire::RegisterReply r;
    r.set_ready(false);
    r.set_waiting_for(why);
    r.set_heartbeat_ms(reply.heartbeat_ms());
    r.set_lease_ms(reply.lease_ms());
    r.set_membership_epoch(reply.membership_epoch());
    r.set_num_workers(reply.num_workers());
    return r;
  };
  // A (re)joining worker would start with the map that is being replaced:
  // it waits, like a rendezvous, until the new one is published.
  if (migration_ && role == wire::WORKER && reply.ready())
    return not_yet("chunk migration " + std::to_string(migration_->record.id));
  if (std::string wait = KeyWait(role, id, m); !wait.empty()) return not_yet(wait);
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
    if (elastic()) ElasticHeartbeat(id, hb, &r);
    if (hb.done() && !m->done) {
      m->done = true;
      if (elastic()) NoteMember(id, "done");
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
  if (replicated() && (role == wire::WORKER || role == wire::EVALUATOR || role == wire::AGGREGATOR) &&
      hb.servers_epoch() < servers_epoch_) {
    r.set_servers_epoch(servers_epoch_);
    AddServers(r.mutable_servers());
  }
  if ((server || role == wire::AGGREGATOR) && secure()) AddKeys(role, id, hb, m, &r);
  if (role == wire::WORKER && secure() && options_.client_gateway) AddClientKeys(hb, &r);
  r.set_membership_epoch(epoch_);
  for (int i = 0; i < static_cast<int>(aggregators_.size()); ++i)
    if (aggregators_[i].registered && !aggregators_[i].live) r.add_aggregators_down(i);
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
  r.set_training_ended(training_ended());
  return r;
}

void CoordinatorState::Leave(wire::Role role, int id) {
  Member* m = Find(role, id);
  if (!m || !m->registered) return;
  if (m->live && role == wire::WORKER) ++epoch_;
  if (m->live && role == wire::WORKER && elastic()) WorkerGone(id, "left");
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
    if (role == wire::WORKER && elastic()) WorkerGone(id, "died");
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
  for (int i = 0; i < static_cast<int>(aggregators_.size()); ++i) expire(aggregators_[i], wire::AGGREGATOR, i);
  NoteWorkersEnd();
  return deaths;
}

bool CoordinatorState::Absent(int i) const {
  return i < static_cast<int>(options_.late_workers.size()) && options_.late_workers[i] && !workers_[i].registered;
}

void CoordinatorState::NoteWorkersEnd() {
  if (!started_ || last_worker_end_) return;
  // An elastic job with units left waits for a worker to take them.
  if (elastic() && !units_.complete()) return;
  for (int i = 0; i < static_cast<int>(workers_.size()); ++i)
    if (!(workers_[i].done || workers_[i].died || workers_[i].left || Absent(i))) return;
  last_worker_end_ = clock_->Now();
}

bool CoordinatorState::job_finished() const {
  if (!started_) return false;
  if (elastic() && !units_.complete()) return false;
  for (const auto& w : workers_)
    if (!w.done && w.live) return false;
  for (int i = 0; i < static_cast<int>(workers_.size()); ++i)
    if (!workers_[i].done && !workers_[i].died && !workers_[i].left && !Absent(i)) return false;
  if (options_.expect_evaluator && !(evaluator_seen_ && !evaluator_.live)) return false;
  return true;
}

bool CoordinatorState::serving_members_left() const {
  for (const auto* group : {&servers_, &backups_, &aggregators_})
    for (const auto& m : *group)
      if (m.live) return false;
  return true;
}

double CoordinatorState::training_seconds() const {
  if (!started_) return 0;
  TimePoint end = clock_->Now();
  // Training ends when the last worker is done or dead, before evaluation.
  if (last_worker_end_) end = *last_worker_end_;
  return Seconds(end - started_at_);
}

wire::StatusReply CoordinatorState::Status() const {
  wire::StatusReply r;
  r.set_uptime_seconds(Seconds(clock_->Now() - created_));
  r.set_training_started(started_);
  r.set_restored(restored_);
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
    if (options_.client_gateway) s->set_gateway_endpoint(w.endpoint), s->set_gateway_key(w.key);
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
  for (int i = 0; i < static_cast<int>(aggregators_.size()); ++i)
    if (aggregators_[i].registered) describe(r.add_aggregators(), i, aggregators_[i]);
  return r;
}

std::optional<wire::Header> CoordinatorState::Answer(const wire::Header& h, const std::string& peer_key,
                                                     bool* refused) {
  *refused = false;
  wire::Header reply;
  auto refuse = [&](wire::Refusal why, const ::geodesic::Status& s) {
    *refused = true;  // the socket shell logs it (rate-limited) with the peer's name
    reply.mutable_error_reply()->set_code(transport::ToWire(s.code()));
    reply.mutable_error_reply()->set_message(s.message());
    reply.mutable_error_reply()->set_reason(why);
    return reply;
  };
  wire::Refusal why = wire::REFUSAL_UNSPECIFIED;
  if (::geodesic::Status s = CheckMember(h, &why); !s.ok()) return refuse(why, s);
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
                                                   "client", -1, options_.unix_now());
        if (!claims.ok()) return refuse(wire::REFUSAL_UNAUTHORIZED, claims.status());
        if (options_.client_gateway) AdmitClient(peer_key, claims->id);
      }
      *reply.mutable_status_reply() = Status();
      return reply;
    }
    default:
      return refuse(wire::REFUSAL_UNSUPPORTED_TYPE,
                    InvalidArgument("the coordinator does not serve " + transport::BodyName(h)));
  }
}

}  // namespace geodesic::coordinator
