// Elastic jobs' data (membership.elastic; docs/deploy.md "Elastic
// workers"). The training set is visited as a sequence of units: epoch e
// is a seeded permutation of every training sample, cut into
// UnitsPerEpoch() units of UnitSamples() samples (a tail shorter than a
// unit is left out of that epoch, as a batch sampler leaves out a partial
// batch), and unit u is slice u % UnitsPerEpoch() of epoch u / UnitsPerEpoch().
// Any worker can compute any unit: the coordinator decides who computes
// which (coordinator/unit_ledger.h).
//
// UnitData draws a unit's batches (torch-free; not synchronized).
// UnitQueue is a worker's view of the units the coordinator holds for it:
// the heartbeat thread fills heartbeats from it and feeds it replies, the
// training thread takes units and marks them finished (thread-safe).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "common/thread_annotations.h"
#include "config/job.h"
#include "proto/geodesic.pb.h"

namespace geodesic::worker {

class UnitData {
 public:
  UnitData(int64_t train_samples, int64_t unit_samples, int batch_size, uint64_t seed);
  // The batches of unit `unit` (indices into the training set), in order.
  std::vector<std::vector<int64_t>> Batches(int64_t unit);
  int64_t units_per_epoch() const { return per_epoch_; }

 private:
  const std::vector<int64_t>& Permutation(int64_t epoch);

  int64_t samples_, unit_samples_, per_epoch_;
  int batch_;
  uint64_t seed_;
  std::map<int64_t, std::vector<int64_t>> perms_;  // the latest two epochs
};

class UnitQueue {
 public:
  explicit UnitQueue(int ahead) : ahead_(ahead) {}

  // Heartbeat thread: the finished units not yet confirmed, and how many we
  // want held (those started and not finished, plus `ahead`).
  void Fill(wire::Heartbeat* hb) GD_EXCLUDES(mu_);
  void OnReply(const wire::HeartbeatReply& r) GD_EXCLUDES(mu_);

  enum class Take { kUnit, kWait, kNoMore };
  // Training thread: the oldest held unit not started yet (kUnit, marked
  // started); kWait when none is held but more may come (no reply yet, or
  // units still to hand out); kNoMore when the job has none left for us.
  Take Next(int64_t* unit) GD_EXCLUDES(mu_);
  // Whether Next would give a unit now (or soon): drives prefetching.
  bool MayHaveMore() const GD_EXCLUDES(mu_);
  // Every push of `unit` was acknowledged by every shard.
  void Finished(int64_t unit) GD_EXCLUDES(mu_);
  // Whether every finished unit was confirmed by a reply.
  bool AllConfirmed() const GD_EXCLUDES(mu_);
  // Units held now that were not started (the ones Next would give).
  int64_t ready() const GD_EXCLUDES(mu_);
  int64_t finished() const GD_EXCLUDES(mu_);
  wire::HeartbeatReply last() const GD_EXCLUDES(mu_);

 private:
  int64_t ReadyLocked() const GD_REQUIRES(mu_);

  const int ahead_;
  mutable Mutex mu_;
  bool replied_ GD_GUARDED_BY(mu_) = false;
  std::vector<int64_t> held_ GD_GUARDED_BY(mu_);  // as of the latest reply
  std::set<int64_t> started_ GD_GUARDED_BY(mu_);  // taken by Next, not finished
  std::set<int64_t> done_ GD_GUARDED_BY(mu_);     // finished by us (ever)
  // Finished, not yet confirmed: unit -> the fill count when first sent (0: not yet).
  std::map<int64_t, uint64_t> unconfirmed_ GD_GUARDED_BY(mu_);
  uint64_t fills_ GD_GUARDED_BY(mu_) = 0, replies_ GD_GUARDED_BY(mu_) = 0;
  int64_t unassigned_ GD_GUARDED_BY(mu_) = 1;
  int64_t finished_count_ GD_GUARDED_BY(mu_) = 0;
  wire::HeartbeatReply last_ GD_GUARDED_BY(mu_);
};

}  // namespace geodesic::worker
