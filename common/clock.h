// Time as an injected dependency: production code asks a Clock, tests pass a
// FakeClock and move it by hand, so leases, staleness deadlines and
// "waiting for X for 6 s" reports are testable without sleeping.
// RealClock is thread-safe; FakeClock is thread-safe (atomic).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace geodesic {

using Duration = std::chrono::nanoseconds;
using TimePoint = std::chrono::steady_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
};

class RealClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  static RealClock* Get() {
    static RealClock clock;
    return &clock;
  }
};

class FakeClock final : public Clock {
 public:
  TimePoint Now() const override { return TimePoint(Duration(now_ns_.load())); }
  void Advance(Duration d) { now_ns_ += d.count(); }

 private:
  std::atomic<int64_t> now_ns_{1'000'000'000};
};

// Wall-clock time as Unix seconds (for records compared across processes;
// intervals use a Clock).
inline double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

inline double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }
inline Duration Millis(int64_t ms) { return std::chrono::milliseconds(ms); }

}  // namespace geodesic
