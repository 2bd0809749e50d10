#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include "common/thread_annotations.h"

namespace geodesic {
namespace {

Mutex g_prefix_mu;
std::string g_prefix GD_GUARDED_BY(g_prefix_mu);
std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};

const char* LevelTag(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "D";
    case LogLevel::kInfo:
      return "I";
    case LogLevel::kWarning:
      return "W";
    case LogLevel::kError:
      return "E";
    case LogLevel::kFatal:
      return "F";
  }
  return "?";
}

}  // namespace

void SetLogPrefix(std::string prefix) {
  MutexLock lock(g_prefix_mu);
  g_prefix = std::move(prefix);
}

void SetMinLogLevel(LogLevel level) { g_min_level = static_cast<int>(level); }
LogLevel MinLogLevel() { return static_cast<LogLevel>(g_min_level.load()); }

namespace internal {

LogLine::LogLine(LogLevel level, const char* file, int line) : level_(level) {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms =
      static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  std::string prefix;
  {
    MutexLock lock(g_prefix_mu);
    prefix = g_prefix;
  }
  os_ << LevelTag(level) << " " << stamp << " ";
  if (!prefix.empty()) os_ << "[" << prefix << "] ";
  if (level >= LogLevel::kError) {
    const char* base = file;
    for (const char* p = file; *p; ++p)
      if (*p == '/') base = p + 1;
    os_ << base << ":" << line << ": ";
  }
}

LogLine::~LogLine() {
  os_ << '\n';
  std::string s = os_.str();
  ssize_t ignored = ::write(STDERR_FILENO, s.data(), s.size());
  (void)ignored;
  if (level_ == LogLevel::kFatal) std::abort();
}

}  // namespace internal
}  // namespace geodesic
