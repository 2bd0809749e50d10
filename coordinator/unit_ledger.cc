#include "coordinator/unit_ledger.h"

#include <algorithm>

namespace geodesic::coordinator {

UnitLedger::UnitLedger(int64_t total) : total_(std::max<int64_t>(0, total)), finished_(total_, false) {}

void UnitLedger::Finish(int64_t unit) {
  if (unit < 0 || unit >= total_ || finished_[unit]) return;
  finished_[unit] = true;
  ++finished_count_;
  // Whoever else holds it (it was handed out again) need not compute it;
  // if it does, the shards answer its push as a duplicate.
  for (auto& [w, units] : held_) std::erase(units, unit);
  std::erase(returned_, unit);
}

bool UnitLedger::Take(int64_t* unit) {
  while (!returned_.empty()) {
    *unit = returned_.front();
    returned_.pop_front();
    if (!finished_[*unit]) {
      ++reissued_;
      return true;
    }
  }
  if (next_ >= total_) return false;
  *unit = next_++;
  return true;
}

const std::vector<int64_t>& UnitLedger::Report(int worker, const std::vector<int64_t>& finished, int wanted) {
  for (int64_t u : finished) Finish(u);
  std::vector<int64_t>& mine = held_[worker];
  int64_t u = 0;
  while (static_cast<int>(mine.size()) < wanted && Take(&u)) mine.push_back(u);
  return mine;
}

void UnitLedger::Release(int worker) {
  auto it = held_.find(worker);
  if (it == held_.end()) return;
  // Oldest first, ahead of the ones given back before.
  for (auto u = it->second.rbegin(); u != it->second.rend(); ++u)
    if (!finished_[*u]) returned_.push_front(*u);
  held_.erase(it);
}

const std::vector<int64_t>& UnitLedger::held(int worker) const {
  static const std::vector<int64_t> kNone;
  auto it = held_.find(worker);
  return it == held_.end() ? kNone : it->second;
}

wire::UnitsSnapshot UnitLedger::Save() const {
  wire::UnitsSnapshot s;
  s.set_total(total_);
  s.set_next(next_);
  for (const auto& [w, units] : held_)
    for (int64_t u : units) s.add_returned(u);
  for (int64_t u : returned_) s.add_returned(u);
  s.set_finished(PackBits(finished_));
  s.set_reissued(reissued_);
  return s;
}

Status UnitLedger::Restore(const wire::UnitsSnapshot& s) {
  if (s.total() != total_)
    return FailedPrecondition("the saved state has " + std::to_string(s.total()) + " data units, the job " +
                              std::to_string(total_));
  if (s.next() < 0 || s.next() > total_) return DataLoss("saved data units: next unit out of range");
  for (int64_t u : s.returned())
    if (u < 0 || u >= s.next()) return DataLoss("saved data units: a returned unit out of range");
  GD_ASSIGN_OR_RETURN(std::vector<bool> finished, UnpackBits(s.finished(), total_));
  finished_ = std::move(finished);
  finished_count_ = std::count(finished_.begin(), finished_.end(), true);
  next_ = s.next();
  returned_.assign(s.returned().begin(), s.returned().end());
  reissued_ = s.reissued();
  held_.clear();
  return Status::Ok();
}

}  // namespace geodesic::coordinator
