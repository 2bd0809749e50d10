#include "deploy/recovery.h"

#include <optional>

#include "common/format.h"
#include "deploy/process_id.h"

namespace geodesic::deploy {

bool Recoveries::MayRestart(const std::string& name) const {
  auto it = restarts_.find(name);
  return it == restarts_.end() || it->second < kMaxRestarts;
}

void Recoveries::Restarted(const std::string& name, const std::string& exit, double t, int k, const std::string& log) {
  records_.push_back({{"target", name}, {"exit", exit}, {"died_at_training_seconds", t}, {"restart", k}, {"log", log}});
  pending_[name] = {records_.size() - 1, std::chrono::steady_clock::now(), -1};
}

void Recoveries::Note(const std::string& name, const std::string& key, const std::string& value) {
  for (auto it = records_.rbegin(); it != records_.rend(); ++it)
    if ((*it)["target"] == name) {
      (*it)[key] = value;
      return;
    }
}

void Recoveries::FailedOver(const std::string& name, const std::string& exit, double t,
                            std::chrono::steady_clock::time_point since) {
  records_.push_back({{"target", name}, {"exit", exit}, {"died_at_training_seconds", t}, {"failover", true}});
  pending_[name] = {records_.size() - 1, since, -1};
}

// What shows that a process works again: a counter of its own, the summary
// key its delay goes to, and the words for it.
struct Recoveries::Probe {
  std::optional<int64_t> counter;
  const char* key = "seconds_to_first_update";
  const char* what = " applies updates again, ";
};

Recoveries::Probe Recoveries::Counter(const std::string& n, Pending& p, const wire::StatusReply& st,
                                      const JobSpec& job) const {
  Probe out;
  const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - p.restarted).count();
  const std::optional<ProcessId> who = ProcessId::Parse(n);
  if (!who) return out;
  if (who->is(ProcessRole::kCoordinator)) {
    // Its uptime says whether the restarted process answered.
    out.key = "seconds_to_first_status";
    out.what = " answers again, ";
    p.baseline = 0;
    if (st.uptime_seconds() <= since + 0.5) out.counter = 1;
  } else if (who->is(ProcessRole::kWorker)) {
    out.key = "seconds_to_first_step";
    out.what = " trains again, ";
    for (const auto& w : st.workers())
      if (w.id() == who->id && w.live()) out.counter = w.progress().steps();
  } else if (job.replication.backups > 0) {
    // A failover: the promoted backup says when it took over.
    out.what = "'s backup applies updates, ";
    p.baseline = 0;
    for (const auto& sv : st.servers())
      if (sv.id() == who->id && sv.live() && sv.progress().promoted())
        out.counter = static_cast<int64_t>(sv.progress().updates_applied() - sv.progress().updates_at_promotion());
  } else {
    for (const auto& sv : st.servers())
      if (sv.id() == who->id && sv.live()) out.counter = static_cast<int64_t>(sv.progress().updates_applied());
  }
  return out;
}

// A restarted process is back once a counter of its own moves: the first
// sightings may still be the dead process's last report, and the new one
// starts lower (a shard from its checkpoint's count, a worker from zero
// steps), so wait for a rise above the lowest seen.
void Recoveries::Observe(const wire::StatusReply& st, const JobSpec& job, ProgressLine& progress) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    const std::string& n = it->first;
    Pending& p = it->second;
    const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - p.restarted).count();
    Probe probe = Counter(n, p, st, job);
    bool back = false;
    if (probe.counter && (p.baseline < 0 || *probe.counter < p.baseline)) {
      p.baseline = *probe.counter;
    } else if (probe.counter && *probe.counter > p.baseline) {
      records_[p.index][probe.key] = since;
      progress.Say("geodesic: " + n + probe.what + Fmt("%.1f", since) + " s after its restart");
      back = true;
    }
    it = back ? pending_.erase(it) : std::next(it);
  }
}

}  // namespace geodesic::deploy
