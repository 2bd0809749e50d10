#include "worker/steps/elastic_units.h"

#include <chrono>
#include <thread>

#include "cluster/member_client.h"
#include "common/log.h"
#include "common/wait.h"
#include "worker/model.h"
#include "worker/ps_client.h"
#include "worker/steps/partition_batches.h"

namespace geodesic::worker {

StatusOr<std::shared_ptr<ElasticUnits>> ElasticUnits::Create(StepEnv& env) {
  const JobSpec& job = env.job;
  GD_ASSIGN_OR_RETURN(ImageSet full, LoadDataset(job.data, "train"));
  GD_RETURN_IF_ERROR(CheckTrainingSet(job, full));
  std::shared_ptr<ElasticUnits> u(new ElasticUnits(env, std::move(full)));
  GD_LOG(INFO) << "elastic: data units of " << job.UnitSamples() << " samples from the coordinator ("
               << u->data_.units_per_epoch() << " per epoch, " << job.TotalUnits() << " in the job)";
  return u;
}

ElasticUnits::ElasticUnits(StepEnv& env, ImageSet full)
    : env_(env),
      full_(std::move(full)),
      data_(full_.count, env.job.UnitSamples(), env.job.data.batch_size, env.job.seed),
      queue_(env.job.membership.units_ahead) {}

void ElasticUnits::BeforeJoin(cluster::MemberOptions& mo) {
  mo.on_reply = [this](const wire::HeartbeatReply& r) { queue_.OnReply(r); };
}

int64_t ElasticUnits::TotalSteps(int64_t) const { return env_.clocks * std::max(1, env_.job.training.local_steps); }

StatusOr<bool> ElasticUnits::Admit(int64_t) {
  const JobSpec& job = env_.job;
  WaitReporter report(env_.clock, std::chrono::seconds(job.membership.report_after_s));
  const TimePoint entered = env_.clock->Now();
  int64_t unit = -1;
  for (;;) {
    const UnitQueue::Take t = queue_.Next(&unit);
    if (t == UnitQueue::Take::kUnit) break;
    if (t == UnitQueue::Take::kNoMore) {
      GD_LOG(INFO) << "elastic: no data units left to hand out; finishing";
      return false;
    }
    if (env_.stop->load()) return false;
    if (Status e = env_.member->error(); !e.ok()) return e;
    env_.member->Nudge();
    if (report.Due()) {
      const wire::HeartbeatReply r = queue_.last();
      GD_LOG(INFO) << "waiting " << static_cast<int>(report.ElapsedSeconds()) << " s for data units ("
                   << r.units_unassigned() << " not handed out, " << r.units_finished() << " of " << r.units_total()
                   << " finished)";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  env_.n.comm_s += Seconds(env_.clock->Now() - entered);  // waiting on the coordinator
  // Ask for more before we run dry: a heartbeat now rather than at its time.
  if (queue_.ready() * 2 < job.membership.units_ahead) env_.member->Nudge();
  unit_ = unit;
  batches_ = data_.Batches(unit);
  next_batch_ = 0;
  return true;
}

void ElasticUnits::Acked(int64_t oldest_unacked) {
  for (auto it = unit_of_clock_.begin(); it != unit_of_clock_.end() && it->first < oldest_unacked;
       it = unit_of_clock_.erase(it))
    queue_.Finished(it->second);
}

bool ElasticUnits::Gradient(FlatModel& model, int64_t step, torch::Tensor& grad) {
  // A unit has local_steps batches; a round never asks for more.
  const std::vector<int64_t>& idx = batches_[std::min(next_batch_++, batches_.size() - 1)];
  // Indices into the whole set, converted now.
  return BatchGradient(env_, model, ImageExamples(full_, &idx), step, grad);
}

void ElasticUnits::AddDataStats(stats::WorkerStats* s) const {
  s->set_partition(ToString(env_.job.data.partition));
  s->set_partition_digest("elastic");
  s->set_partition_samples(0);  // no partition of our own
}

void ElasticUnits::WaitUnitsConfirmed() {
  const TimePoint deadline =
      env_.clock->Now() + std::min(Millis(env_.job.membership.lease_ms * 2), Duration(std::chrono::seconds(10)));
  while (!queue_.AllConfirmed() && env_.clock->Now() < deadline) {
    env_.member->Nudge();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!queue_.AllConfirmed())
    GD_LOG(WARNING) << "leaving with finished data units the coordinator has not confirmed; it hands them out "
                       "again and the shards take them once";
}

// Stopped mid-training (SIGTERM: a pod deleted, a scale-down): the pushes
// sent are acknowledged, the coordinator hears which units they finished,
// and we leave; the units we held go to the others.
Status ElasticUnits::Depart(int64_t clock, const std::function<void()>& final_stats) {
  GD_LOG(INFO) << "elastic: stopped at clock " << clock << "; leaving the job";
  // Within a pod's grace period (Kubernetes' default: 30 s), whatever the
  // network does: a worker cut off at its stop leaves what it cannot say.
  const std::atomic<bool> keep_going{false};
  Status acked = env_.ps->WaitAcks(0, &keep_going, std::chrono::seconds(10)).status();
  if (!acked.ok()) GD_LOG(WARNING) << "leaving with pushes unacknowledged: " << acked;
  Acked(env_.ps->OldestUnackedClock());
  WaitUnitsConfirmed();
  final_stats();
  env_.member->Stop(/*leave=*/true);
  GD_LOG(INFO) << "left the job after " << queue_.finished() << " data units";
  return Status::Ok();
}

}  // namespace geodesic::worker
