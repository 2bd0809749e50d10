#include "server/checkpointer.h"

#include <cstring>

#include "common/files.h"
#include "common/log.h"
#include "server/checkpoint.h"

namespace geodesic::server {
namespace {

// The first checkpoint clock after `at`.
int64_t NextAfter(int64_t at, int64_t every) { return every > 0 ? (at / every + 1) * every : 0; }

}  // namespace

Checkpointer::Checkpointer(const JobSpec& job, int server_id, std::string dir, const std::atomic<uint64_t>* requests,
                           const Clock* clock)
    : job_(job), server_id_(server_id), dir_(std::move(dir)), requests_(requests), clock_(clock) {}

void Checkpointer::Start() {
  next_clock_ = job_.checkpoint.every_clocks;
  if (requests_) seen_requests_ = requests_->load();
}

Status Checkpointer::Resume(const std::string& plan_file, ShardState* shard, ClockTable* clocks) {
  restored_ = true;
  const int num_workers = job_.NumWorkers();
  GD_ASSIGN_OR_RETURN(std::string text, ReadRegularFile(plan_file, uint64_t{64} << 20));
  GD_ASSIGN_OR_RETURN(ResumePlan plan, ResumePlan::FromJson(text, plan_file));
  if (plan.worker_clocks.size() != static_cast<size_t>(num_workers))
    return FailedPrecondition(plan_file + ": plan for " + std::to_string(plan.worker_clocks.size()) +
                              " workers; this job has " + std::to_string(num_workers));
  size_t took = 0;
  for (const std::string& path : plan.files) {
    GD_ASSIGN_OR_RETURN(wire::ShardCheckpoint ck, LoadCheckpoint(path));
    if (ck.job() != job_.name)
      return FailedPrecondition(path + ": checkpoint of job '" + ck.job() + "', not '" + job_.name + "'");
    GD_ASSIGN_OR_RETURN(size_t n, shard->Restore(ck));
    took += n;
  }
  if (!shard->AllInitialized())
    return FailedPrecondition("resume: the checkpoints in " + plan_file + " hold only " + std::to_string(took) +
                              " of the " + std::to_string(shard->owned().size()) +
                              " chunks this shard owns (did the model or wire.chunk_bytes change?)");
  // Workers start at the plan's clocks; a chunk here may already hold later
  // pushes of theirs (asynchronous checkpoints), which count as finished.
  *clocks = ClockTable(job_.training.staleness_bound);
  std::vector<int> all;
  for (int w = 0; w < num_workers; ++w) all.push_back(w);
  clocks->SetLive(all, plan.worker_clocks);
  for (int w = 0; w < num_workers; ++w)
    if (shard->CompletedClock(w) >= 0) clocks->Finished(w, shard->CompletedClock(w));
  last_min_clock_ = clocks->MinClock();
  const int64_t at = shard->CheckpointClock(last_min_clock_);
  next_clock_ = NextAfter(at, job_.checkpoint.every_clocks);
  GD_LOG(INFO) << "resumed " << took << " chunks at clock " << at << " from " << plan.files.size()
               << " checkpoint file(s); workers start at clock " << plan.clock;
  return Status::Ok();
}

Status Checkpointer::Recover(ShardState* shard) {
  restored_ = true;
  std::vector<std::string> refused;
  GD_ASSIGN_OR_RETURN(auto found, NewestValidCheckpoint(dir_, job_.name, server_id_, &refused));
  GD_ASSIGN_OR_RETURN(size_t took, shard->Restore(found.second));
  if (!shard->AllInitialized())
    return FailedPrecondition("recover: " + found.first + " holds only " + std::to_string(took) + " of the " +
                              std::to_string(shard->owned().size()) + " chunks this shard owns");
  next_clock_ = NextAfter(found.second.clock(), job_.checkpoint.every_clocks);
  GD_LOG(WARNING) << "recovered " << took << " chunks from " << found.first << " (clock " << found.second.clock()
                  << ", " << found.second.updates_applied() << " updates); updates acknowledged after it are lost";
  return Status::Ok();
}

const char* Checkpointer::Due(int64_t clock, const char* reason) {
  const CheckpointSpec& spec = job_.checkpoint;
  if (!reason && requests_ && requests_->load() != seen_requests_) {
    seen_requests_ = requests_->load();
    reason = "request";
  }
  if (!reason && spec.every_clocks > 0 && clock >= next_clock_ && clock > 0) reason = "periodic";
  // The first one, as soon as every chunk has a value: a shard that dies
  // before its first periodic checkpoint can still restart in place.
  if (!reason && !restored_ && written_ == 0) reason = "initial";
  if (reason && (!std::strcmp(reason, "stop") || !std::strcmp(reason, "final")) && !spec.on_stop) return nullptr;
  return reason;
}

void Checkpointer::Maybe(const ShardState& shard, const ClockTable& clocks, const char* reason) {
  if (dir_.empty() || !shard.AllInitialized()) return;
  const int64_t min_clock = clocks.MinClock();
  if (min_clock != ClockTable::kNoWorkers) last_min_clock_ = min_clock;
  const int64_t clock = shard.CheckpointClock(last_min_clock_);
  if (const char* why = Due(clock, reason)) Write(shard, clock, why);
}

void Checkpointer::Write(const ShardState& shard, int64_t clock, const char* reason) {
  const CheckpointSpec& spec = job_.checkpoint;
  if (spec.every_clocks > 0) next_clock_ = NextAfter(clock, spec.every_clocks);
  TimePoint t0 = clock_->Now();
  wire::ShardCheckpoint ck = shard.ToCheckpoint(last_min_clock_);
  ck.set_job(job_.name);
  ck.set_reason(reason);
  ck.set_unix_seconds(UnixSeconds());
  auto path = WriteCheckpoint(dir_, ck, spec.keep);
  last_ms_ = 1e3 * Seconds(clock_->Now() - t0);
  if (!path.ok()) {
    // Training goes on; the previous checkpoints stay as they were.
    last_error_ = path.status().message();
    GD_LOG(ERROR) << "checkpoint at clock " << clock << " failed: " << path.status();
    return;
  }
  ++written_;
  last_clock_ = clock;
  GD_LOG(INFO) << "checkpoint (" << reason << ") at clock " << clock << ": " << *path << " in " << last_ms_ << " ms";
}

void Checkpointer::AddStats(stats::ShardStats* j) const {
  j->set_checkpoints_written(written_);
  j->set_last_checkpoint_clock(last_clock_);
  j->set_last_checkpoint_ms(last_ms_);
  if (!last_error_.empty()) j->set_checkpoint_error(last_error_);
}

}  // namespace geodesic::server
