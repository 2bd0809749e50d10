// CoordinatorState's part for elastic jobs (membership.elastic): the data
// units of each worker's heartbeat, the units of a worker that goes, and the
// membership timeline (docs/deploy.md "Elastic workers").
#include "common/log.h"
#include "coordinator/state.h"

namespace geodesic::coordinator {

void CoordinatorState::ElasticHeartbeat(int id, const wire::Heartbeat& hb, wire::HeartbeatReply* r) {
  std::vector<int64_t> finished(hb.units_finished().begin(), hb.units_finished().end());
  // A worker that reports done wants nothing more.
  const int wanted = hb.done() ? 0 : std::clamp(hb.units_wanted(), 0, 1024);
  for (int64_t u : units_.Report(id, finished, started_ ? wanted : 0)) r->add_units(u);
  r->set_units_unassigned(units_.unassigned());
  r->set_units_finished(units_.finished());
  r->set_units_total(units_.total());
  NoteWorkersEnd();  // the last unit may have finished now
}

void CoordinatorState::WorkerGone(int id, const char* what) {
  const size_t back = units_.held(id).size();
  units_.Release(id);
  if (back > 0)
    GD_LOG(INFO) << "worker " << id << " " << what << " holding " << back
                 << " data unit(s); they are handed out again first";
  NoteMember(id, what);
}

int CoordinatorState::LiveWorkers() const {
  int live = 0;
  for (const auto& w : workers_) live += w.live && !w.done;
  return live;
}

void CoordinatorState::NoteMember(int id, const char* what) {
  stats::MembershipEvent e;
  e.set_at_s(started_ ? Seconds(clock_->Now() - started_at_) : 0);
  e.set_worker(id);
  e.set_what(what);
  e.set_clock(static_cast<int32_t>(workers_[id].clock));
  e.set_live(LiveWorkers());
  // Bounded: a worker flapping forever must not grow the state file forever.
  if (events_.size() < 10000) events_.push_back(e);
}

}  // namespace geodesic::coordinator
