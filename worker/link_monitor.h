// LinkMonitor: what a PsClient learns about the path to each shard from its
// own traffic, no probes: the least round trip and the throughput of pull
// replies (a passive link estimate), and the bytes sent and received as
// the fp32 values they carry before encoding. Reported per server region
// (LinkEstimate, RegionTraffic), which the worker's heartbeats, stats and
// /metrics carry. Shards are numbered by their index in the PsClient.
// Not synchronized: the PsClient's thread owns it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/shard_links.h"
#include "worker/shard_routes.h"

namespace geodesic::worker {

// Bytes exchanged with the shards of one region, headers included on the
// wire, and as the fp32 values they carry before encoding (raw / wire is
// what compression saved).
struct RegionTraffic {
  std::string region;
  uint64_t wire_sent = 0, wire_received = 0;
  uint64_t raw_sent = 0, raw_received = 0;
};

// A passive estimate of the path from one server region to this worker,
// from the pull replies themselves (no probe traffic).
struct LinkEstimate {
  std::string server_region;
  double min_rtt_ms = 0;  // least request -> reply time, the server's hold excluded
  double mbit = 0;        // EWMA of reply bytes / (reply time - hold - min RTT)
  uint64_t samples = 0;
};

class LinkMonitor {
 public:
  explicit LinkMonitor(size_t shards) : shards_(shards) {}

  // Shard `si` moved (a redirect): its path is new.
  void Reset(size_t si) { shards_[si].min_rtt_s = -1; }
  // A pull reply from shard `si`: `path_s` is its time on the path (since
  // the request, less the shard's hold), `bytes` what the pull received
  // from `si` so far. When the transfer, not the latency, made most of the
  // time, the bytes over it are a throughput sample.
  void NoteReply(size_t si, double path_s, uint64_t bytes);
  void AddRawSent(size_t si, uint64_t bytes) { shards_[si].raw_sent += bytes; }
  void AddRawReceived(size_t si, uint64_t bytes) { shards_[si].raw_received += bytes; }

  // Per server region of `routes`, so far.
  std::vector<LinkEstimate> Estimates(const ShardRoutes& routes) const;
  // Per server region, the wire bytes as `links` counted them.
  std::vector<RegionTraffic> Traffic(const ShardRoutes& routes, const ShardLinks& links) const;

 private:
  struct Shard {
    double min_rtt_s = -1;
    double mbit_ema = 0;
    uint64_t mbit_samples = 0;
    uint64_t raw_sent = 0, raw_received = 0;
  };
  std::vector<Shard> shards_;
};

}  // namespace geodesic::worker
