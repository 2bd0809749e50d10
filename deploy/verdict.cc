#include "deploy/verdict.h"

#include <algorithm>
#include <chrono>
#include <fstream>

namespace geodesic::deploy {

const char* ToString(Outcome o) {
  switch (o) {
    case Outcome::kFinished:
      return "finished";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kInterrupted:
      return "interrupted";
  }
  return "unknown";
}

nlohmann::json Loss::ToJson() const { return {{"name", name}, {"exit", exit}, {"last_error", last_error}}; }

std::string Loss::Describe() const { return name + " " + exit + (last_error.empty() ? "" : " (" + last_error + ")"); }

namespace {

// "E 12:34:56.789 [worker 0] file.cc:12: what" -> "what": the level and
// stamp are the log's (common/log.cc), the source position is noise here.
std::string StripLogPrefix(const std::string& line) {
  std::string out = line.size() > 15 && line[1] == ' ' ? line.substr(15) : line;
  if (!out.empty() && out[0] == '[') {
    auto close = out.find("] ");
    if (close != std::string::npos) out = out.substr(close + 2);
  }
  auto pos = out.find(".cc:");
  if (pos != std::string::npos) {
    auto colon = out.find(": ", pos);
    if (colon != std::string::npos && colon < pos + 12) out = out.substr(colon + 2);
  }
  return out;
}

}  // namespace

std::string LastErrorLine(const std::string& path) {
  std::ifstream in(path);
  std::string last_error, last;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    last = line;
    if (line.rfind("E ", 0) == 0) last_error = line;
  }
  std::string pick = StripLogPrefix(last_error.empty() ? last : last_error);
  // One line in the summary and on the terminal, not a page.
  if (pick.size() > 240) pick = pick.substr(0, 237) + "...";
  return pick;
}

std::optional<double> TrainingSpan::Seconds() const {
  if (!start_unix || !end_unix) return std::nullopt;
  return std::max(0.0, *end_unix - *start_unix);
}

}  // namespace geodesic::deploy
