// UnitLedger: the coordinator's record of an elastic job's data units
// (docs/deploy.md "Elastic workers"). The job's training data is a sequence
// of units (unit u: the u-th slice of unit_samples samples of a seeded
// permutation per epoch; worker/unit_data.h draws them); the ledger hands
// them out to workers, a few ahead of need, and records the ones whose
// pushes every shard acknowledged. A worker that leaves or dies gives its
// held units back, and they are handed out again before any new one, so no
// unit is lost; a unit that two workers computed (the first one's push
// landed before it died) is applied once, because the shards take each
// unit once per chunk. Pure state, no I/O; not synchronized (the
// coordinator's thread owns it).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "common/bits.h"
#include "common/status.h"
#include "proto/checkpoint.pb.h"

namespace geodesic::coordinator {

class UnitLedger {
 public:
  explicit UnitLedger(int64_t total = 0);

  // Records `worker`'s finished units (ignoring ids out of range and units
  // already finished) and tops its held units up to `wanted`. Returns the
  // units it holds now, oldest first.
  const std::vector<int64_t>& Report(int worker, const std::vector<int64_t>& finished, int wanted);
  // `worker` is gone: its held units go back, to be handed out first.
  void Release(int worker);
  const std::vector<int64_t>& held(int worker) const;

  int64_t total() const { return total_; }
  int64_t finished() const { return finished_count_; }
  int64_t unassigned() const { return static_cast<int64_t>(returned_.size()) + (total_ - next_); }
  int64_t reissued() const { return reissued_; }
  bool complete() const { return finished_count_ == total_; }
  bool IsFinished(int64_t unit) const { return unit >= 0 && unit < total_ && finished_[unit]; }

  wire::UnitsSnapshot Save() const;
  // Held units become returned ones (their workers ask again).
  Status Restore(const wire::UnitsSnapshot& s);

 private:
  void Finish(int64_t unit);
  bool Take(int64_t* unit);

  int64_t total_;
  int64_t next_ = 0;              // units below were handed out at least once
  std::deque<int64_t> returned_;  // handed out, given back unfinished
  std::vector<bool> finished_;
  int64_t finished_count_ = 0;
  int64_t reissued_ = 0;
  std::map<int, std::vector<int64_t>> held_;
};

}  // namespace geodesic::coordinator
