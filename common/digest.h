// A 64-bit digest of a run of floats by their bits (so -0.0 and 0.0, or
// two NaNs with different payloads, differ), for telling whether two
// copies of a chunk hold the same values without sending them
// (InitRequest offers). Not cryptographic: a sender that wants a collision
// can make one, and gains only a wrong copy of its own. Thread-safe (a
// pure function).
#pragma once

#include <cstddef>
#include <cstdint>

namespace geodesic {

uint64_t ValuesDigest(const float* values, size_t n);

}  // namespace geodesic
