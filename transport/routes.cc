#include "transport/routes.h"

#include <mutex>

#include "common/thread_annotations.h"

namespace geodesic::transport {
namespace {

Mutex g_mu;
std::map<std::string, std::string>& Table() GD_REQUIRES(g_mu) {
  static std::map<std::string, std::string> table;
  return table;
}

bool LooksLikeEndpoint(const std::string& s) {
  return s.rfind("tcp://", 0) == 0 && s.find(':', 6) != std::string::npos && s.back() != ':';
}

}  // namespace

StatusOr<std::map<std::string, std::string>> ParseRoutes(const std::vector<std::string>& specs) {
  std::map<std::string, std::string> out;
  for (const std::string& spec : specs) {
    auto eq = spec.find('=');
    std::string from = spec.substr(0, eq), to = eq == std::string::npos ? "" : spec.substr(eq + 1);
    if (eq == std::string::npos || !LooksLikeEndpoint(from) || !LooksLikeEndpoint(to))
      return InvalidArgument("--route '" + spec + "': expected tcp://HOST:PORT=tcp://HOST:PORT");
    if (!out.emplace(from, to).second) return InvalidArgument("--route: " + from + " is routed twice");
  }
  return out;
}

void SetRoutes(std::map<std::string, std::string> routes) {
  MutexLock lock(g_mu);
  Table() = std::move(routes);
}

std::string RouteFor(const std::string& endpoint) {
  MutexLock lock(g_mu);
  auto it = Table().find(endpoint);
  return it == Table().end() ? endpoint : it->second;
}

}  // namespace geodesic::transport
