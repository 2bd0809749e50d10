// printf-style formatting into a std::string, for log and progress lines
// ("%.1f", "%6.1f") and text reports. Thread-safe (no shared state).
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

namespace geodesic {

// `fmt` must take exactly one double; longer results are cut at 63 chars.
inline std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// Any printf format, any length; the compiler checks the arguments.
__attribute__((format(printf, 1, 2))) inline std::string StrFormat(const char* fmt, ...) {
  va_list args, again;
  va_start(args, fmt);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string out(n > 0 ? n : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, again);
  va_end(again);
  return out;
}

}  // namespace geodesic
