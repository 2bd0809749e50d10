// How a launched job ended, judged from what its processes did rather than
// assumed: the outcome (finished, failed, interrupted), the processes that
// failed for good (who, how they exited, the last error line of their
// log), and the training clock that the summary's wall_seconds, accuracy
// curve and seconds_to_target share. Plain values; not synchronized (the
// launcher's thread builds them).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace geodesic::deploy {

enum class Outcome { kFinished, kFailed, kInterrupted };
const char* ToString(Outcome o);  // "finished", "failed", "interrupted"

// A process that failed for good: not restarted, not failed over, not
// ended by a fault the user injected.
struct Loss {
  std::string name;        // worker-2, server-0, evaluator, ...
  std::string exit;        // "exited 1", "killed by SIGSEGV"
  std::string last_error;  // its log's last error line, or its last line
  nlohmann::json ToJson() const;
  std::string Describe() const;  // "worker-2 exited 1 (pull at clock ...)"
};

// The last error line (level E) of the log at `path`, without its level and
// time stamp; else its last non-empty line; "" if it cannot be read.
std::string LastErrorLine(const std::string& path);

// The job's one training clock, in Unix seconds as the launcher saw it:
// from the moment training started (the first coordinator's count,
// backdated) to the moment the last worker ended. A restarted coordinator
// counts from its own restart; this clock does not.
struct TrainingSpan {
  std::optional<double> start_unix, end_unix;
  // Seconds from start to end; nullopt when training never started.
  std::optional<double> Seconds() const;
};

}  // namespace geodesic::deploy
