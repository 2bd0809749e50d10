// Worker's part for elastic jobs (membership.elastic; docs/deploy.md
// "Elastic workers"): data units from the coordinator instead of a
// partition of our own, and leaving the job when stopped.
#include <chrono>
#include <thread>

#include "cluster/member_client.h"
#include "common/log.h"
#include "common/wait.h"
#include "worker/ps_client.h"
#include "worker/worker_data.h"

namespace geodesic::worker {

Status Worker::LoadElasticData() {
  GD_ASSIGN_OR_RETURN(data_->full, LoadDataset(job_.data, "train"));
  GD_RETURN_IF_ERROR(CheckTrainingSet(job_, data_->full));
  data_->units = std::make_unique<UnitData>(data_->full.count, job_.UnitSamples(), job_.data.batch_size, job_.seed);
  units_ = std::make_unique<UnitQueue>(job_.membership.units_ahead);
  data_->partition_digest = "elastic";
  GD_LOG(INFO) << "elastic: data units of " << job_.UnitSamples() << " samples from the coordinator ("
               << data_->units->units_per_epoch() << " per epoch, " << job_.TotalUnits() << " in the job)";
  return Status::Ok();
}

StatusOr<bool> Worker::TakeUnit() {
  WaitReporter report(clock_, std::chrono::seconds(job_.membership.report_after_s));
  const TimePoint entered = clock_->Now();
  int64_t unit = -1;
  for (;;) {
    const UnitQueue::Take t = units_->Next(&unit);
    if (t == UnitQueue::Take::kUnit) break;
    if (t == UnitQueue::Take::kNoMore) {
      GD_LOG(INFO) << "elastic: no data units left to hand out; finishing";
      return false;
    }
    if (stop_->load()) return false;
    if (Status e = member_->error(); !e.ok()) return e;
    member_->Nudge();
    if (report.Due()) {
      const wire::HeartbeatReply r = units_->last();
      GD_LOG(INFO) << "waiting " << static_cast<int>(report.ElapsedSeconds()) << " s for data units ("
                   << r.units_unassigned() << " not handed out, " << r.units_finished() << " of " << r.units_total()
                   << " finished)";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  comm_s_ += Seconds(clock_->Now() - entered);  // waiting on the coordinator
  // Ask for more before we run dry: a heartbeat now rather than at its time.
  if (units_->ready() * 2 < job_.membership.units_ahead) member_->Nudge();
  unit_ = unit;
  unit_batches_ = data_->units->Batches(unit);
  unit_batch_ = 0;
  return true;
}

const std::vector<int64_t>& Worker::NextBatch() {
  if (!units_) return data_->sampler->Next();
  // A unit has local_steps batches; a round never asks for more.
  const size_t at = std::min(unit_batch_++, unit_batches_.size() - 1);
  return unit_batches_[at];
}

void Worker::NoteAcked() {
  if (!units_) return;
  const int64_t oldest = ps_->OldestUnackedClock();
  for (auto it = unit_of_clock_.begin(); it != unit_of_clock_.end() && it->first < oldest;
       it = unit_of_clock_.erase(it))
    units_->Finished(it->second);
}

Status Worker::WaitUnitsConfirmed() {
  const TimePoint deadline =
      clock_->Now() + std::min(Millis(job_.membership.lease_ms * 2), Duration(std::chrono::seconds(10)));
  while (!units_->AllConfirmed() && clock_->Now() < deadline) {
    member_->Nudge();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!units_->AllConfirmed())
    GD_LOG(WARNING) << "leaving with finished data units the coordinator has not confirmed; it hands them out "
                       "again and the shards take them once";
  return Status::Ok();
}

// Stopped mid-training (SIGTERM: a pod deleted, a scale-down): the pushes
// sent are acknowledged, the coordinator hears which units they finished,
// and we leave; the units we held go to the others.
Status Worker::Depart() {
  GD_LOG(INFO) << "elastic: stopped at clock " << c_ << "; leaving the job";
  // Within a pod's grace period (Kubernetes' default: 30 s), whatever the
  // network does: a worker cut off at its stop leaves what it cannot say.
  const std::atomic<bool> keep_going{false};
  Status acked = ps_->WaitAcks(0, &keep_going, std::chrono::seconds(10)).status();
  if (!acked.ok()) GD_LOG(WARNING) << "leaving with pushes unacknowledged: " << acked;
  NoteAcked();
  GD_RETURN_IF_ERROR(WaitUnitsConfirmed());
  WriteStats(true);
  member_->Stop(/*leave=*/true);
  GD_LOG(INFO) << "left the job after " << units_->finished() << " data units";
  return Status::Ok();
}

}  // namespace geodesic::worker
