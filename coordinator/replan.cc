// Re-planning a running job (wan.replan; docs/planner.md "In a running
// job"): drift checks against the workers' link estimates, and migrations
// from the barrier to the published map.
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/format.h"
#include "common/log.h"
#include "coordinator/names.h"
#include "coordinator/state.h"

namespace geodesic::coordinator {
using names::IdList;
using names::RoleName;

wan::LinkMatrix MeasuredLinks(const wan::LinkMatrix& planned, const std::vector<WorkerLinkReport>& reports,
                              int64_t min_samples, int* measured) {
  wan::LinkMatrix out = planned;
  std::map<std::pair<int, int>, double> sum;  // (server region, worker region) -> Mbit/s
  for (const auto& r : reports) {
    const int to = planned.Index(r.region);
    if (to < 0) continue;
    for (const auto& e : r.links) {
      const int from = planned.Index(e.server_region());
      if (from < 0 || from == to || !planned.at(from, to).declared) continue;
      if (static_cast<int64_t>(e.samples()) < min_samples || !(e.mbit() > 0) || !std::isfinite(e.mbit())) continue;
      sum[{from, to}] += e.mbit();
    }
  }
  for (const auto& [link, mbit] : sum) out.at(link.first, link.second).bandwidth_mbit = mbit;
  if (measured) *measured = static_cast<int>(sum.size());
  return out;
}

int64_t ChooseBarrier(const std::vector<int64_t>& floors, int64_t last_clock) {
  if (floors.empty()) return -1;
  const int64_t m = *std::max_element(floors.begin(), floors.end());
  return m < last_clock ? m : -1;
}

void CoordinatorState::FillMigration(wire::Role role, wire::HeartbeatReply* r) const {
  if (!migration_) return;
  auto* mg = r->mutable_migration();
  mg->set_id(migration_->record.id);
  mg->set_barrier_clock(migration_->record.clock);
  *mg->mutable_new_map() = migration_->new_map.ToWire();
  if (migration_->transfer && (role == wire::SERVER || role == wire::BACKUP)) {
    mg->set_transfer(true);
    AddServers(mg->mutable_servers());
  }
}

std::vector<std::string> CoordinatorState::Tick() {
  std::vector<std::string> lines;
  if (!options_.replan.enabled || !options_.replan.job || !started_ || !shard_map_ || job_finished()) return lines;
  const TimePoint now = clock_->Now();
  if (!planner_) {
    last_check_ = now;
    auto planner = wan::Planner::Create(*options_.replan.job, shard_map_->layout);
    if (!planner.ok()) {
      lines.push_back("re-planning off: " + planner.status().message());
      options_.replan.enabled = false;
      return lines;
    }
    planner_.emplace(std::move(*planner));
    wan::Plan plan;
    plan.shard_map = *shard_map_;
    plan.codecs = planner_->JobCodecs();
    plan.links = planner_->declared_links();
    auto p = planner_->Predict(shard_map_->owner, plan.codecs, plan.links);
    if (p.ok()) plan.prediction = *p;
    plan_ = std::move(plan);
  }
  if (migration_)
    AdvanceMigration(now, &lines);
  else
    CheckDrift(now, &lines);
  return lines;
}

void CoordinatorState::CheckDrift(TimePoint now, std::vector<std::string>* lines) {
  const ReplanOptions& o = options_.replan;
  std::vector<WorkerLinkReport> reports;
  int64_t last_clock = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> floors;
  for (const Member& w : workers_) {
    if (w.done) return;  // the job is ending: nothing to gain
    if (!w.live) continue;
    reports.push_back({w.region, {w.worker.links().begin(), w.worker.links().end()}});
    if (w.worker.target_steps() > 0) last_clock = std::min(last_clock, w.worker.target_steps() - 1);
    floors.push_back(std::max(w.barrier_floor, w.clock + o.pipeline_depth));
  }
  if (reports.empty()) return;
  const bool inject_due = o.inject_at_clock >= 0 && !injected_ && MinLiveClock() >= o.inject_at_clock;
  const bool forced = !forced_replan_.empty();
  if (!forced && !inject_due && (o.every_s <= 0 || Seconds(now - last_check_) < o.every_s)) return;
  last_check_ = now;
  std::string reason = forced       ? forced_replan_
                       : inject_due ? "drift injected at clock " + std::to_string(MinLiveClock())
                                    : "measured drift";
  forced_replan_.clear();
  int measured_links = 0;
  wan::LinkMatrix measured = MeasuredLinks(plan_->links, reports, o.min_samples, &measured_links);
  if (inject_due) injected_ = true;
  if (injected_) {
    // The injected value stands for the link's measurement from now on.
    const int a = measured.Index(o.inject_from), b = measured.Index(o.inject_to);
    if (a >= 0 && b >= 0) {
      measured.at(a, b).bandwidth_mbit = o.inject_mbit;
      measured.at(a, b).declared = true;
    }
  }
  auto replan = planner_->CheckDrift(*plan_, measured);
  if (!replan.ok()) {
    lines->push_back("re-plan check failed: " + replan.status().message());
    return;
  }
  if (!replan->plan && forced) {
    // Asked for: plan for the links as measured even if none drifted enough.
    wan::Plan p = planner_->MakePlan(measured, {shard_map_->owner});
    replan->drifted.push_back("none beyond wan.replan_drift (" + std::to_string(measured_links) + " link(s) measured)");
    for (uint32_t c = 0; c < p.shard_map.owner.size(); ++c)
      if (p.shard_map.owner[c] != shard_map_->owner[c])
        replan->moves.push_back({c, shard_map_->owner[c], p.shard_map.owner[c]});
    replan->plan = std::move(p);
  }
  if (!replan->plan) return;
  std::string drifted;
  for (const auto& d : replan->drifted) drifted += (drifted.empty() ? "" : "; ") + d;
  if (replan->moves.empty()) {
    plan_->links = measured;
    plan_->prediction = replan->plan->prediction;
    lines->push_back("re-plan (" + reason + "): " + drifted + "; the placement stays");
    return;
  }
  const int64_t barrier = ChooseBarrier(floors, last_clock);
  if (barrier < 0) {
    lines->push_back("re-plan (" + reason + "): " + drifted + "; too close to the job's end to move chunks");
    return;
  }
  StartMigration(now, reason, drifted, *replan, measured, barrier, lines);
}

void CoordinatorState::StartMigration(TimePoint now, const std::string& reason, const std::string& drifted,
                                      const wan::Replan& replan, const wan::LinkMatrix& measured, int64_t barrier,
                                      std::vector<std::string>* lines) {
  Migration mg;
  mg.plan = *replan.plan;
  mg.new_map = mg.plan.shard_map;
  mg.new_map.version = shard_map_->version + 1;
  mg.plan.shard_map = mg.new_map;
  mg.started = now;
  mg.record.id = ++migrations_started_;
  mg.record.clock = barrier;
  mg.record.reason = reason;
  mg.record.drifted = replan.drifted;
  mg.record.moves = replan.moves;
  mg.record.predicted_step_ms_before = plan_->prediction.step_ms;
  if (auto p = planner_->Predict(shard_map_->owner, plan_->codecs, measured); p.ok())
    mg.record.predicted_step_ms_before = p->step_ms;  // the current placement on the links as they are now
  mg.record.predicted_step_ms_after = mg.plan.prediction.step_ms;
  mg.record.map_version = mg.new_map.version;
  std::map<std::pair<int, int>, int> pairs;
  for (const auto& mv : replan.moves) pairs[{mv.from, mv.to}]++;
  std::string moves;
  for (const auto& [p, n] : pairs)
    moves += (moves.empty() ? "" : ", ") + std::to_string(n) + " server " + std::to_string(p.first) + " -> " +
             std::to_string(p.second);
  lines->push_back("re-plan " + std::to_string(mg.record.id) + " starts (" + reason + "): " + drifted + "; moving " +
                   std::to_string(replan.moves.size()) + " chunk(s) (" + moves + "), predicted step " +
                   Fmt("%.1f", mg.record.predicted_step_ms_before) + " -> " +
                   Fmt("%.1f", mg.record.predicted_step_ms_after) + " ms; barrier at clock " + std::to_string(barrier));
  migration_ = std::move(mg);
}

void CoordinatorState::Abandon(TimePoint now, std::vector<std::string>* lines, const std::string& why) {
  lines->push_back("re-plan " + std::to_string(migration_->record.id) + " abandoned: " + why + "; the placement stays");
  migration_.reset();
  last_check_ = now;
}

void CoordinatorState::AdvanceMigration(TimePoint now, std::vector<std::string>* lines) {
  if (!migration_->transfer) return AdvanceToBarrier(now, lines);
  Migration& mg = *migration_;
  const uint64_t id = mg.record.id;
  for (const Member& s : servers_)
    if (s.live && s.migration_done != id) {
      if (Seconds(now - mg.at_barrier) > 120 && static_cast<int64_t>(Seconds(now - mg.at_barrier)) % 30 == 0)
        lines->push_back("re-plan " + std::to_string(id) + ": shards still transferring after " +
                         std::to_string(static_cast<int>(Seconds(now - mg.at_barrier))) + " s");
      return;
    }
  mg.record.transfer_ms = 1e3 * Seconds(now - mg.at_barrier);
  shard_map_ = mg.new_map;
  plan_ = mg.plan;
  planned_step_ms_ = mg.record.predicted_step_ms_after;
  lines->push_back("re-plan " + std::to_string(id) + " done: shard map version " + std::to_string(mg.new_map.version) +
                   " published; " + std::to_string(mg.record.moves.size()) + " chunk(s) moved in " +
                   Fmt("%.1f", mg.record.transfer_ms) + " ms after a " + Fmt("%.1f", mg.record.barrier_ms) +
                   " ms barrier; predicted step " + Fmt("%.1f", mg.record.predicted_step_ms_before) + " -> " +
                   Fmt("%.1f", mg.record.predicted_step_ms_after) + " ms");
  replans_.push_back(mg.record);
  migration_.reset();
  last_check_ = now;
}

void CoordinatorState::AdvanceToBarrier(TimePoint now, std::vector<std::string>* lines) {
  Migration& mg = *migration_;
  const uint64_t id = mg.record.id;
  int64_t last_clock = std::numeric_limits<int64_t>::max(), max_floor = -1;
  bool all_at = true;
  int live = 0;
  for (const Member& w : workers_) {
    if (!w.live || w.done) continue;
    ++live;
    if (w.worker.target_steps() > 0) last_clock = std::min(last_clock, w.worker.target_steps() - 1);
    max_floor = std::max(max_floor, w.barrier_floor);
    all_at &= w.at_barrier == id && w.clock == mg.record.clock;
  }
  if (live == 0) return Abandon(now, lines, "no live worker");
  if (max_floor > mg.record.clock) {
    // A worker had gone past the barrier before it heard of it: move the
    // barrier out to it (workers already waiting go on to the new one).
    if (max_floor >= last_clock || ++mg.raises > 20)
      return Abandon(now, lines, "the workers could not be stopped before the job's end");
    lines->push_back("re-plan " + std::to_string(id) + ": barrier moved from clock " + std::to_string(mg.record.clock) +
                     " to " + std::to_string(max_floor));
    mg.record.clock = max_floor;
    return;
  }
  if (all_at) {
    mg.transfer = true;
    mg.at_barrier = now;
    mg.record.barrier_ms = 1e3 * Seconds(now - mg.started);
    lines->push_back("re-plan " + std::to_string(id) + ": all " + std::to_string(live) +
                     " live worker(s) at the barrier (clock " + std::to_string(mg.record.clock) + ") after " +
                     Fmt("%.1f", mg.record.barrier_ms) + " ms; shards transfer " +
                     std::to_string(mg.record.moves.size()) + " chunk(s)");
    return;
  }
  if (Seconds(now - mg.started) > 120) return Abandon(now, lines, "the workers did not reach the barrier in 120 s");
}

}  // namespace geodesic::coordinator
