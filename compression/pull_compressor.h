// PullCompressor: what a shard sends a worker for a pull when the link's
// pull codec is lossy. The shard keeps a copy of what each worker holds
// (exactly: it applies the same decoded values the worker applies) and
// sends the change since that copy, encoded with the codec; whatever the
// codec dropped stays in the difference and goes out with a later pull,
// which is error feedback for parameters. A worker with no copy (first
// pull, rejoin, `full` requests) gets exact fp32 values, as does any pull
// whose encoded change would not be smaller than the values themselves.
// Lossless codecs (fp32, fp32+zstd) send the values every time and keep no
// copy. Memory: one float per parameter per worker pulling with a lossy
// codec. Takes and returns plain values (no shard or transport types).
// Not synchronized; the shard's loop thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "common/status.h"
#include "compression/codec.h"
#include "proto/geodesic.pb.h"

namespace geodesic::compression {

// Bytes kept alive by `owner` (shared with whoever sends them, so that a
// payload leaves without a copy).
struct SharedBytes {
  const void* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> owner;
};

// One chunk's current values: an immutable buffer the caller shares (a
// shard never writes a buffer once read, so the fp32 case sends it as is).
struct ChunkValues {
  std::shared_ptr<const float[]> data;
  uint64_t n = 0;
};

class PullCompressor {
 public:
  explicit PullCompressor(uint64_t seed = 0) : seed_(seed) {}

  // Fills `d` (chunk id, element count and version already set; codec,
  // delta and base_seq set here) and returns the payload for `chunk` with
  // `values` for `worker` under `codec`. `full` forces exact values and
  // restarts the worker's copy.
  StatusOr<SharedBytes> Encode(int worker, const CodecSpec& codec, uint32_t chunk, const ChunkValues& values, bool full,
                               wire::ChunkData* d);

  // `worker` holds `values` of `chunk` exactly, without a pull (its own
  // initial values): under a lossy `codec` its copy starts from them, as
  // after a pull of full values; lossless codecs keep no copy.
  void Assume(int worker, const CodecSpec& codec, uint32_t chunk, const ChunkValues& values);

  // Drops every puller's copy of `chunk` (it moved to or from this shard):
  // the next pull of it gets full values and starts the copy over.
  void ForgetChunk(uint32_t chunk) {
    for (auto& [worker, state] : copies_) state.chunks.erase(chunk);
  }
  // Drops the copies of the workers (ids >= 0) that are not in `live`:
  // a worker that left or died holds memory no more (one copy
  // of every chunk it pulled, under a lossy codec); one that comes back
  // gets full values with its next pull and starts its copy over. Other
  // pullers' copies (negative ids) stay.
  void ForgetWorkersBut(const std::vector<int>& live);
  size_t workers_tracked() const { return copies_.size(); }

 private:
  struct Copy {
    bool valid = false;
    uint64_t seq = 0;  // changes sent since the full values
    std::vector<float> values;
  };
  struct WorkerState {
    std::unique_ptr<Encoder> encoder;
    std::string codec_name;
    std::map<uint32_t, Copy> chunks;
  };

  WorkerState& StateOf(int worker, const CodecSpec& codec);

  uint64_t seed_;
  std::map<int, WorkerState> copies_;
  std::vector<float> delta_, sent_;
};

}  // namespace geodesic::compression
