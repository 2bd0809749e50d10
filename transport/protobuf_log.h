// Protobuf's own log lines (libprotobuf writes them to stderr itself) go
// through our log instead, throttled: a peer that sends a header whose
// string field is not UTF-8 makes the parser log an ERROR per message, and
// without a throttle an unauthenticated peer could fill a shard's log at its
// send rate. The decode is refused either way (transport::DecodeFrames).
#pragma once

#include <cstdint>

namespace geodesic::transport {

// Installs the handler (idempotent, thread-safe). Lines pass at most one a
// second; the next one that passes says how many were suppressed.
void RouteProtobufLogs();

// Protobuf log lines suppressed so far (tests).
uint64_t ProtobufLogsSuppressed();

}  // namespace geodesic::transport
