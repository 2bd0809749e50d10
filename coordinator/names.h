// Names and numbers in the coordinator's log lines and refusals, shared by
// the coordinator's source files (not a public interface).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "proto/geodesic.pb.h"

namespace geodesic::coordinator::names {

// "1,2,3", or the first 8 and how many in all.
inline std::string IdList(const std::vector<int>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ",";
    if (i == 8) return s + "... (" + std::to_string(ids.size()) + " in all)";
    s += std::to_string(ids[i]);
  }
  return s;
}

inline const char* RoleName(wire::Role role) {
  switch (role) {
    case wire::SERVER:
      return "server";
    case wire::WORKER:
      return "worker";
    case wire::EVALUATOR:
      return "evaluator";
    case wire::COORDINATOR:
      return "coordinator";
    case wire::CLIENT:
      return "client";
    case wire::BACKUP:
      return "backup of server";
    case wire::AGGREGATOR:
      return "aggregator";
    default:
      return "member";
  }
}

}  // namespace geodesic::coordinator::names
