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
// codec. Not synchronized; the shard's loop thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "cluster/chunking.h"
#include "common/status.h"
#include "compression/codec.h"
#include "proto/geodesic.pb.h"
#include "server/shard.h"
#include "transport/message.h"

namespace geodesic::server {

class PullCompressor {
 public:
  PullCompressor(cluster::ChunkLayout layout, uint64_t seed) : layout_(layout), seed_(seed) {}

  // Fills `d` (chunk id, element count and version already set; codec,
  // delta and base_seq set here) and returns the payload for `chunk` of
  // `snap` for `worker` under `codec`. `full` forces exact values and
  // restarts the worker's copy.
  StatusOr<transport::Payload> Encode(int worker, const compression::CodecSpec& codec, uint32_t chunk,
                                      const ShardState::Snapshot& snap, bool full, wire::ChunkData* d);

  // Drops a worker's copies (it left the job).
  void Forget(int worker) { copies_.erase(worker); }
  // Drops every puller's copy of `chunk` (it moved to or from this shard):
  // the next pull of it gets full values and starts the copy over.
  void ForgetChunk(uint32_t chunk) {
    for (auto& [worker, state] : copies_) state.chunks.erase(chunk);
  }
  size_t workers_tracked() const { return copies_.size(); }

 private:
  struct Copy {
    bool valid = false;
    uint64_t seq = 0;  // changes sent since the full values
    std::vector<float> values;
  };
  struct WorkerState {
    std::unique_ptr<compression::Encoder> encoder;
    std::string codec_name;
    std::map<uint32_t, Copy> chunks;
  };

  cluster::ChunkLayout layout_;
  uint64_t seed_;
  std::map<int, WorkerState> copies_;
  std::vector<float> delta_, sent_;
};

}  // namespace geodesic::server
