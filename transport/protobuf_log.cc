#include "transport/protobuf_log.h"

#include <google/protobuf/stubs/logging.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

#include "common/log.h"
#include "common/thread_annotations.h"
#include "common/throttle.h"

namespace geodesic::transport {
namespace {

Mutex mu;
Throttle throttle GD_GUARDED_BY(mu){std::chrono::seconds(1)};
std::atomic<uint64_t> suppressed{0};

LogLevel OurLevel(google::protobuf::LogLevel level) {
  switch (level) {
    case google::protobuf::LOGLEVEL_INFO:
      return LogLevel::kInfo;
    case google::protobuf::LOGLEVEL_WARNING:
      return LogLevel::kWarning;
    default:
      return LogLevel::kError;  // FATAL aborts inside protobuf after the handler returns
  }
}

void Handle(google::protobuf::LogLevel level, const char* file, int line, const std::string& message) {
  uint64_t skipped = 0;
  {
    MutexLock lock(mu);
    if (level != google::protobuf::LOGLEVEL_FATAL && !throttle.Due(std::chrono::steady_clock::now(), &skipped)) {
      suppressed.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  if (OurLevel(level) < MinLogLevel()) return;
  internal::LogLine(OurLevel(level), file, line).stream()
      << "protobuf: " << message
      << (skipped ? " (" + std::to_string(skipped) + " more suppressed since the last one)" : "");
}

}  // namespace

void RouteProtobufLogs() {
  static std::once_flag once;
  std::call_once(once, [] { google::protobuf::SetLogHandler(&Handle); });
}

uint64_t ProtobufLogsSuppressed() { return suppressed.load(std::memory_order_relaxed); }

}  // namespace geodesic::transport
