#include "deploy/progress.h"

#include <unistd.h>

#include <algorithm>
#include <iostream>

#include "common/format.h"

namespace geodesic::deploy {

ProgressLine::ProgressLine(bool quiet, std::chrono::milliseconds every)
    : quiet_(quiet), tty_(::isatty(STDOUT_FILENO)), every_(every) {}

void ProgressLine::Show(const std::string& line) {
  if (quiet_) return;
  if (tty_) {
    std::cout << "\r\033[K" << line << std::flush;
    shown_ = true;
  } else if (std::chrono::steady_clock::now() - last_ >= every_ && line != last_line_) {
    std::cout << line << std::endl;
    last_ = std::chrono::steady_clock::now();
    last_line_ = line;
  }
}

void ProgressLine::Say(const std::string& line) {
  Clear();
  std::cout << line << std::endl;
  if (sink_) sink_(line);
}

void ProgressLine::Clear() {
  if (shown_) std::cout << "\r\033[K" << std::flush;
  shown_ = false;
}

double SampleRate::Add(int64_t samples, double t) {
  if (prev_samples_ >= 0 && t > prev_t_ + 0.5) {
    double inst = (samples - prev_samples_) / (t - prev_t_);
    rate_ = rate_ == 0 ? inst : 0.7 * rate_ + 0.3 * inst;
    prev_samples_ = samples;
    prev_t_ = t;
  } else if (prev_samples_ < 0) {
    prev_samples_ = samples;
    prev_t_ = t;
  }
  return rate_;
}

namespace {

// The slowest cross-region path, as the workers measured it passively.
std::string SlowestLink(const wire::StatusReply& st) {
  const wire::LinkEstimate* slowest = nullptr;
  std::string slowest_to;
  for (const auto& w : st.workers())
    for (const auto& l : w.progress().links())
      if (l.server_region() != w.region() && l.samples() > 0 && (!slowest || l.mbit() < slowest->mbit())) {
        slowest = &l;
        slowest_to = w.region();
      }
  if (!slowest) return "";
  return "  slowest link " + slowest->server_region() + "->" + slowest_to + " " + Fmt("%.1f", slowest->mbit()) +
         " Mbit/s " + Fmt(slowest->min_rtt_ms() < 10 ? "%.1f" : "%.0f", slowest->min_rtt_ms()) + " ms";
}

}  // namespace

std::string RenderProgress(const wire::StatusReply& st, double samples_per_s, bool federated) {
  int64_t steps = 0, target = 0, live = 0;
  double loss = 0, acc = 0;
  int reporting = 0, accurate = 0;
  for (const auto& w : st.workers()) {
    steps += w.progress().steps();
    // Every worker has the same target; one that has not reported yet
    // still counts, so the total is the same from the first line on.
    target = std::max(target, w.progress().target_steps());
    live += w.live();
    if (w.progress().loss() >= 0 && w.progress().steps() > 0) {
      loss += w.progress().loss();
      ++reporting;
      if (w.progress().train_accuracy() >= 0) {
        acc += w.progress().train_accuracy();
        ++accurate;
      }
    }
  }
  double stale_mean = 0;
  int64_t stale_max = 0;
  for (const auto& s : st.servers()) {
    stale_mean = std::max(stale_mean, s.progress().staleness_mean());
    stale_max = std::max(stale_max, s.progress().staleness_max());
  }
  if (federated && st.workers_size() > 0)
    steps /= st.workers_size();  // rounds: the executors' mean
  else
    target *= st.workers_size();
  std::string line =
      "[" + Fmt("%6.1f", st.training_seconds()) + "s] " + (federated ? "round " : "step ") + std::to_string(steps);
  if (target > 0) line += "/" + std::to_string(target) + " (" + Fmt("%.0f", 100.0 * steps / target) + "%)";
  if (reporting) {
    line += "  loss " + Fmt("%.3f", loss / reporting);
    // Models with their own loss may measure no accuracy.
    if (accurate) line += "  train acc " + Fmt("%.3f", acc / accurate);
  }
  line += "  " + Fmt("%.0f", samples_per_s) + " samples/s";
  line += "  staleness mean " + Fmt("%.1f", stale_mean) + " max " + std::to_string(stale_max);
  line += "  workers " + std::to_string(live) + "/" + std::to_string(st.workers_size()) + " live";
  return line + SlowestLink(st);
}

}  // namespace geodesic::deploy
