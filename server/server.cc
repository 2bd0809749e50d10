#include "server/server.h"

#include <utility>

#include "common/files.h"
#include "common/log.h"
#include "proto/stats.pb.h"
#include "proto/stats_json.h"
#include "server/role_metrics.h"

namespace geodesic::server {

namespace {

// Links to other shards (the backup, migration destinations): DEALERs with
// this shard's identity and `keys` (none: plaintext), never blocking.
transport::PeerConnector ShardPeers(zmq::context_t& ctx, const ServerProcessOptions& o,
                                    transport::TrafficCounters* counters, transport::CurveKeyPair keys) {
  return transport::DealerConnector(ctx,
                                    transport::SocketOptions{.job = o.job.name,
                                                             .role = wire::SERVER,
                                                             .id = o.id,
                                                             .max_message_bytes = o.job.wire.max_message_bytes,
                                                             .send_timeout_ms = transport::kNeverBlock,
                                                             .curve = transport::CurveSocket{.keys = std::move(keys)}},
                                    counters);
}

}  // namespace

Server::Server(ServerProcessOptions options, zmq::context_t& ctx, const Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      ctx_(ctx),
      guard_(ctx),
      socket_(ctx, zmq::socket_type::router,
              transport::SocketOptions{
                  .job = options_.job.name,
                  .role = wire::SERVER,
                  .id = options_.id,
                  .max_message_bytes = options_.job.wire.max_message_bytes,
                  .send_timeout_ms = transport::kNeverBlock,
                  .curve = transport::CurveSocket{.keys = options_.credentials.keys, .server_key = {}}},
              &counters_),
      refusals_(clock),
      clocks_(options_.job.training.staleness_bound),
      num_workers_(options_.job.NumWorkers()),
      pulls_(options_.job, options_.id, clock, &replies_),
      replicator_(options_.job, clock, ShardPeers(ctx, options_, &counters_, options_.credentials.keys), &replies_),
      backup_(options_.backup, options_.id, clock),
      // Chunk transfers go in plaintext (their DEALERs carry no CURVE keys).
      migration_(options_.job, options_.id, clock, ShardPeers(ctx, options_, &counters_, {})),
      checkpoints_(options_.job, options_.id, options_.checkpoint_dir, options_.checkpoint_requests, clock) {}

void Server::Refuse(const transport::Message& m, wire::Refusal reason, const Status& status) {
  counters_.messages_refused++;
  const transport::RefusalLimiter::Verdict v = refusals_.Note(m.peer, reason);
  if (v.log)
    GD_LOG(WARNING) << "refused " << transport::BodyName(m.header) << " from " << transport::PeerName(m) << " ("
                    << transport::RefusalName(reason) << "): " << status.message()
                    << transport::UnloggedNote(v.unlogged, reason);
  if (v.muted) GD_LOG(WARNING) << transport::MutedNote(transport::PeerName(m), refusals_.limits());
  if (m.peer.empty() || !v.answer) return;
  wire::Header reply;
  reply.set_request_id(m.header.request_id());
  reply.mutable_error_reply()->set_code(transport::ToWire(status.code()));
  reply.mutable_error_reply()->set_message(status.message());
  reply.mutable_error_reply()->set_reason(reason);
  (void)socket_.Send(std::move(reply), {}, m.peer);
}

ShardContext Server::Context() {
  return ShardContext{.shard = shard_.get(),
                      .clocks = &clocks_,
                      .server_id = options_.id,
                      .num_workers = num_workers_,
                      .decoder = &decoder_,
                      .total_clocks = options_.job.ClockLimit(),
                      .total_units = options_.job.membership.elastic ? options_.job.TotalUnits() : 0,
                      .num_regions = static_cast<int>(options_.job.regions.size())};
}

void Server::Authorize(const wire::HeartbeatReply& r) {
  transport::KeyOwners owners(r);
  std::vector<std::string> allowed = owners.keys();
  if (!r.primary_key().empty()) allowed.push_back(r.primary_key());  // a backup: its primary replicates to it
  zap_->SetAllowed(allowed);
  MutexLock lock(keys_mu_);
  key_owner_ = std::move(owners);
  if (!r.primary_key().empty()) primary_key_ = r.primary_key();
}

Status Server::CheckSender(const transport::Message& m) const {
  if (!options_.credentials.enabled()) return Status::Ok();
  // The ZAP handler admitted the connection; here the key must also be the
  // sender's own, so that one worker cannot push or pull as another.
  MutexLock lock(keys_mu_);
  if (m.header.has_replicate_request()) {
    if (primary_key_.empty() || m.peer_key != primary_key_)
      return PermissionDenied("replication ops are taken from this shard's primary's CURVE key only");
    return Status::Ok();
  }
  return key_owner_.Check(m, {wire::WORKER, wire::EVALUATOR, wire::AGGREGATOR});
}

void Server::Handle(transport::Message& m) {
  if (Status s = CheckSender(m); !s.ok()) return Refuse(m, wire::REFUSAL_UNAUTHORIZED, s);
  if (m.header.has_replicate_request()) return HandleReplicate(m);
  if (m.header.has_chunk_transfer()) return HandleTransfer(m);
  // Never applied to a copy that is no longer the chunk's: the sender
  // keeps the request and sends it to the new owner (worker/ps_client.h).
  if (auto moved = migration_.Moved(m.header)) return Refuse(m, wire::REFUSAL_MOVED, *moved);
  if (recovering_.seed_clocks && (m.header.has_push_request() || m.header.has_pull_request())) {
    // Restarted from a checkpoint, before the coordinator said where the
    // workers are: a push now would be judged against clocks of 0 and
    // refused as beyond the live window (which fails its worker for good).
    if (recovering_.early.size() >= 10000)
      return Refuse(m, wire::REFUSAL_NOT_PRIMARY, Unavailable("this shard is recovering; ask again"));
    recovering_.early.push_back(std::move(m));
    return;
  }
  if (!serving()) {
    // A worker redirected before this backup saw its own promotion: keep the
    // request for then (the worker would otherwise wait its retry interval).
    if (!backup_.Park(m)) Refuse(m, wire::REFUSAL_NOT_PRIMARY, Unavailable("this backup is not serving yet"));
    return;
  }
  switch (m.header.body_case()) {
    case wire::Header::kPullRequest:
      return HandlePull(m);
    case wire::Header::kPushRequest:
      return HandlePush(m);
    case wire::Header::kInitRequest:
      return HandleInit(m);
    default:
      Refuse(m, wire::REFUSAL_UNSUPPORTED_TYPE,
             InvalidArgument("a server does not serve " + transport::BodyName(m.header) + " messages"));
  }
}

void Server::HandleTransfer(transport::Message& m) {
  Handled h = migration_.Adopt(m);
  if (!h.status.ok()) return Refuse(m, h.reason, h.status);
  (void)socket_.Send(std::move(h.reply), {}, m.peer);
}

void Server::HandleInit(transport::Message& m) {
  Handled h = m.header.init_request().offer() ? ApplyInitOffer(Context(), init_offers_, m, clock_->Now())
                                              : ApplyInit(Context(), m);
  if (!h.status.ok()) return Refuse(m, h.reason, h.status);
  // The worker holds these as we do: our pulls to it start from them.
  for (uint32_t c : h.reply.init_ack().held_chunks()) pulls_.AssumeHeld(m.header.sender_id(), c);
  if (h.reply.init_ack().accepted_chunks() && shard_->AllInitialized())
    GD_LOG(INFO) << "all " << shard_->owned().size() << " chunks initialized (by worker " << m.header.sender_id()
                 << ")";
  Acknowledge(m, std::move(h.reply));
  pulls_.ServeHeld();
}

void Server::Acknowledge(transport::Message& m, wire::Header reply) {
  if (replicator_.active()) return replicator_.Replicate(m, std::move(reply));
  (void)replies_.Send(std::move(reply), {}, m.peer);
}

void Server::HandlePush(transport::Message& m) {
  Handled h = ApplyPush(Context(), m);
  if (!h.status.ok()) return Refuse(m, h.reason, h.status);
  const auto& req = m.header.push_request();
  if (req.skipped() && req.chunks_size() == 0 && h.completed)
    GD_LOG(WARNING) << "worker " << m.header.sender_id() << " skipped clock " << req.clock() << " (no usable gradient)";
  for (int w : PushedBy(m.header)) taken_by_worker_[w] += h.reply.push_ack().applied_chunks();
  // Acknowledge after the update took effect (applied, or held in its
  // round) here and, in a replicated job, on the backup.
  Acknowledge(m, std::move(h.reply));
  if (!req.skipped() || h.completed || req.chunks_size() > 0) pulls_.ServeHeld();
}

void Server::HandlePull(transport::Message& m) {
  wire::Refusal reason = wire::REFUSAL_UNSPECIFIED;
  std::vector<uint32_t> chunks;
  Status s = ValidatePull(Context(), m, &reason, &chunks);
  if (!s.ok()) return Refuse(m, reason, s);
  pulls_.Take(m, std::move(chunks));
}

void Server::HandleReplicate(transport::Message& m) {
  Handled h = backup_.Apply(Context(), m);
  if (!h.status.ok()) return Refuse(m, h.reason, h.status);
  if (const auto& r = m.header.replicate_request(); r.has_push()) {
    if (r.push().covers().empty()) taken_by_worker_[r.worker()] += h.taken;
    for (int w : r.push().covers()) taken_by_worker_[w] += h.taken;
  }
  (void)socket_.Send(std::move(h.reply), {}, m.peer);
}

void Server::Promote() {
  std::vector<transport::Message> parked = backup_.Promote(*shard_, clocks_);
  pub_updates_at_promotion_ = backup_.updates_at_promotion();
  pub_promoted_ = true;
  for (auto& m : parked) Handle(m);
}

void Server::SeedClocks(const cluster::MembershipView& v) {
  // Recovering: every worker is where the coordinator last saw it, or
  // further if this shard's checkpoint says so.
  recovering_.seed_clocks = false;
  clocks_ = ClockTable(options_.job.training.staleness_bound);
  // A worker's clock at the coordinator is the step it pulled; it may
  // already have pushed that step to our predecessor and been answered,
  // and it will not send it again. Count that step as finished here, or a
  // BSP shard would wait forever for it. (A push of it still on its way
  // is then a late one: dropped under BSP, applied when asynchronous.)
  std::vector<int64_t> seeds = v.clocks;
  for (auto& c : seeds) ++c;
  clocks_.SetLive(v.live, seeds);
  for (int w = 0; w < num_workers_; ++w)
    if (shard_->CompletedClock(w) >= 0) clocks_.Finished(w, shard_->CompletedClock(w));
  GD_LOG(INFO) << "clocks from the coordinator: slowest live worker at " << clocks_.MinClock();
}

void Server::FollowServers(const cluster::MembershipView& v) {
  for (const auto& si : v.servers) {
    if (si.id() != options_.id) continue;
    if (!si.endpoint().empty() && si.endpoint() != Advertised())
      replicator_.Fence("the coordinator says shard " + std::to_string(options_.id) + " is served at " + si.endpoint());
    // The coordinator declared our backup dead (it never promotes it
    // after that): from now on we acknowledge alone. Once the job has
    // finished a backup leaves on its own, which is no failure.
    else if (si.backup_endpoint().empty() && !v.job_finished)
      replicator_.Degrade("the coordinator declared the backup dead");
  }
}

void Server::SyncMembership() {
  uint64_t r = member_->replies();
  if (r == seen_replies_) return;
  seen_replies_ = r;
  cluster::MembershipView v = member_->view();
  if (!v.valid) return;
  if (options_.job.wan.replan) migration_.Follow(v);
  if (!serving()) {
    // A backup's live set comes from its primary's ops, in their order.
    if (!v.promoted) return;
    Promote();
  }
  const bool seeded = recovering_.seed_clocks;
  if (recovering_.seed_clocks) SeedClocks(v);
  if (replicator_.connected()) FollowServers(v);
  clocks_.SetLive(v.live, v.clocks);
  replicator_.ReplicateLive(v.live, v.clocks);
  pulls_.ForgetDeparted(v.live);
  if (shard_->CloseRounds(clocks_) > 0 || pulls_.held() > 0) pulls_.ServeHeld();
  if (seeded && !recovering_.early.empty()) {
    GD_LOG(INFO) << "answering " << recovering_.early.size() << " request(s) that came before the coordinator's view";
    for (auto& early : std::exchange(recovering_.early, {})) Handle(early);
  }
}

void Server::PublishProgress() {
  pub_updates_ = shard_->updates_applied();
  pub_dropped_ = shard_->dropped();
  pub_refused_ = counters_.messages_refused.load();
  pub_held_ = pulls_.held();
  pub_stale_mean_ = shard_->staleness().Mean();
  pub_stale_max_ = shard_->staleness().max();
}

stats::ShardStats Server::Stats() const {
  stats::ShardStats j;
  j.set_role("server");
  j.set_id(options_.id);
  j.set_backup(options_.backup);
  j.set_promoted(backup_.promoted());
  j.set_serving(serving());
  uint64_t taken = 0;
  for (const auto& [w, n] : taken_by_worker_) {
    taken += n;
    if (n) (*j.mutable_taken_by_worker())[w] = n;
  }
  j.set_updates_taken(taken);
  backup_.AddStats(&j);
  replicator_.AddStats(&j);
  j.set_bytes_sent(counters_.bytes_sent.load());
  j.set_bytes_received(counters_.bytes_received.load());
  j.set_messages_sent(counters_.messages_sent.load());
  j.set_messages_received(counters_.messages_received.load());
  j.set_messages_refused(counters_.messages_refused.load());
  for (const auto& [reason, n] : refusals_.by_reason())
    (*j.mutable_refused_by_reason())[transport::RefusalName(reason)] = n;
  j.set_refusals_unanswered(refusals_.unanswered());
  j.set_sends_dropped(counters_.sends_dropped.load());
  if (zap_) j.set_connections_refused(zap_->refused() + guard_.handshake_failures());
  j.set_connections_limited(guard_.refused());
  if (options_.job.wan.replan) migration_.AddStats(&j);
  if (shard_) {
    j.set_chunks(shard_->owned().size());
    j.set_updates_applied(shard_->updates_applied());
    j.set_duplicates(shard_->duplicates());
    j.set_stale_dropped(shard_->dropped());
    if (options_.job.membership.elastic) {
      j.set_units_complete(shard_->UnitsComplete());
      j.set_unit_duplicates(shard_->unit_duplicates());
    }
    for (const auto& [k, v] : shard_->staleness().NonZero()) (*j.mutable_staleness_histogram())[k] = v;
  }
  checkpoints_.AddStats(&j);
  return j;
}

void Server::WriteStats() const {
  const stats::ShardStats j = Stats();
  const JobSpec& job = options_.job;
  const std::string region =
      options_.backup ? job.RegionOfBackup(options_.id).name : job.RegionOfServer(options_.id).name;
  if (metrics_.serving())
    metrics_.Publish(
        ShardMetrics(j, {.job = job.name, .region = region, .role = "server", .id = std::to_string(options_.id)}));
  if (options_.stats_file.empty()) return;
  Status s = WriteFileAtomic(options_.stats_file, StatsToJson(j), /*durable=*/false);
  if (!s.ok()) GD_LOG(WARNING) << s;
}

Status Server::Listen() {
  GD_RETURN_IF_ERROR(pulls_.LoadCodecs());
  if (options_.credentials.enabled()) {
    zap_ = std::make_unique<transport::ZapHandler>(ctx_, /*admit_any=*/false);
    GD_RETURN_IF_ERROR(zap_->Start());
  }
  GD_RETURN_IF_ERROR(guard_.Watch(socket_.raw()));
  GD_RETURN_IF_ERROR(socket_.Bind(options_.bind));
  GD_LOG(INFO) << "listening on " << socket_.endpoint() << (zap_ ? " (CurveZMQ)" : "")
               << (options_.advertise.empty() ? "" : ", advertised as " + options_.advertise);
  return Status::Ok();
}

StatusOr<wire::RegisterReply> Server::Join(const std::atomic<bool>* stop) {
  cluster::MemberOptions mo;
  mo.job = options_.job.name;
  mo.role = options_.backup ? wire::BACKUP : wire::SERVER;
  mo.id = options_.id;
  mo.coordinator = options_.coordinator;
  mo.endpoint = Advertised();
  mo.region = options_.job.RegionOfServer(options_.id).name;
  mo.timing = options_.job.membership;
  mo.max_message_bytes = options_.job.wire.max_message_bytes;
  if (options_.credentials.enabled()) {
    mo.curve =
        transport::CurveSocket{.keys = options_.credentials.keys, .server_key = options_.credentials.coordinator_key};
    mo.token = options_.credentials.token;
    mo.authorize = [this](const wire::HeartbeatReply& r) { Authorize(r); };
  }
  member_ = std::make_unique<cluster::MemberClient>(ctx_, mo, &counters_, clock_);
  return member_->Join(stop);
}

Status Server::TakeShard(const wire::RegisterReply& assignment) {
  GD_ASSIGN_OR_RETURN(cluster::ShardMap map,
                      cluster::ShardMap::FromWire(assignment.shard_map(), options_.job.NumServers()));
  ShardOptions so;
  so.shard_id = options_.id;
  so.staleness_bound = options_.job.training.staleness_bound;
  so.staleness_scaling = options_.job.training.staleness_scaling;
  // With momentum correction the workers apply the momentum (pushes are
  // velocities); with local steps they run the optimizer and pushes are
  // model deltas, averaged by an outer step.
  so.optimizer = options_.job.ShardOptimizer();
  so.strategy = FederatedStrategyOf(options_.job);
  so.total_clocks = options_.job.ClocksPerWorker();
  so.total_units = options_.job.membership.elastic ? options_.job.TotalUnits() : 0;
  so.threads = options_.job.training.shard_threads;
  so.worker_regions = options_.job.WorkerRegions();
  shard_ = std::make_unique<ShardState>(so, map.layout, map.ChunksOf(options_.id));
  pulls_.Start(shard_.get(), &clocks_, options_.job.seed * 7919 + static_cast<uint64_t>(options_.id));
  migration_.Start(shard_.get(), &pulls_, map.version);
  GD_LOG(INFO) << "owns " << shard_->owned().size() << " of " << map.layout.num_chunks() << " chunks ("
               << map.BytesPerServer(options_.job.NumServers())[options_.id] / 1024 << " KiB); optimizer "
               << so.optimizer.name << ", staleness bound " << options_.job.training.staleness_bound
               << (shard_->pool() ? ", updates split over " + std::to_string(shard_->pool()->threads()) + " threads"
                                  : std::string());
  // Every worker starts at the clock the coordinator gave it (0 at job start).
  std::vector<int> all;
  for (int w = 0; w < num_workers_; ++w) all.push_back(w);
  clocks_.SetLive(all, std::vector<int64_t>(all.size(), assignment.start_clock()));
  checkpoints_.Start();
  if (!options_.resume_file.empty())
    GD_RETURN_IF_ERROR(checkpoints_.Resume(options_.resume_file, shard_.get(), &clocks_));
  if (options_.recover) {
    GD_RETURN_IF_ERROR(checkpoints_.Recover(shard_.get()));
    // The workers went on without us: their clocks come from the
    // coordinator (the first membership view), not from the checkpoint.
    recovering_.seed_clocks = true;
  }
  return Status::Ok();
}

Status Server::ConnectBackup(const wire::RegisterReply& assignment) {
  if (options_.backup) GD_LOG(INFO) << "backup of shard " << options_.id << ": applying the primary's ops";
  if (options_.job.replication.backups == 0 || options_.backup) return Status::Ok();
  std::string endpoint, key;
  for (const auto& si : assignment.servers())
    if (si.id() == options_.id) endpoint = si.backup_endpoint(), key = si.backup_curve_public_key();
  if (endpoint.empty()) return FailedPrecondition("replicated job, but the coordinator names no backup");
  if (options_.credentials.enabled() && key.empty())
    return FailedPrecondition("secured replicated job, but the coordinator names no key for the backup");
  return replicator_.Connect(endpoint, key);
}

void Server::StartHeartbeat() {
  PublishProgress();
  member_->Start([this](wire::Heartbeat* hb) {
    auto* p = hb->mutable_server();
    p->set_updates_applied(pub_updates_.load());
    p->set_pushes_dropped(pub_dropped_.load());
    p->set_messages_refused(pub_refused_.load());
    p->set_held_pulls(pub_held_.load());
    p->set_staleness_mean(pub_stale_mean_.load());
    p->set_staleness_max(pub_stale_max_.load());
    p->set_promoted(pub_promoted_.load());
    p->set_updates_at_promotion(pub_updates_at_promotion_.load());
    hb->set_migration_done(migration_.done_for_heartbeat());
  });
}

void Server::ReceiveAll(int wait_ms) {
  bool readable = false;
  zmq::socket_t* backup = replicator_.active() ? replicator_.pollable() : nullptr;
  if (backup) {
    // Wait on both: the backup's acks release the workers' acks.
    zmq::pollitem_t items[] = {{socket_.raw().handle(), 0, ZMQ_POLLIN, 0}, {backup->handle(), 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(wait_ms));
    } catch (const zmq::error_t&) {
    }
    readable = items[0].revents & ZMQ_POLLIN;
  } else {
    readable = socket_.WaitReadable(wait_ms);
  }
  // Whether or not its link has a socket to wait on, an active backup's
  // answers are taken every turn.
  if (replicator_.active()) replicator_.Drain();
  for (int i = 0; readable && i < 64; ++i) {
    auto in = socket_.Receive();
    if (!in) break;
    if (!in->status.ok()) {
      Refuse(in->message, in->refusal, in->status);
      counters_.messages_refused--;  // the socket already counted it
      continue;
    }
    try {
      Handle(in->message);
    } catch (const std::exception& e) {
      Refuse(in->message, wire::REFUSAL_INTERNAL, Internal(e.what()));
    }
  }
}

std::optional<Status> Server::AfterReceive() {
  Status err = member_->error();
  if (!err.ok() && err.message() != reported_error_) {
    reported_error_ = err.message();
    GD_LOG(ERROR) << err;
  }
  if (options_.backup && !backup_.promoted() && err.code() == Code::kFailedPrecondition) {
    // Declared dead while cut off: the primary went on alone, and this
    // backup will never serve. Nothing to keep.
    GD_LOG(ERROR) << "stopping: the coordinator retired this backup";
    return err;
  }
  if (!replicator_.fenced().empty()) {
    // Fenced: exit without answering anything more (an error exit, so the
    // launcher counts a failover).
    GD_LOG(ERROR) << "stopping: " << replicator_.fenced();
    return FailedPrecondition("server " + std::to_string(options_.id) + " fenced: " + replicator_.fenced());
  }
  if (member_->view().job_finished) {
    GD_LOG(INFO) << "job finished; " << shard_->updates_applied() << " updates applied, staleness mean "
                 << shard_->staleness().Mean() << " max " << shard_->staleness().max();
    if (serving()) checkpoints_.Maybe(*shard_, clocks_, "final");
    return Status::Ok();
  }
  return std::nullopt;
}

Status Server::Run(const std::atomic<bool>* stop) {
  GD_RETURN_IF_ERROR(Listen());
  GD_RETURN_IF_ERROR(metrics_.Start(options_.http, [this] { return pub_ready_.load(); }));
  GD_ASSIGN_OR_RETURN(wire::RegisterReply assignment, Join(stop));
  GD_RETURN_IF_ERROR(TakeShard(assignment));
  GD_RETURN_IF_ERROR(ConnectBackup(assignment));
  WriteStats();
  pub_ready_ = true;
  StartHeartbeat();
  TimePoint last_stats = clock_->Now();
  while (!stop->load()) {
    // Wake in time for the earliest own-push hold to expire.
    ReceiveAll(pulls_.WaitMs(20));
    SyncMembership();
    if (options_.job.wan.replan) {
      migration_.Drain();
      if (migration_.Sync()) member_->Nudge();
    }
    backup_.NoteUpdates(shard_->updates_applied());
    pulls_.ServeHeld();
    pulls_.ReportHeld();
    PublishProgress();
    if (serving()) checkpoints_.Maybe(*shard_, clocks_);
    if (clock_->Now() - last_stats > std::chrono::seconds(2)) {
      WriteStats();
      last_stats = clock_->Now();
    }
    if (std::optional<Status> end = AfterReceive()) {
      if (end->ok()) break;  // the job finished
      member_->Stop(false);
      WriteStats();
      return *end;
    }
  }
  if (stop->load() && serving()) checkpoints_.Maybe(*shard_, clocks_, "stop");
  member_->Stop(true);
  WriteStats();
  return Status::Ok();
}

}  // namespace geodesic::server
