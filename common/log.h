// Line-oriented logging to stderr: `GD_LOG(INFO) << "shard 1 ready";`.
//
// Each line is written with one write(2), so lines from several threads or
// processes sharing a terminal do not interleave. The line prefix (role and
// id, e.g. "worker 3") is set once in main via SetLogPrefix. GD_CHECK is for
// bugs only: it logs and aborts. Thread-safe.
#pragma once

#include <sstream>
#include <string>

namespace geodesic {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

void SetLogPrefix(std::string prefix);
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();

namespace internal {

class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  std::ostream& stream() { return os_; }

 private:
  LogLevel level_;
  std::ostringstream os_;
};

// Makes `cond ? (void)0 : Voidify() & stream` type-check.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace internal
}  // namespace geodesic

#define GD_LOG_DEBUG ::geodesic::LogLevel::kDebug
#define GD_LOG_INFO ::geodesic::LogLevel::kInfo
#define GD_LOG_WARNING ::geodesic::LogLevel::kWarning
#define GD_LOG_ERROR ::geodesic::LogLevel::kError
#define GD_LOG_FATAL ::geodesic::LogLevel::kFatal

#define GD_LOG(level)                          \
  (GD_LOG_##level < ::geodesic::MinLogLevel()) \
      ? (void)0                                \
      : ::geodesic::internal::Voidify() & ::geodesic::internal::LogLine(GD_LOG_##level, __FILE__, __LINE__).stream()

#define GD_CHECK(cond)                                                                                                \
  (cond) ? (void)0                                                                                                    \
         : ::geodesic::internal::Voidify() & ::geodesic::internal::LogLine(GD_LOG_FATAL, __FILE__, __LINE__).stream() \
                                                 << "check failed: " #cond " "
