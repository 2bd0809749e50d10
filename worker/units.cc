#include "worker/units.h"

#include <algorithm>
#include <numeric>

#include "common/draws.h"

namespace geodesic::worker {

UnitData::UnitData(int64_t train_samples, int64_t unit_samples, int batch_size, uint64_t seed)
    : samples_(train_samples),
      unit_samples_(std::max<int64_t>(1, unit_samples)),
      per_epoch_(std::max<int64_t>(1, train_samples / std::max<int64_t>(1, unit_samples))),
      batch_(std::max(1, batch_size)),
      seed_(seed) {}

const std::vector<int64_t>& UnitData::Permutation(int64_t epoch) {
  auto it = perms_.find(epoch);
  if (it != perms_.end()) return it->second;
  std::vector<int64_t> p(samples_);
  std::iota(p.begin(), p.end(), 0);
  // Fisher-Yates on our own draws (common/draws.h), the same on every platform.
  Draws draws(CounterSource(DrawKey({seed_, 0x756e697473ull /* "units" */, static_cast<uint64_t>(epoch)})));
  for (int64_t i = samples_ - 1; i > 0; --i) std::swap(p[i], p[draws.Below(static_cast<uint64_t>(i) + 1)]);
  if (perms_.size() >= 2) perms_.erase(perms_.begin());  // units come nearly in order
  return perms_.emplace(epoch, std::move(p)).first->second;
}

std::vector<std::vector<int64_t>> UnitData::Batches(int64_t unit) {
  const std::vector<int64_t>& p = Permutation(unit / per_epoch_);
  const int64_t first = (unit % per_epoch_) * unit_samples_;
  std::vector<std::vector<int64_t>> out;
  for (int64_t at = first; at < first + unit_samples_; at += batch_) {
    const int64_t end = std::min(first + unit_samples_, at + batch_);
    out.emplace_back(p.begin() + at, p.begin() + end);
  }
  return out;
}

void UnitQueue::Fill(wire::Heartbeat* hb) {
  MutexLock lock(mu_);
  ++fills_;
  for (auto& [unit, sent] : unconfirmed_) {
    hb->add_units_finished(unit);
    if (sent == 0) sent = fills_;
  }
  hb->set_units_wanted(static_cast<int32_t>(started_.size()) + ahead_);
}

void UnitQueue::OnReply(const wire::HeartbeatReply& r) {
  MutexLock lock(mu_);
  ++replies_;
  replied_ = true;
  held_.assign(r.units().begin(), r.units().end());
  unassigned_ = r.units_unassigned();
  last_ = r;
  last_.clear_live_workers();
  last_.clear_live_worker_clocks();
  // A finished unit sent in a heartbeat that has been answered, and no
  // longer held: the coordinator recorded it. (A lost reply only delays this.)
  for (auto it = unconfirmed_.begin(); it != unconfirmed_.end();) {
    const bool held = std::find(held_.begin(), held_.end(), it->first) != held_.end();
    if (it->second != 0 && replies_ >= it->second && !held)
      it = unconfirmed_.erase(it);
    else
      ++it;
  }
}

int64_t UnitQueue::ReadyLocked() const {
  int64_t n = 0;
  for (int64_t u : held_) n += !started_.count(u) && !done_.count(u);
  return n;
}

UnitQueue::Take UnitQueue::Next(int64_t* unit) {
  MutexLock lock(mu_);
  for (int64_t u : held_) {
    if (started_.count(u) || done_.count(u)) continue;
    started_.insert(u);
    *unit = u;
    return Take::kUnit;
  }
  return !replied_ || unassigned_ > 0 ? Take::kWait : Take::kNoMore;
}

bool UnitQueue::MayHaveMore() const {
  MutexLock lock(mu_);
  return ReadyLocked() > 0 || !replied_ || unassigned_ > 0;
}

void UnitQueue::Finished(int64_t unit) {
  MutexLock lock(mu_);
  started_.erase(unit);
  if (done_.insert(unit).second) {
    unconfirmed_[unit] = 0;
    ++finished_count_;
  }
}

bool UnitQueue::AllConfirmed() const {
  MutexLock lock(mu_);
  return unconfirmed_.empty();
}

int64_t UnitQueue::ready() const {
  MutexLock lock(mu_);
  return ReadyLocked();
}

int64_t UnitQueue::finished() const {
  MutexLock lock(mu_);
  return finished_count_;
}

wire::HeartbeatReply UnitQueue::last() const {
  MutexLock lock(mu_);
  return last_;
}

}  // namespace geodesic::worker
