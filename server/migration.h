// Migration: a shard's part in re-planning (wan.replan; docs/planner.md "In
// a running job"). As a source it follows the coordinator's announced
// migration: exports each chunk the new map gives to another shard once it
// is ready to move, drops it here (later pulls and pushes naming it are
// refused REFUSAL_MOVED), and sends it to its new owner, again every 2 s
// (a transport::Outbox) until acknowledged; when all are, it reports the
// migration done through the heartbeat. As a destination it adopts a
// transferred chunk (a resend of one already adopted is acknowledged
// again). It also follows the shard map versions the coordinator publishes.
//
// Owns the outgoing transfers, the links to the destinations (opened by a
// transport::PeerConnector: DEALER sockets in the server, fakes in
// tests/server/migration_test.cc) and the moved/adopted bookkeeping; changes the ShardState it is given (the server
// owns it). Not synchronized: the server loop's thread owns it, except
// done_for_heartbeat(), an atomic the heartbeat thread reads.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "cluster/member_client.h"
#include "common/clock.h"
#include "config/job.h"
#include "proto/stats.pb.h"
#include "server/pull_service.h"
#include "server/requests.h"
#include "server/shard.h"
#include "transport/links.h"
#include "transport/message.h"
#include "transport/outbox.h"

namespace geodesic::server {

class Migration {
 public:
  // `connect` opens a link to a destination shard.
  Migration(const JobSpec& job, int server_id, const Clock* clock, transport::PeerConnector connect);

  // Once the shard exists: the shard, the pulls whose copies a moved chunk
  // resets, and the shard map version it was placed by.
  void Start(ShardState* shard, PullService* pulls, uint64_t map_version);

  // Destination: adopts one transferred chunk. Refused (nothing taken) or
  // the acknowledgement to send.
  Handled Adopt(const transport::Message& m);
  // Follows a new view of the coordinator's: the announced migration and
  // the shard map version.
  void Follow(const cluster::MembershipView& v);
  // Source: sends what is due of the announced migration; true once when
  // all its transfers have just been acknowledged (the caller tells the
  // coordinator at once: MemberClient::Nudge).
  bool Sync();
  // Source: the destinations' acknowledgements.
  void Drain();
  // A pull, push or init naming a chunk that moved away: the refusal.
  std::optional<Status> Moved(const wire::Header& h) const;
  // The last migration whose transfers were all acknowledged (any thread).
  uint64_t done_for_heartbeat() const { return done_pub_.load(); }
  void AddStats(stats::ShardStats* j) const;

 private:
  // Starts migration `mg`: lists the chunks to send.
  bool Begin(const wire::Migration& mg);
  // Exports, drops and sends chunk `c` to `to`; false if not ready yet.
  bool SendChunk(const wire::Migration& mg, uint32_t c, int to);
  transport::PeerLink* PeerFor(const std::string& endpoint);
  Handled AdoptChecked(const transport::Message& m);

  const JobSpec& job_;
  const int server_id_;
  const Clock* clock_;
  transport::PeerConnector connect_;
  ShardState* shard_ = nullptr;
  PullService* pulls_ = nullptr;
  uint64_t id_ = 0;    // the migration whose transfers run (or ran) here
  uint64_t done_ = 0;  // the last one whose transfers were all acknowledged
  std::atomic<uint64_t> done_pub_{0};
  wire::Migration announced_;                                          // the latest announced (id 0: none)
  std::map<uint32_t, int> to_export_;                                  // chunk -> destination, not exported yet
  std::map<int, std::string> endpoints_;                               // destination shard -> endpoint
  transport::Outbox<uint32_t> outgoing_;                               // sent chunks, until acknowledged
  size_t moving_ = 0;                                                  // chunks of the running migration
  std::map<std::string, std::unique_ptr<transport::PeerLink>> peers_;  // links to destinations, by endpoint
  std::map<uint32_t, uint64_t> adopted_;                               // chunk -> migration it was taken in
  std::map<uint32_t, int> moved_away_;                                 // chunk -> the shard it went to
  uint64_t map_version_ = 0;                                           // the shard map version this shard follows
  uint64_t chunks_sent_ = 0, chunks_adopted_ = 0;
};

}  // namespace geodesic::server
