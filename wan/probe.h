// Link probes: measure the round-trip time and throughput from this host to
// a ProbeServer, e.g. for every region pair at job start-up.
//
// Wire protocol (TCP, native byte order; both ends are this code): the
// client sends 9-byte headers, a type byte then a uint64 value.
//   'P', seq : a ping; the server echoes the 9 bytes unchanged.
//   'B', n   : n bytes (at most 1 GiB) follow; after the last one the server
//              answers the single byte 'A'.
// Any other header, or an oversized n, makes the server close the
// connection. Retrying a probe is harmless: nothing is stored.
//
// ProbeLink's cost: `pings` pings of 9 bytes each way, sent every
// ping_interval_ms without waiting for the echoes (so they take about
// (pings - 1) * interval + RTT, not pings * RTT), then one bulk transfer of
// bulk_bytes client -> server (about bulk_bytes * 8 / bandwidth + RTT). The
// defaults take about 0.85 s on a 50 Mbit/s, 160 ms link.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace geodesic::wan {

// The largest bulk transfer a probe sends (ProbeLink refuses more).
constexpr int64_t kMaxProbeBulkBytes = int64_t{1} << 30;

struct ProbeOptions {
  int pings = 10;                // the RTT is their median; at least 1
  double ping_interval_ms = 20;  // between ping sends; spread out, a stall of this host hits fewer
  int64_t bulk_bytes = 2 << 20;  // 0: skip the throughput measurement. Larger is more precise but slower:
                                 // the transfer should last well beyond the link's jitter
  double timeout_ms = 10000;     // deadline of the whole probe, connect included
};

struct LinkMeasurement {
  double rtt_ms = 0;  // median of the pings
  double min_rtt_ms = 0;
  double max_rtt_ms = 0;
  // Client -> server throughput in 1e6 bits per second:
  // bulk_bytes * 8 / (bulk_ms - rtt_ms); 0 when bulk_bytes is 0.
  double mbit = 0;
  double bulk_ms = 0;  // from sending the first bulk byte to receiving the ack
  int64_t bulk_bytes = 0;
};

// Measures host:port, a ProbeServer (possibly through a LinkEmulator route).
// InvalidArgument for bad options, Unavailable when the endpoint cannot be
// resolved, refuses or drops the connection, DeadlineExceeded when any part
// is unanswered at the deadline; every message names the endpoint. Name
// resolution (for a host that is not a numeric address) happens before the
// deadline applies. Blocks
// the calling thread; thread-safe (probes share nothing).
StatusOr<LinkMeasurement> ProbeLink(const std::string& host, int port, const ProbeOptions& options = {});

// Answers probes on one thread of its own, any number of connections at
// once. Start once; Stop (or the destructor) closes the listener and every
// connection and joins the thread. Thread-safe.
class ProbeServer {
 public:
  ProbeServer();
  ~ProbeServer();
  ProbeServer(const ProbeServer&) = delete;
  ProbeServer& operator=(const ProbeServer&) = delete;

  // Listens on host:port (0: a free port) and returns the bound port.
  // Unavailable if it cannot listen, FailedPrecondition if started before.
  StatusOr<int> Start(const std::string& host, int port);
  void Stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace geodesic::wan
