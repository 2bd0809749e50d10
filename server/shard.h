// ShardState: the parameters, optimizer state and consistency rules of one
// server shard, with no sockets (the Server loop feeds it validated
// messages; tests feed it directly).
//
// Updates. With staleness bound s > 0 each pushed gradient is applied as it
// arrives, its learning rate divided by its staleness (optimizer updates the
// chunk received between the worker's read and this push) when
// staleness_scaling is on. With s = 0 (BSP) the gradients of one clock are
// summed and applied once, as their mean, when every live worker has
// finished that clock: exactly synchronous SGD.
//
// Idempotence. A push is identified by (worker, clock, chunk); one that was
// already taken is answered DUPLICATE and changes nothing. A duplicate still
// counts toward completing its clock here, so that a worker resumed from a
// checkpoint that holds part of its push completes that clock.
//
// Determinism. A BSP round keeps each worker's gradient and, when it
// closes, sums each region's gradients in worker order and then the
// regions' sums in region order, so the result does not depend on the
// order in which pushes arrived: a run is reproducible bit for bit from its
// seed, which is what lets a resumed job match an uninterrupted one. A
// regional aggregator's combined push (PushCombined) is its region's sum,
// added in the same order, so a job with aggregators ends where the same
// job without them does, to the bit.
//
// Checkpoints. ToCheckpoint() captures the chunks, optimizer state,
// versions and clocks (server/checkpoint.h writes and reads the file);
// Restore() loads them into a fresh ShardState before it serves.
//
// Buffers. Each chunk's parameters live in a reference-counted buffer. A
// pull reply sends that buffer zero-copy; an update writes into a fresh
// buffer while any reply still holds the old one, so an in-flight reply
// never sees a half-applied update. Not synchronized: one loop thread owns
// a ShardState (buffers may be released from ZeroMQ's I/O thread, which
// only drops references).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "cluster/chunking.h"
#include "common/histogram.h"
#include "common/range_pool.h"
#include "common/status.h"
#include "config/job.h"
#include "proto/checkpoint.pb.h"
#include "proto/geodesic.pb.h"
#include "server/consistency.h"
#include "server/optimizer.h"
#include "server/strategy.h"

namespace geodesic::server {

struct ShardOptions {
  int32_t shard_id = 0;
  int64_t staleness_bound = 2;    // 0 = BSP
  bool staleness_scaling = true;  // divide async updates' learning rate by staleness
  OptimizerSpec optimizer;
  int64_t total_clocks = 0;  // the job's clocks, for the learning-rate schedule
  // Federated jobs with an adaptive strategy run it instead of `optimizer`.
  std::optional<StrategySpec> strategy = std::nullopt;
  // Elastic jobs: the data units (JobSpec::TotalUnits). Each chunk takes
  // each unit once, from whichever worker pushes it first. 0: not elastic.
  int64_t total_units = 0;
  // Threads that check and apply one update together (training.shard_threads;
  // 0: one per core). Only chunks of at least 2 MiB are split.
  int threads = 1;
  // The region (index in the job file) of each worker id, for the order of
  // a BSP round's sum (see "Determinism"); ids beyond it, or all when it
  // is empty, count as region 0.
  std::vector<int32_t> worker_regions = {};
};

class ShardState {
 public:
  ShardState(ShardOptions options, cluster::ChunkLayout layout, std::vector<uint32_t> owned);

  bool Owns(uint32_t chunk) const { return chunk < index_.size() && index_[chunk] >= 0; }
  const std::vector<uint32_t>& owned() const { return owned_; }
  const cluster::ChunkLayout& layout() const { return layout_; }
  // The threads updates are split over (null: the caller's alone); the
  // push check shares them.
  RangePool* pool() const { return pool_.get(); }

  // Sets a chunk's initial values; only the first call per chunk has effect.
  bool Init(uint32_t chunk, const float* values);
  bool IsInitialized(uint32_t chunk) const;
  // Whether `chunk` still holds its initial values (version 0) and they
  // equal `values` (by bits), or their digest (common/digest.h) is `digest`.
  bool HoldsInitial(uint32_t chunk, const float* values) const;
  bool HoldsInitial(uint32_t chunk, uint64_t digest) const;
  bool AllInitialized() const { return uninitialized_ == 0; }

  struct PushOutcome {
    wire::PushResult result = wire::APPLIED;
    int64_t staleness = -1;        // async: staleness of the applied update
    bool clock_completed = false;  // this push completed the worker's clock here
  };
  // Takes a validated gradient (layout_.Size(chunk) finite values) of
  // `worker` at `clock`, computed on parameters of version `base_version`.
  // The chunk must be owned and initialized. On a completed clock the
  // caller records it in `clocks` and then calls CloseRounds.
  // `live_workers` (at least 1) is how many pushes make up one clock.
  // `unit` (elastic jobs, in [0, total_units)): the data unit the gradient
  // was computed on; a chunk that took it already answers DUPLICATE.
  PushOutcome Push(int worker, int64_t clock, uint32_t chunk, uint64_t base_version, const float* grad,
                   int live_workers = 1, int64_t unit = -1) {
    return TakePush(worker, clock, chunk, base_version, grad, nullptr, live_workers, unit);
  }
  // The same with a buffer of the gradient's values the shard may keep: a
  // BSP round holds it instead of a copy.
  PushOutcome Push(int worker, int64_t clock, uint32_t chunk, uint64_t base_version, std::unique_ptr<float[]> grad,
                   int live_workers = 1, int64_t unit = -1) {
    return TakePush(worker, clock, chunk, base_version, grad.get(), &grad, live_workers, unit);
  }
  // A regional aggregator's combined push (BSP only): `sum` is the gradients
  // of `workers` (increasing, one region) added in worker order, computed
  // on parameters of `base_version`. The clock counts as pushed by each of
  // them (MarkReceived, duplicates) and the round's mean divides by every
  // one. DUPLICATE when all of them already took `clock` here; the caller
  // refuses a push that some but not all of them took (TakenBy), which
  // otherwise changes nothing and answers STALE_DROPPED.
  PushOutcome PushCombined(const std::vector<int>& workers, int64_t clock, uint32_t chunk, uint64_t base_version,
                           std::unique_ptr<float[]> sum);
  // How many of `workers` this chunk already took `clock` from.
  size_t TakenBy(const std::vector<int>& workers, int64_t clock, uint32_t chunk) const;
  // The region index of `worker` (ShardOptions::worker_regions).
  int RegionOf(int worker) const;
  // Whether pushes are held until their round closes (BSP): a caller that
  // copies a push anyway can hand its copy over.
  bool HoldsPushes() const { return options_.staleness_bound == 0; }

  // Records that `worker` finished `clock` with no gradient (a skipped
  // step). Returns true if this completed the clock here (false for a
  // duplicate).
  bool Skip(int worker, int64_t clock);
  // Records that `worker` sends no gradient for the owned chunks `ids` at
  // `clock` (training.fragments: the chunks outside the fragment of the
  // clock); the clock completes here once every chunk was pushed or
  // skipped. APPLIED if some chunk had not yet taken `clock`, else DUPLICATE.
  PushOutcome SkipChunks(int worker, int64_t clock, const std::vector<uint32_t>& ids);

  // BSP: applies every open round that all live workers have finished.
  // Returns the number of chunk updates applied. No-op when s > 0.
  int CloseRounds(const ClockTable& clocks);

  struct Snapshot {
    std::shared_ptr<const float[]> values;
    uint64_t version = 0;
  };
  Snapshot Read(uint32_t chunk) const;

  // Newest clock of `worker` this chunk has taken (-1 if none).
  int64_t LastClock(int worker, uint32_t chunk) const;

  // BSP: whether some chunk still has a round waiting for live workers.
  bool HasOpenRounds() const;

  // The clock a checkpoint written now stands for (proto/checkpoint.proto):
  // BSP, the lowest round not yet applied on every chunk; asynchronous,
  // `min_live_clock` (the slowest live worker's finished clocks).
  int64_t CheckpointClock(int64_t min_live_clock) const;
  // The shard's state as a checkpoint (job, reason and time are the
  // caller's). BSP: open rounds are left out and last_clock says so.
  wire::ShardCheckpoint ToCheckpoint(int64_t min_live_clock) const;
  // Takes the chunks this shard owns from `ckpt` (which may hold others):
  // values, optimizer state, version and clocks. Refuses chunks of another
  // size or optimizer state that does not fit, changing nothing then.
  // Returns how many chunks it took.
  StatusOr<size_t> Restore(const wire::ShardCheckpoint& ckpt);
  // Newest clock of `worker` that every chunk here has taken (-1 if none).
  int64_t CompletedClock(int worker) const;

  // Migration (docs/planner.md "In a running job"). ExportChunk: the whole
  // state of an owned, initialized chunk (values, version, optimizer state,
  // per-worker clocks), in checkpoint form; FailedPrecondition if the chunk
  // is not owned, not initialized, or (BSP) has a round still open, since an
  // open round's pushes would be lost with it.
  StatusOr<wire::ChunkCheckpoint> ExportChunk(uint32_t chunk) const;
  // Takes an exported chunk this shard does not own yet as its own; checks it
  // as Restore does (size, optimizer state), changing nothing on a refusal.
  ::geodesic::Status AdoptChunk(const wire::ChunkCheckpoint& in);
  // Stops owning `chunk` (after it was exported); a no-op if not owned.
  void DropChunk(uint32_t chunk);

  const IntHistogram& staleness() const { return staleness_; }
  uint64_t updates_applied() const { return updates_applied_; }
  uint64_t duplicates() const { return duplicates_; }
  uint64_t dropped() const { return dropped_; }
  // Elastic jobs: units every owned chunk took, and pushes of a unit a
  // chunk had already taken (from another worker).
  int64_t UnitsComplete() const { return units_complete_; }
  uint64_t unit_duplicates() const { return unit_duplicates_; }

 private:
  struct Contribution {
    int worker = 0;  // a combined push: its first worker
    int region = 0;
    int weight = 1;  // workers whose gradients `grad` sums
    uint64_t base_version = 0;
    std::unique_ptr<float[]> grad;
  };
  struct Round {
    std::vector<Contribution> contributions;  // summed by region, in worker order, on close
  };
  struct Chunk {
    uint32_t id = 0;
    uint64_t size = 0;
    std::shared_ptr<float[]> params;
    uint64_t version = 0;
    bool initialized = false;
    std::unique_ptr<ChunkOptimizer> optimizer;
    std::vector<int64_t> last_clock;  // per worker: newest clock taken, -1 if none
    std::map<int64_t, Round> rounds;  // BSP: open rounds by clock
    int64_t closed_through = -1;      // BSP: rounds at or below this clock are closed
    std::vector<bool> units_taken;    // elastic jobs: per data unit, whether this chunk took it
  };

  void SaveChunk(const Chunk& c, wire::ChunkCheckpoint* out) const;
  // Checks `in` against a chunk of `size` values: its optimizer state, or an error.
  StatusOr<ChunkOptimizer::State> CheckChunk(const wire::ChunkCheckpoint& in, uint64_t size,
                                             const std::string& where) const;
  void Reindex();
  // Sums a round's contributions (see "Determinism") into the first one's
  // buffer; returns it and the workers summed.
  std::pair<float*, int> SumRound(Chunk& c, std::vector<Contribution>& parts);
  // Push's body; `owned` (may be null) holds `grad`'s values for a round to keep.
  PushOutcome TakePush(int worker, int64_t clock, uint32_t chunk, uint64_t base_version, const float* grad,
                       std::unique_ptr<float[]>* owned, int live_workers, int64_t unit);
  // per_clock 0: a BSP round; otherwise an async push among per_clock.
  void Apply(Chunk& c, const float* grad, float grad_scale, float lr_scale, int per_clock);
  Chunk& chunk(uint32_t id) { return chunks_[index_[id]]; }
  const Chunk& chunk(uint32_t id) const { return chunks_[index_[id]]; }

  ShardOptions options_;
  std::unique_ptr<RangePool> pool_;  // null with one thread
  cluster::ChunkLayout layout_;
  std::vector<uint32_t> owned_;
  std::vector<int32_t> index_;  // chunk id -> position in chunks_, -1 if not owned
  std::vector<Chunk> chunks_;
  size_t uninitialized_ = 0;
  // Marks a chunk of (worker, clock) as received; true when that completes
  // the clock here.
  bool MarkReceived(int worker, int64_t clock, uint32_t chunk);

  std::map<std::pair<int, int64_t>, std::vector<uint32_t>> pending_;  // (worker, clock) -> chunks received
  std::vector<int64_t> completed_;  // per worker: newest clock completed here, -1 if none
  IntHistogram staleness_;
  uint64_t updates_applied_ = 0, duplicates_ = 0, dropped_ = 0, unit_duplicates_ = 0;
  // Takes `in`'s units_taken into `c` (elastic jobs), or says why not.
  Status TakeUnits(const wire::ChunkCheckpoint& in, Chunk* c, const std::string& where) const;
  // Elastic jobs: per data unit, how many owned chunks took it, and how many
  // units every owned chunk took (UnitsComplete): kept as pushes take units,
  // counted again only when the chunks change (Reindex, Restore).
  void RecountUnits();
  std::vector<int32_t> unit_chunks_;
  int64_t units_complete_ = 0;
};

}  // namespace geodesic::server
