// WaitReporter: makes a long blocking wait say what and whom it waits for.
// A wait loop calls Due() each time it wakes; once the wait has lasted
// `report_after`, and every `report_after` after that, Due() returns true
// and the caller logs a description built from what it knows right then
// ("worker 3 blocked at clock 17 by worker 5 at clock 14"). Not synchronized;
// one per wait.
#pragma once

#include "common/clock.h"

namespace geodesic {

class WaitReporter {
 public:
  WaitReporter(const Clock* clock, Duration report_after)
      : clock_(clock), start_(clock->Now()), next_(start_ + report_after), every_(report_after) {}

  bool Due() {
    TimePoint now = clock_->Now();
    if (now < next_) return false;
    next_ = now + every_;
    return true;
  }
  double ElapsedSeconds() const { return Seconds(clock_->Now() - start_); }

 private:
  const Clock* clock_;
  TimePoint start_;
  TimePoint next_;
  Duration every_;
};

}  // namespace geodesic
