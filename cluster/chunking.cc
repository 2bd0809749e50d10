#include "cluster/chunking.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace geodesic::cluster {

ChunkLayout::ChunkLayout(uint64_t num_params, uint64_t chunk_elems, std::vector<uint64_t> blocks)
    : num_params_(num_params), chunk_elems_(std::max<uint64_t>(chunk_elems, 1)), blocks_(std::move(blocks)) {
  num_chunks_ = static_cast<uint32_t>((num_params_ + chunk_elems_ - 1) / chunk_elems_);
}

uint64_t ChunkLayout::Size(uint32_t chunk) const {
  uint64_t b = Begin(chunk);
  if (chunk >= num_chunks_) return 0;
  return std::min(chunk_elems_, num_params_ - b);
}

std::vector<uint32_t> FragmentCuts(const ChunkLayout& layout, int fragments) {
  const uint64_t c = layout.num_chunks(), p = static_cast<uint64_t>(std::max(1, fragments));
  std::vector<uint32_t> cuts(p + 1);
  for (uint64_t i = 0; i <= p; ++i) cuts[i] = static_cast<uint32_t>(i * c / p);
  // The chunk boundaries nearest to the blocks' starts, inside the layout.
  std::vector<uint32_t> at;
  for (uint64_t b : layout.blocks()) {
    const uint64_t chunk = (b + layout.chunk_elems() / 2) / layout.chunk_elems();
    if (chunk > 0 && chunk < c && (at.empty() || at.back() < chunk)) at.push_back(static_cast<uint32_t>(chunk));
  }
  if (at.size() < p - 1) return cuts;
  // Cut i takes the candidate nearest to i * C / P among those that leave one
  // for each later cut (ties to the earlier one).
  size_t from = 0;
  for (uint64_t i = 1; i < p; ++i) {
    const double even = static_cast<double>(i * c) / static_cast<double>(p);
    const size_t last = at.size() - (p - 1 - i);  // one past the last allowed
    size_t best = from;
    for (size_t j = from; j < last; ++j)
      if (std::abs(at[j] - even) < std::abs(at[best] - even)) best = j;
    cuts[i] = at[best];
    from = best + 1;
  }
  return cuts;
}

ChunkRange FragmentChunks(const ChunkLayout& layout, int fragments, int index) {
  const std::vector<uint32_t> cuts = FragmentCuts(layout, fragments);
  const size_t i = std::min(static_cast<size_t>(std::max(0, index)), cuts.size() - 2);
  return {cuts[i], cuts[i + 1]};
}

std::optional<ChunkRange> ClockFragment(const ChunkLayout& layout, int fragments, int64_t clock, int64_t clocks) {
  if (fragments <= 1 || clock + 1 >= clocks) return std::nullopt;
  return ClockFragment(FragmentCuts(layout, fragments), clock, clocks);
}

std::optional<ChunkRange> ClockFragment(const std::vector<uint32_t>& cuts, int64_t clock, int64_t clocks) {
  const int64_t fragments = static_cast<int64_t>(cuts.size()) - 1;
  if (fragments <= 1 || clock + 1 >= clocks) return std::nullopt;
  const size_t i = static_cast<size_t>(std::max<int64_t>(0, clock % fragments));
  return ChunkRange{cuts[i], cuts[i + 1]};
}

Status CheckBlocks(const std::vector<uint64_t>& blocks, uint64_t num_params) {
  if (blocks.empty()) return Status::Ok();
  if (blocks.front() != 0)
    return InvalidArgument("the model's first block starts at " + std::to_string(blocks[0]) + ", not 0");
  for (size_t i = 1; i < blocks.size(); ++i)
    if (blocks[i] <= blocks[i - 1] || blocks[i] >= num_params)
      return InvalidArgument("the model's block " + std::to_string(i) + " starts at " + std::to_string(blocks[i]) +
                             ", not after block " + std::to_string(i - 1) + " (" + std::to_string(blocks[i - 1]) +
                             ") and below the " + std::to_string(num_params) + " parameters");
  return Status::Ok();
}

std::vector<uint32_t> ShardMap::ChunksOf(int32_t server) const {
  std::vector<uint32_t> out;
  for (uint32_t c = 0; c < owner.size(); ++c)
    if (owner[c] == server) out.push_back(c);
  return out;
}

std::vector<uint64_t> ShardMap::BytesPerServer(int num_servers) const {
  std::vector<uint64_t> bytes(num_servers, 0);
  for (uint32_t c = 0; c < owner.size(); ++c)
    if (owner[c] >= 0 && owner[c] < num_servers) bytes[owner[c]] += layout.Size(c) * sizeof(float);
  return bytes;
}

wire::ShardMap ShardMap::ToWire() const {
  wire::ShardMap w;
  w.set_num_params(layout.num_params());
  w.set_chunk_elems(layout.chunk_elems());
  for (int32_t o : owner) w.add_owner(o);
  for (uint64_t b : layout.blocks()) w.add_block_starts(b);
  w.set_version(version);
  return w;
}

Status CheckLayout(uint64_t num_params, uint64_t chunk_elems) {
  if (num_params == 0) return InvalidArgument("a model of 0 parameters");
  if (chunk_elems == 0) return InvalidArgument("chunks of 0 values");
  const uint64_t chunks = num_params / chunk_elems + (num_params % chunk_elems != 0);
  if (chunks > kMaxChunks)
    return InvalidArgument(std::to_string(num_params) + " parameters in chunks of " + std::to_string(chunk_elems) +
                           " values make " + std::to_string(chunks) + " chunks, more than the " +
                           std::to_string(kMaxChunks) + " allowed");
  return Status::Ok();
}

StatusOr<ShardMap> ShardMap::FromWire(const wire::ShardMap& w, int num_servers) {
  if (w.chunk_elems() == 0) return InvalidArgument("shard map has chunk_elems 0");
  GD_RETURN_IF_ERROR(CheckLayout(w.num_params(), w.chunk_elems()).Annotate("shard map"));
  const std::vector<uint64_t> blocks(w.block_starts().begin(), w.block_starts().end());
  GD_RETURN_IF_ERROR(CheckBlocks(blocks, w.num_params()).Annotate("shard map"));
  ShardMap m;
  m.layout = ChunkLayout(w.num_params(), w.chunk_elems(), blocks);
  if (static_cast<uint64_t>(w.owner_size()) != m.layout.num_chunks())
    return InvalidArgument("shard map lists " + std::to_string(w.owner_size()) + " owners for " +
                           std::to_string(m.layout.num_chunks()) + " chunks");
  for (int32_t o : w.owner()) {
    if (o < 0 || o >= num_servers)
      return InvalidArgument("shard map names server " + std::to_string(o) + " of " + std::to_string(num_servers));
    m.owner.push_back(o);
  }
  m.version = w.version();
  return m;
}

uint64_t ChunkElemsFor(int64_t chunk_bytes) { return std::max<uint64_t>(1, chunk_bytes / sizeof(float)); }

ShardMap PlaceChunks(const ChunkLayout& layout, int num_servers) {
  ShardMap m;
  m.layout = layout;
  m.owner.assign(layout.num_chunks(), 0);
  if (num_servers <= 1) return m;
  std::vector<uint32_t> order(layout.num_chunks());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return layout.Size(a) > layout.Size(b); });
  std::vector<uint64_t> load(num_servers, 0);
  for (uint32_t c : order) {
    int best = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    m.owner[c] = best;
    load[best] += layout.Size(c);
  }
  return m;
}

std::vector<std::vector<uint32_t>> BatchChunks(const ChunkLayout& layout, const std::vector<uint32_t>& chunks,
                                               int64_t max_bytes) {
  std::vector<std::vector<uint32_t>> out;
  int64_t bytes = 0;
  for (uint32_t c : chunks) {
    const auto size = static_cast<int64_t>(layout.Size(c) * sizeof(float));
    if (out.empty() || bytes + size > max_bytes) {
      out.emplace_back();
      bytes = 0;
    }
    out.back().push_back(c);
    bytes += size;
  }
  return out;
}

}  // namespace geodesic::cluster
