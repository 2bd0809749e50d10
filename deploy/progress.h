// The launcher's live view: one progress line, rewritten in place on a
// terminal (every 5 s otherwise), event lines that scroll above it, and the
// rendering of a coordinator StatusReply into that line. Not thread-safe;
// the launcher's thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "proto/geodesic.pb.h"

namespace geodesic::deploy {

class ProgressLine {
 public:
  // Off a terminal, a line is printed at most every `every`.
  explicit ProgressLine(bool quiet, std::chrono::milliseconds every = std::chrono::seconds(5));

  // Replaces the progress line (nothing when quiet). Off a terminal, a line
  // is printed at most every `every`, and never twice the same in a row
  // (the line stands still while the evaluator scores the model).
  void Show(const std::string& line);
  // An event: always printed, on its own line.
  void Say(const std::string& line);
  // Erases the progress line, if one is shown.
  void Clear();
  // Also hands every event to `sink` (the dashboard).
  void set_sink(std::function<void(const std::string&)> sink) { sink_ = std::move(sink); }

 private:
  bool quiet_, tty_;
  std::chrono::milliseconds every_;
  bool shown_ = false;
  std::function<void(const std::string&)> sink_;
  std::chrono::steady_clock::time_point last_{};
  std::string last_line_;  // off a terminal: the line printed last
};

// Samples per second of training, smoothed over the status replies.
class SampleRate {
 public:
  // Adds one reply's total samples at `training_seconds`; returns the rate.
  double Add(int64_t samples, double training_seconds);

 private:
  double rate_ = 0;
  int64_t prev_samples_ = -1;
  double prev_t_ = 0;
};

// "[  12.3s] step 120/400 (30%)  loss ...  workers 4/4 live ...".
// `federated`: the workers are client executors whose steps are rounds, so
// the line counts rounds (the executors' mean) instead of steps.
std::string RenderProgress(const wire::StatusReply& st, double samples_per_s, bool federated = false);

}  // namespace geodesic::deploy
