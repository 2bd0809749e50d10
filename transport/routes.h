// Routes: where this process really connects when it is told to connect to
// an endpoint. The launcher sends cross-region traffic through emulated WAN
// links (wan/link_emulator.h) by giving each process, with `--route
// FROM=TO`, the emulator's listening endpoint to use instead of a peer's own
// (a worker in eu reaching the shard at tcp://127.0.0.1:7001 in us connects
// to the eu->us link's port for that shard). Socket::Connect applies them,
// so no other code knows about emulation.
//
// Process-wide, set once in main() before any socket connects; lookups are
// thread-safe after that.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace geodesic::transport {

// Parses "FROM=TO" specs (both ZeroMQ endpoints). Errors name the bad spec.
StatusOr<std::map<std::string, std::string>> ParseRoutes(const std::vector<std::string>& specs);

// Replaces the process's routes.
void SetRoutes(std::map<std::string, std::string> routes);

// The endpoint to connect to for `endpoint`: its route, or itself.
std::string RouteFor(const std::string& endpoint);

}  // namespace geodesic::transport
