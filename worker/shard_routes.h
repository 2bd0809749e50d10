// ShardRoutes: where a PsClient's chunks are served. It holds the shard
// map (which shard owns each chunk) and where each shard is, and follows
// the two ways these change in a running job: a shard's endpoint moves
// when its backup is promoted (a redirect, learnt from `servers_view`), and
// chunks change owner when the coordinator publishes a re-planned map
// (Switch). It keeps and compares only; the PsClient reconnects and sends
// again what the change left unanswered.
//
// Shards are numbered by their index here (0..size-1, by server id), the
// index every other part of the PsClient uses. Not synchronized: the
// PsClient's thread owns it, and calls `servers_view` from that thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cluster/chunking.h"
#include "common/status.h"
#include "proto/geodesic.pb.h"
#include "worker/shard_links.h"

namespace geodesic::worker {

// Called with the epoch last seen; returns the current epoch and, when it
// is newer, fills `servers` (PsClientOptions::servers_view).
using ServersViewFn = std::function<uint64_t(uint64_t seen, std::vector<wire::ServerInfo>* servers)>;

class ShardRoutes {
 public:
  // The assignment's map and servers; CHECK-fails on a map that does not
  // parse (the coordinator made it). `view` may be unset: endpoints never change.
  ShardRoutes(const wire::RegisterReply& assignment, ServersViewFn view);

  const cluster::ShardMap& map() const { return map_; }
  const cluster::ChunkLayout& layout() const { return map_.layout; }
  size_t size() const { return shards_.size(); }
  const ShardAddress& address(size_t si) const { return shards_[si].address; }
  const std::string& region(size_t si) const { return shards_[si].region; }
  // The chunks shard `si` owns now, ascending.
  const std::vector<uint32_t>& chunks(size_t si) const { return shards_[si].chunks; }
  // The index of the shard that owns `chunk` now.
  size_t OwnerOf(uint32_t chunk) const;

  // Redirects: the shards whose endpoint changed since the last call, with
  // their address updated; empty when the view has nothing newer.
  std::vector<size_t> FollowRedirects();
  // Takes a newer map of the same layout and returns the chunks that
  // changed owner (ascending); a map not newer changes nothing (none).
  // InvalidArgument for a map of another layout or one that does not parse.
  StatusOr<std::vector<uint32_t>> Switch(const wire::ShardMap& map);

 private:
  struct Shard {
    ShardAddress address;
    std::string region;
    std::vector<uint32_t> chunks;
  };

  cluster::ShardMap map_;
  std::vector<Shard> shards_;  // by server id
  std::vector<size_t> index_;  // server id -> index in shards_
  ServersViewFn view_;
  uint64_t epoch_ = 0;  // of the servers view last taken
};

}  // namespace geodesic::worker
