#include "worker/step.h"

#include <algorithm>
#include <cmath>

#include "common/format.h"
#include "common/wire_limits.h"
#include "worker/progress.h"
#include "worker/ps_client.h"

namespace geodesic::worker {

void StepEnv::NoteFloor() { progress->set_barrier_floor(std::max(pushed_through + 1, pulled_through)); }

Status StepEnv::WaitPull(int64_t clock, float* dest) {
  GD_ASSIGN_OR_RETURN(PullTiming t, ps->WaitPull(clock, {.params = dest, .stop = stop, .describe = describe}));
  n.wait_s += t.bound_seconds;
  n.comm_s += t.wait_seconds - t.bound_seconds;
  return Status::Ok();
}

StatusOr<double> StepEnv::PullFull(int64_t clock, float* dest) {
  GD_RETURN_IF_ERROR(ps->Pull(clock, {.full = true}));  // we hold no copy (yet)
  GD_ASSIGN_OR_RETURN(PullTiming t, ps->WaitPull(clock, {.params = dest, .stop = stop, .describe = describe}));
  return t.wait_seconds;
}

StatusOr<bool> StepEnv::PullStart(int64_t clock, float* dest) {
  if (clock == 0 && ps->HoldsAllInitial()) return false;
  GD_RETURN_IF_ERROR(PullFull(clock, dest).status());
  return true;
}

Status CheckPushable(const float* v, int64_t n, int64_t clock) {
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; ++i)
    if (!(std::fabs(v[i]) <= kMaxValueMagnitude)) {
      if (bad++ == 0) first = i;
    }
  if (bad == 0) return Status::Ok();
  return InvalidArgument("clock " + std::to_string(clock) + ": the update holds " + std::to_string(bad) +
                         " value(s) beyond +-1e18 (first " + Fmt("%g", v[first]) + " at index " +
                         std::to_string(first) +
                         "), which every shard refuses: the model diverged (lower optimizer.lr, or set "
                         "optimizer.clip_norm)")
      .WithDetail(Detail::kJobFatal);
}

}  // namespace geodesic::worker
