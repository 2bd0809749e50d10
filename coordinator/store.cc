#include "coordinator/store.h"

#include <filesystem>

#include "common/files.h"
#include "common/log.h"

namespace geodesic::coordinator {
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
  for (const Member& m : aggregators_) *s.add_aggregators() = SaveMember(m);
  for (bool p : promoted_) s.add_promoted(p);
  s.set_servers_epoch(servers_epoch_);
  s.set_promotions(promotions_);
  s.set_keys_epoch(keys_epoch_);
  if (elastic()) *s.mutable_units() = units_.Save();
  for (const auto& e : events_) *s.add_membership_events() = e;
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
  UnitLedger units(options_.total_units);
  if (elastic()) GD_RETURN_IF_ERROR(units.Restore(s.units()).Annotate("coordinator state"));
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
  // An aggregator keeps its lease and key, so that the shards go on taking
  // its pushes; from an older state, it registers again.
  if (static_cast<size_t>(s.aggregators_size()) == aggregators_.size())
    for (int i = 0; i < s.aggregators_size(); ++i) RestoreMember(s.aggregators(i), now, &aggregators_[i]);
  units_ = std::move(units);
  events_.assign(s.membership_events().begin(), s.membership_events().end());
  restored_ = true;
  return ::geodesic::Status::Ok();
}

Status CoordinatorStore::Load(CoordinatorState* state, int64_t lease_ms) {
  if (path_.empty() || !std::filesystem::exists(path_)) return Status::Ok();
  // A few KB per member; a FIFO or a device in its place is refused, not read.
  GD_ASSIGN_OR_RETURN(std::string bytes, ReadRegularFile(path_, uint64_t{256} << 20));
  wire::CoordinatorSnapshot snap;
  if (!snap.ParseFromString(bytes)) return DataLoss(path_ + ": the coordinator's saved state does not parse");
  GD_RETURN_IF_ERROR(state->Restore(snap).Annotate(path_));
  int live = 0;
  for (const auto& w : snap.workers()) live += w.registered() && !w.done() && !w.died() && !w.left();
  GD_LOG(WARNING) << "restarted: continuing the job from " << path_ << " ("
                  << (snap.started() ? "training for " + std::to_string(snap.training_seconds()) + " s, "
                                     : std::string("in the rendezvous, "))
                  << live << " workers live); members have " << lease_ms << " ms to heartbeat again";
  return Status::Ok();
}

void CoordinatorStore::Save(const CoordinatorState& state, bool now) {
  if (path_.empty()) return;
  TimePoint t = clock_->Now();
  if (!now && t - saved_at_ < std::chrono::milliseconds(200)) return;
  wire::CoordinatorSnapshot snap = state.Save();
  snap.clear_training_seconds();  // changes all the time; not worth a write by itself
  std::string bytes = snap.SerializeAsString();
  if (bytes == saved_) return;
  snap.set_training_seconds(state.training_seconds());
  const std::string text = snap.SerializeAsString();
  auto write = [&] { return WriteFileAtomic(path_, text, /*durable=*/false); };
  Status s = reserve_ ? reserve_->Spend(write) : write();
  if (!s.ok()) {
    GD_LOG(WARNING) << "saving the coordinator's state: " << s;
    return;
  }
  saved_ = std::move(bytes);
  saved_at_ = t;
}

}  // namespace geodesic::coordinator
