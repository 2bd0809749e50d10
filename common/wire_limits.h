// Limits every Geodesic process applies to values that cross the wire, in
// one place so that the sender can check what the receiver would refuse:
// a shard refuses a pushed or initial value beyond kMaxValueMagnitude
// (REFUSAL_VALUE_TOO_LARGE), so a federated executor's gateway and a
// worker check against the same number before they send. Constants only.
#pragma once

#include <cstdint>

namespace geodesic {

// Gradients and initial values beyond this magnitude are refused by the
// shards. It keeps every optimizer step finite: with momentum below 1 and
// lr below 1000 (the job file's limits) parameters would need more than
// 10^10 steps to overflow float, and Adam's squared gradients stay below
// FLT_MAX. Real gradients this large mean a diverged worker.
inline constexpr float kMaxValueMagnitude = 1e18f;

// Clocks at or above this are refused (REFUSAL_BAD_CLOCK) by the shards and
// the coordinator: far beyond any job, and clock + 1 never overflows.
inline constexpr int64_t kMaxClock = int64_t{1} << 48;

}  // namespace geodesic
