#include "worker/shard_routes.h"

#include <algorithm>

#include "common/log.h"

namespace geodesic::worker {

ShardRoutes::ShardRoutes(const wire::RegisterReply& assignment, ServersViewFn view) : view_(std::move(view)) {
  auto map = cluster::ShardMap::FromWire(assignment.shard_map(), assignment.servers_size());
  GD_CHECK(map.ok()) << map.status();
  map_ = *map;
  for (const auto& s : assignment.servers()) {
    shards_.push_back(Shard{.address = {.id = s.id(), .endpoint = s.endpoint(), .curve_key = s.curve_public_key()},
                            .region = s.region(),
                            .chunks = map_.ChunksOf(s.id())});
  }
  std::sort(shards_.begin(), shards_.end(), [](const Shard& a, const Shard& b) { return a.address.id < b.address.id; });
  for (size_t si = 0; si < shards_.size(); ++si) {
    const int id = shards_[si].address.id;
    if (id >= static_cast<int>(index_.size())) index_.resize(id + 1, 0);
    index_[id] = si;
  }
}

size_t ShardRoutes::OwnerOf(uint32_t chunk) const { return index_[map_.owner[chunk]]; }

std::vector<size_t> ShardRoutes::FollowRedirects() {
  std::vector<size_t> moved;
  if (!view_) return moved;
  std::vector<wire::ServerInfo> servers;
  const uint64_t epoch = view_(epoch_, &servers);
  if (epoch <= epoch_) return moved;
  epoch_ = epoch;
  for (const auto& info : servers)
    for (size_t si = 0; si < shards_.size(); ++si) {
      ShardAddress& a = shards_[si].address;
      if (a.id != info.id() || info.endpoint().empty() || info.endpoint() == a.endpoint) continue;
      GD_LOG(WARNING) << "server " << a.id << " moved from " << a.endpoint << " to " << info.endpoint()
                      << " (its backup was promoted); resending what it has not answered";
      a.endpoint = info.endpoint();
      a.curve_key = info.curve_public_key();
      moved.push_back(si);
    }
  return moved;
}

StatusOr<std::vector<uint32_t>> ShardRoutes::Switch(const wire::ShardMap& wire_map) {
  GD_ASSIGN_OR_RETURN(cluster::ShardMap next, cluster::ShardMap::FromWire(wire_map, static_cast<int>(shards_.size())));
  if (next.layout.num_params() != map_.layout.num_params() || next.layout.chunk_elems() != map_.layout.chunk_elems())
    return InvalidArgument("the new shard map has another layout");
  std::vector<uint32_t> moved;
  if (next.version <= map_.version) return moved;
  for (uint32_t c = 0; c < next.layout.num_chunks(); ++c)
    if (next.owner[c] != map_.owner[c]) moved.push_back(c);
  map_ = std::move(next);
  for (Shard& s : shards_) s.chunks = map_.ChunksOf(s.address.id);
  return moved;
}

}  // namespace geodesic::worker
