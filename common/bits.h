// A set of bits packed into bytes for the wire and the state files: bit i
// is byte i / 8, bit i % 8 (UnitsSnapshot.finished, the elastic job's
// finished data units; ChunkCheckpoint.units_taken, the units a shard's
// chunk has taken). Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace geodesic {

std::string PackBits(const std::vector<bool>& bits);
// Refuses a string too short for `n` bits (DataLoss).
StatusOr<std::vector<bool>> UnpackBits(const std::string& packed, int64_t n);

}  // namespace geodesic
