#include "worker/federated/buffered.h"

#include <algorithm>
#include <cmath>

#include "common/draws.h"

namespace geodesic::federated {
namespace {

constexpr uint64_t kBufferedDraw = 0x6675666275660001;   // "fedbuf": which client starts
constexpr uint64_t kBufferedLeave = 0x6675666275660002;  // when a dropout leaves

CounterDraws DrawsFor(uint64_t seed, uint64_t purpose, int64_t start, int64_t attempt) {
  return CounterDraws(
      CounterSource(DrawKey({seed, purpose, static_cast<uint64_t>(start), static_cast<uint64_t>(attempt)})));
}

}  // namespace

double StalenessWeight(int64_t staleness) {
  return 1.0 / std::sqrt(1.0 + static_cast<double>(std::max<int64_t>(staleness, 0)));
}

BufferedSchedule::BufferedSchedule(const BufferedSpec& spec, const ProfileSpec& profiles, std::vector<double> seconds,
                                   uint64_t seed)
    : spec_(spec), profiles_(profiles), seconds_(std::move(seconds)), seed_(seed) {
  spec_.concurrency = std::clamp<int64_t>(spec_.concurrency, 1, static_cast<int64_t>(seconds_.size()));
  BufferedStep none;
  for (int64_t i = 0; i < spec_.concurrency; ++i) Start(0, none);
}

// Uniform over the clients not in flight, among those available at this
// start (each start is a "round" of Available's draws); a bounded number
// of tries, then the lowest free client, so a draw always ends.
int64_t BufferedSchedule::Draw(int64_t start) const {
  const auto n = static_cast<uint64_t>(seconds_.size());
  for (int64_t attempt = 0; attempt < 1000; ++attempt) {
    const auto c = static_cast<int64_t>(DrawsFor(seed_, kBufferedDraw, start, attempt).Below(n));
    if (!busy_.contains(c) && Available(profiles_, c, start, seed_)) return c;
  }
  for (int64_t c = 0; c < static_cast<int64_t>(n); ++c)
    if (!busy_.contains(c)) return c;
  return 0;  // unreachable: concurrency <= clients
}

void BufferedSchedule::Start(double now, BufferedStep& step) {
  const int64_t start = starts_++;
  const int64_t c = Draw(start);
  Flight f{.finish = now + seconds_[c], .start = start, .client = c, .version = version_};
  // A dropout leaves at a uniform point of its training.
  if (DropsOut(profiles_, c, start, seed_)) {
    f.drops = true;
    f.finish = now + seconds_[c] * DrawsFor(seed_, kBufferedLeave, start, 0).Uniform();
  }
  busy_.insert(c);
  flights_.push(f);
  ++step.started;
}

BufferedStep BufferedSchedule::Next() {
  BufferedStep step;
  step.version = version_;
  const double begin = now_;
  while (static_cast<int64_t>(step.accepted.size()) < spec_.buffer) {
    const Flight f = flights_.top();
    flights_.pop();
    busy_.erase(f.client);
    now_ = f.finish;
    if (f.drops) {
      ++step.dropped;
    } else if (version_ - f.version > spec_.max_staleness) {
      ++step.stale;
    } else {
      step.accepted.push_back({.client = f.client, .start = f.start, .version = f.version});
      step.staleness_sum += version_ - f.version;
    }
    // The K-th update applies the step first: its replacement starts from
    // the new version.
    if (static_cast<int64_t>(step.accepted.size()) == spec_.buffer) ++version_;
    Start(now_, step);
  }
  step.end = now_;
  step.seconds = now_ - begin;
  return step;
}

}  // namespace geodesic::federated
