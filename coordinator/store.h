// CoordinatorStore: the coordinator's state file (coordinator.state), so a
// restarted coordinator continues the job. The file holds a serialized
// wire::CoordinatorSnapshot (proto/checkpoint.proto; CoordinatorState::Save
// and Restore); it is rewritten atomically when the state changed, at most
// every 200 ms unless asked to write now, with the process's spare file
// descriptors (transport::FdReserve) if it is given them, so that a flood
// of connections cannot keep it from saving. Not synchronized: the
// coordinator's thread owns it.
#pragma once

#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "coordinator/state.h"
#include "transport/connection_guard.h"

namespace geodesic::coordinator {

class CoordinatorStore {
 public:
  // `path` empty: nothing is kept. `reserve` (may be null) must outlive it.
  CoordinatorStore(std::string path, const Clock* clock, transport::FdReserve* reserve = nullptr)
      : path_(std::move(path)), clock_(clock), reserve_(reserve) {}

  // Restores `state` from the file if it exists (OK when it does not);
  // `lease_ms` only goes into the log line.
  Status Load(CoordinatorState* state, int64_t lease_ms);
  // Rewrites the file if the state changed.
  void Save(const CoordinatorState& state, bool now);

 private:
  const std::string path_;
  const Clock* clock_;
  transport::FdReserve* reserve_;
  std::string saved_;  // the last snapshot written, without training_seconds
  TimePoint saved_at_{};
};

}  // namespace geodesic::coordinator
