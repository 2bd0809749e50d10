// How the flattened parameter vector is cut into chunks and which server
// shard owns each chunk.
//
// A ChunkLayout cuts `num_params` float32 values into chunks of
// `chunk_elems` (the last one may be shorter); chunks, not tensors, are the
// unit of ownership, so big tensors spread over shards and pipeline on the
// wire. A ShardMap says which shard owns each chunk. Placement is a policy
// behind PlaceChunks(): today bytes-balanced (longest-processing-time greedy),
// later the bandwidth-aware planner. Value types; not synchronized.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/geodesic.pb.h"

namespace geodesic::cluster {

// A layout may also know where the model's blocks begin (parameter offsets,
// ascending, the first 0): a transformer's embeddings, each of its layers,
// its head. Fragments (FragmentChunks) follow them.
class ChunkLayout {
 public:
  ChunkLayout() = default;
  ChunkLayout(uint64_t num_params, uint64_t chunk_elems, std::vector<uint64_t> blocks = {});

  uint64_t num_params() const { return num_params_; }
  uint64_t chunk_elems() const { return chunk_elems_; }
  uint32_t num_chunks() const { return num_chunks_; }
  uint64_t Begin(uint32_t chunk) const { return uint64_t{chunk} * chunk_elems_; }
  uint64_t Size(uint32_t chunk) const;
  const std::vector<uint64_t>& blocks() const { return blocks_; }

 private:
  uint64_t num_params_ = 0;
  uint64_t chunk_elems_ = 1;
  uint32_t num_chunks_ = 0;
  std::vector<uint64_t> blocks_;
};

// Chunks [begin, end) of a layout.
struct ChunkRange {
  uint32_t begin = 0, end = 0;
  bool Contains(uint32_t chunk) const { return chunk >= begin && chunk < end; }
  bool empty() const { return begin >= end; }
};

// Where each of `fragments` contiguous fragments of a layout's chunks
// begins (training.fragments), and its end: P + 1 chunk indices from 0 to
// the chunk count. A cut is made at a block boundary when the layout knows
// its blocks: cut i is the block start nearest to the even cut i * C / P,
// rounded to the nearest chunk boundary, so that a fragment holds whole
// blocks to within half a chunk. With fewer distinct block boundaries than
// cuts, the cuts are even ([i * C / P]). Fragments are empty when there are
// fewer chunks than fragments.
std::vector<uint32_t> FragmentCuts(const ChunkLayout& layout, int fragments);
// Fragment `index` of `fragments`: chunks [cut[index], cut[index + 1]).
ChunkRange FragmentChunks(const ChunkLayout& layout, int fragments, int index);
// The chunks clock `clock` of a job of `clocks` clocks pushes and pulls
// with training.fragments `fragments` (streaming DiLoCo): fragment
// clock % fragments; nullopt (every chunk) without fragments and at the
// job's last clock, which synchronizes the whole model.
std::optional<ChunkRange> ClockFragment(const ChunkLayout& layout, int fragments, int64_t clock, int64_t clocks);
// The same from the layout's cuts (FragmentCuts), for a caller that asks
// often (an aggregator asks for every push and every turn of its loop).
std::optional<ChunkRange> ClockFragment(const std::vector<uint32_t>& cuts, int64_t clock, int64_t clocks);

// InvalidArgument unless `blocks` are ascending offsets below `num_params`
// that start at 0 (or are none).
Status CheckBlocks(const std::vector<uint64_t>& blocks, uint64_t num_params);

struct ShardMap {
  ChunkLayout layout;
  std::vector<int32_t> owner;  // owner[chunk] = server id
  uint64_t version = 1;

  // Chunks owned by `server`, ascending.
  std::vector<uint32_t> ChunksOf(int32_t server) const;
  // Bytes (float32) owned by each of `num_servers` servers.
  std::vector<uint64_t> BytesPerServer(int num_servers) const;

  wire::ShardMap ToWire() const;
  // Validates sizes and owner ids against `num_servers`.
  static StatusOr<ShardMap> FromWire(const wire::ShardMap& w, int num_servers);
};

// The most chunks a layout may have. It bounds what a model signature or a
// shard map from the wire can make a process allocate (a few bytes per
// chunk in the shard map and the per-chunk bookkeeping): 2^24 chunks of the
// default 64 KiB are 1 TiB of parameters.
inline constexpr uint64_t kMaxChunks = uint64_t{1} << 24;
// InvalidArgument unless `num_params` (at least 1) values in chunks of
// `chunk_elems` (at least 1) make at most kMaxChunks chunks.
Status CheckLayout(uint64_t num_params, uint64_t chunk_elems);

// Chunk size for a job: the configured bytes, rounded down to whole floats.
uint64_t ChunkElemsFor(int64_t chunk_bytes);

// Places every chunk on one of `num_servers` shards so that the most loaded
// shard holds as few bytes as possible (greedy: largest chunk first onto the
// least loaded shard; ties go to the lower id). Deterministic.
ShardMap PlaceChunks(const ChunkLayout& layout, int num_servers);

// Cuts `chunks` (in the given order) into batches of consecutive chunks whose
// float32 bytes add up to at most `max_bytes` each, so that no message built
// from a batch exceeds the wire limit; a chunk larger than `max_bytes` goes
// alone. Budgets by uncompressed size, which bounds any codec's output.
std::vector<std::vector<uint32_t>> BatchChunks(const ChunkLayout& layout, const std::vector<uint32_t>& chunks,
                                               int64_t max_bytes);

}  // namespace geodesic::cluster
