// RegionSums: what a regional aggregator combines (aggregator/aggregator.h),
// without the sockets. It takes the region's workers' pushes, says which
// sums are ready to go to the shards (Forward), and, once the shards
// answered every chunk of a forward, which acknowledgements go back to the
// workers (Reply).
//
// A clock's combined push goes once every worker that is live and joined
// at or before that clock pushed it whole or skipped it; it sums the whole
// gradients in worker order and covers those workers. With streaming
// DiLoCo (training.fragments) "whole" is the clock's fragment
// (cluster::ClockFragment): a worker pushes only those chunks and tells the
// shards itself that it skips the others, and the sum carries only them.
// A worker's push of a clock that already went without it (it rejoined, was paused past its
// lease, or had not finished pushing) is forwarded on its own (covers =
// that worker), and the shards decide: they take it into the round, drop
// it (the round closed) or call it a duplicate. A resend of a push a
// forward covered waits for that forward's answer, or is answered from the
// clock's history once it came. So every acknowledgement a worker gets
// says what the shards did with its chunks.
//
// Single-threaded: the aggregator's loop owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cluster/chunking.h"
#include "proto/geodesic.pb.h"

namespace geodesic::aggregator {

// Where a worker's push message is answered, and which chunks it carried.
struct AckTo {
  std::string peer;
  uint64_t request_id = 0;
  std::vector<uint32_t> chunks;
};

// One chunk of a worker's push: its id and num_elems fp32 values (checked
// by the caller against the layout).
struct PushedChunk {
  uint32_t id = 0;
  const float* values = nullptr;
};

// A sum to send to the shards: clock `clock`, the gradients of `covers`.
struct Forward {
  int64_t clock = 0;
  std::vector<int> covers;
  std::shared_ptr<std::vector<float>> sum;  // num_params values; outside `only`, zeros
  std::optional<cluster::ChunkRange> only;  // the chunks it carries (the clock's fragment); unset: all
  bool late = false;                        // one worker's push of a clock whose combined push went without it
};

// An acknowledgement to send to a worker.
struct Reply {
  AckTo to;
  int64_t clock = 0;
  uint32_t applied = 0, duplicate = 0, dropped = 0;
  wire::PushResult result() const;
};

class RegionSums {
 public:
  // Clocks whose answers are kept for resends, behind the oldest open one.
  static constexpr int64_t kHistory = 256;

  // The chunks a clock's push carries (cluster::ClockFragment); unset: all.
  using FragmentFn = std::function<std::optional<cluster::ChunkRange>(int64_t clock)>;

  RegionSums(const cluster::ChunkLayout& layout, int first_worker, int num_workers, FragmentFn fragment_of = {});

  // The region's live workers and each one's clock, from a membership view
  // (`valid` false before the first: every worker live from clock 0). A
  // worker that was not live before counts from its clock here on: clocks
  // before it do not wait for it.
  void SetLive(bool valid, const std::vector<int>& live, const std::vector<int64_t>& clocks);
  // A worker's push message of `clock` (chunks outside the clock's fragment
  // are not taken: the caller refuses them). Returns the replies due now (a
  // resend of a push the shards already answered).
  std::vector<Reply> Take(int worker, int64_t clock, AckTo to, const std::vector<PushedChunk>& chunks);
  // A worker skipped `clock` (the shards are told by the worker).
  void Skip(int worker, int64_t clock);
  // The sums ready to send, in clock order; each stays open until answered.
  std::vector<Forward> TakeReady();
  // The shards answered `chunks` of the forward (clock, covers): how many
  // of them were applied, duplicates, dropped (in that order when mixed).
  void Answered(int64_t clock, const std::vector<int>& covers, const std::vector<uint32_t>& chunks,
                const wire::PushAck& ack);
  // Replies of the forwards every chunk of which was answered.
  std::vector<Reply> TakeAnswered();

  // The oldest clock with work not yet answered (pushes held or a forward
  // in flight); the next clock to combine when none.
  int64_t OldestOpen() const;
  size_t open_clocks() const { return open_.size(); }
  size_t forwards_in_flight() const { return sent_.size(); }

 private:
  struct Gradient {
    std::vector<float> values;  // num_params
    std::vector<bool> got;      // by chunk
    uint32_t chunks = 0;
    std::vector<AckTo> acks;
  };
  struct Open {
    std::map<int, Gradient> grads;  // by worker: summed in this order
    std::set<int> skipped;
  };
  struct Sent {
    std::map<int, std::vector<AckTo>> acks;        // by covered worker
    std::map<uint32_t, wire::PushResult> answers;  // by chunk
    uint32_t chunks = 0;                           // the chunks it carried
  };
  using SentKey = std::pair<int64_t, std::vector<int>>;

  std::optional<cluster::ChunkRange> FragmentOf(int64_t clock) const;
  uint32_t ChunksOf(int64_t clock) const;
  void Add(Gradient& g, int64_t clock, AckTo to, const std::vector<PushedChunk>& chunks);
  bool Whole(const Gradient& g, int64_t clock) const { return g.chunks == ChunksOf(clock); }
  bool Ready(int64_t clock, const Open& o) const;
  Forward Send(int64_t clock, std::map<int, Gradient>& grads);
  Reply Answer(AckTo to, int64_t clock, const std::map<uint32_t, wire::PushResult>& answers) const;
  void Trim();

  cluster::ChunkLayout layout_;
  int first_worker_ = 0, num_workers_ = 0;
  FragmentFn fragment_of_;
  std::map<int, int64_t> live_;  // live worker -> the clock it counts from
  int64_t next_open_ = 0;        // clocks below have had their combined push
  std::map<int64_t, Open> open_;
  std::map<std::pair<int64_t, int>, Gradient> late_;  // (clock, worker): a push of a clock gone without it
  std::map<SentKey, Sent> sent_;
  std::vector<Reply> answered_;
  // Answered clocks: covered worker -> the chunks the shards dropped (a
  // resend is a duplicate of the others).
  std::map<int64_t, std::map<int, std::set<uint32_t>>> history_;
};

}  // namespace geodesic::aggregator
