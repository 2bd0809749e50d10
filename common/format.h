// printf-style formatting of one number into a std::string, for log and
// progress lines ("%.1f", "%6.1f"). Thread-safe (no shared state).
#pragma once

#include <cstdio>
#include <string>

namespace geodesic {

// `fmt` must take exactly one double; longer results are cut at 63 chars.
inline std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

}  // namespace geodesic
