// Throttle: at most one event per period, counting the calls in between that
// were not let through. For log lines a remote peer can trigger at any rate
// (refusals, failed replies): the first is written, then at most one per
// period with how many were skipped. Not thread-safe; times come from the
// caller's clock.
#pragma once

#include <cstdint>

#include "common/clock.h"

namespace geodesic {

class Throttle {
 public:
  explicit Throttle(Duration period) : period_(period) {}

  // True when the event may happen now; then *skipped is how many calls
  // since the previous true returned false.
  bool Due(TimePoint now, uint64_t* skipped) {
    if (started_ && now - last_ < period_) {
      ++skipped_;
      return false;
    }
    *skipped = skipped_;
    skipped_ = 0;
    started_ = true;
    last_ = now;
    return true;
  }

 private:
  Duration period_;
  TimePoint last_{};
  bool started_ = false;
  uint64_t skipped_ = 0;
};

}  // namespace geodesic
