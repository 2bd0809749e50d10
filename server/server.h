// Server: one parameter-server shard process. It binds a ROUTER socket,
// joins the job through the coordinator, takes the chunks the shard map
// gives it, and then serves pulls, pushes and initial values until the job
// finishes or it is told to stop.
//
// Threading: Run() is a single-threaded event loop that owns the ROUTER
// socket and the ShardState; the MemberClient's heartbeat thread only reads
// the atomic progress counters. ZeroMQ's I/O thread moves bytes in the
// background, so the loop applies one message's gradients while the next
// ones are still arriving. See docs/architecture.md.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/job.h"
#include "common/status.h"
#include "compression/codec.h"
#include "server/member_client.h"
#include "server/pull_compressor.h"
#include "server/shard.h"
#include "wan/message.h"

namespace geodesic::server {

struct ServerProcessOptions {
  JobSpec job;
  int id = 0;
  std::string bind;                    // e.g. tcp://127.0.0.1:* (a free port)
  std::string coordinator;             // coordinator endpoint
  std::string stats_file;              // if set, stats JSON is written here periodically and at exit
  wan::MemberCredentials credentials;  // secured jobs; the ROUTER serves with credentials.keys
};

class Server {
 public:
  Server(ServerProcessOptions options, zmq::context_t& ctx, const Clock* clock);
  Status Run(const std::atomic<bool>* stop);

  // Counters for tests and the stats file.
  const std::map<std::string, uint64_t>& refused() const { return refused_; }

 private:
  struct HeldPull {
    std::string peer;
    uint64_t request_id = 0;
    int sender_id = 0;
    wire::Role role = wire::WORKER;
    int64_t clock = 0;
    std::vector<uint32_t> chunks;
    TimePoint since{};
    bool wait_for_own_push = false;
    bool full = false;                   // exact values, and the puller's copy starts over
    TimePoint hold_until{};              // give up waiting for the own push then
    std::optional<TimePoint> bound_met;  // when the staleness bound first allowed it
  };

  void Handle(wan::Message& m);
  void HandlePull(wan::Message& m);
  void HandlePush(wan::Message& m);
  void HandleInit(wan::Message& m);
  void Refuse(const wan::Message& m, const std::string& reason, const Status& status);
  // Checks chunk descriptors against the frames and the shard: ids owned and
  // unique, codec known, sizes exact, values finite (if `finite`).
  // On success `values` holds each chunk's values (decoded if needed).
  Status ValidateChunks(const wan::Message& m, const google::protobuf::RepeatedPtrField<wire::ChunkData>& chunks,
                        bool finite, std::string* reason, std::vector<const float*>* values);
  const compression::CodecSpec& PullCodecFor(int worker) const;
  // Whether the bound and initialization allow the read at all.
  bool BoundAllows(const HeldPull& p) const;
  bool CanServe(HeldPull& p);
  // Sends `chunks` of pull `p` (all of them if null).
  void ServePull(const HeldPull& p, const std::vector<uint32_t>* chunks = nullptr);
  void ServeHeldPulls();
  void SyncMembership();
  void ReportHeldPulls();
  void WriteStats() const;
  void PublishProgress();
  // Secured jobs: installs the coordinator's list of authorized client keys
  // (heartbeat thread), and checks a message's key against its sender.
  void Authorize(const wire::HeartbeatReply& r);
  Status CheckSender(const wan::Message& m) const;

  ServerProcessOptions options_;
  const Clock* clock_;
  zmq::context_t& ctx_;
  wan::TrafficCounters counters_;
  std::unique_ptr<wan::ZapHandler> zap_;  // secured jobs: admits only authorized client keys
  wan::Socket socket_;
  mutable std::mutex keys_mu_;
  std::map<std::string, int> key_owner_;  // guarded by keys_mu_: key -> worker id (-1: evaluator)
  std::unique_ptr<MemberClient> member_;
  std::unique_ptr<ShardState> shard_;
  ClockTable clocks_;
  int num_workers_ = 0;
  std::vector<HeldPull> held_;
  uint64_t seen_replies_ = 0;
  std::map<std::string, uint64_t> refused_;
  TimePoint next_report_{};
  // Mirrors for the heartbeat thread.
  std::atomic<uint64_t> pub_updates_{0}, pub_dropped_{0}, pub_refused_{0}, pub_held_{0};
  std::atomic<double> pub_stale_mean_{0};
  std::atomic<int64_t> pub_stale_max_{0};
  std::vector<std::vector<float>> decoded_;  // per chunk of the message being handled
  std::vector<uint8_t> zstd_scratch_;
  std::map<int, compression::CodecSpec> pull_codecs_;  // by worker
  compression::CodecSpec fp32_;
  PullCompressor pulls_{ChunkLayout(), 0};
  std::string reported_error_;
};

}  // namespace geodesic::server
