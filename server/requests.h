// The shard's request handling without a socket: the checks of pushes,
// pulls and initial values against a ShardState (see "Validation" in
// docs/wire.md) and the application of those that pass. Server runs them
// behind its ROUTER socket; tests/fuzz/fuzz_shard.cc feeds them arbitrary
// bytes. A request that fails a check is refused whole: nothing of it
// reaches the ShardState. Not synchronized: the thread that owns the
// ShardState calls these.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/wire_limits.h"
#include "proto/geodesic.pb.h"
#include "server/consistency.h"
#include "server/init_offers.h"
#include "server/shard.h"
#include "transport/message.h"

namespace geodesic::server {

// Gradients and initial values beyond this magnitude are refused
// (REFUSAL_VALUE_TOO_LARGE); common/wire_limits.h says why 1e18.
using ::geodesic::kMaxValueMagnitude;
// Clocks at or above this are refused (REFUSAL_BAD_CLOCK).
using ::geodesic::kMaxClock;
// How far ahead of the live window a push may be (docs/wire.md
// "Validation"): with bound s, a worker pushes clock c only after a pull of
// c was answered, so c <= the slowest live worker's clock + s. The margin
// covers pushes in flight while the clock table catches up (other
// workers' pushes still on a slow link, a pipeline of up to 16 pulls);
// fully asynchronous jobs measure from the sender's own clock here.
inline constexpr int64_t kPushWindow = 16;
// The evaluator's sender id (worker/evaluator.cc): a job has one.
inline constexpr int kEvaluatorId = 0;

class RequestDecoder {
 public:
  // Checks `chunks` against the frames of `m` and the shard: one descriptor
  // per frame, ids owned and unique, the chunk's element count, no deltas,
  // a known codec with a payload of the right size, values finite and
  // within kMaxValueMagnitude. On success `values` holds each chunk's
  // values (in the frame for aligned fp32, else decoded into this object's
  // buffers, valid until the next call). On failure `reason` says which
  // check failed; a payload its codec cannot decode (non-finite values in
  // a compressed payload included) is REFUSAL_BAD_PAYLOAD.
  //
  // With `keep` (a push to a BSP shard, which holds each gradient until its
  // round closes) every chunk's values go into a buffer of their own that
  // TakeKept hands over: fp32 values are copied in the same pass that
  // checks them, compressed ones decoded straight into it, so the shard
  // reads a pushed value once instead of checking it and then copying it.
  Status ValidateChunks(const ShardState& shard, int server_id, const transport::Message& m,
                        const google::protobuf::RepeatedPtrField<wire::ChunkData>& chunks, wire::Refusal* reason,
                        std::vector<const float*>* values, bool keep = false);
  // Chunk i's buffer from the last ValidateChunks with `keep` (null after
  // the first call for it, or without `keep`).
  std::unique_ptr<float[]> TakeKept(size_t i) { return i < kept_.size() ? std::move(kept_[i]) : nullptr; }

 private:
  // Chunk i's values: `*v` to read them, and `*copy_to` the buffer the
  // check should copy them into as it reads (null when they are in place).
  Status ChunkValues(const transport::Message& m, int i, const wire::ChunkData& c, const std::string& name, bool keep,
                     const float** v, float** copy_to, wire::Refusal* reason);

  std::vector<std::vector<float>> decoded_;  // per chunk of the message being checked
  std::vector<std::unique_ptr<float[]>> kept_;
  std::vector<uint8_t> zstd_scratch_;
};

// What the shard needs to check and apply a request.
struct ShardContext {
  ShardState* shard = nullptr;
  ClockTable* clocks = nullptr;
  int server_id = 0;
  int num_workers = 0;
  RequestDecoder* decoder = nullptr;
  // The job's clocks per worker (JobSpec::ClocksPerWorker): a push's clock
  // is below it, a pull's at most it. 0: not known (only kMaxClock bounds
  // clocks), for tools and tests that have no job.
  int64_t total_clocks = 0;
  // Elastic jobs: the data units (JobSpec::TotalUnits); a push names one
  // below it. 0: not elastic, pushes name none.
  int64_t total_units = 0;
  // The job's regions: an aggregator's id is below it.
  int num_regions = 1;
};

// Membership and clock checks every request of a worker passes first
// (docs/wire.md "Validation"). A worker's id is in [0, num_workers); the
// evaluator's is kEvaluatorId. A clock is in [0, kMaxClock) and, when the
// job's length is known, at most total_clocks (`inclusive`: pulls, which
// may ask for the state after the last clock) or below it (pushes).
// REFUSAL_BAD_SENDER or REFUSAL_BAD_CLOCK in `reason` on failure.
Status CheckMember(const ShardContext& ctx, const wire::Header& h, wire::Refusal* reason);
Status CheckClock(const ShardContext& ctx, int64_t clock, bool inclusive, wire::Refusal* reason);
// REFUSAL_BAD_CLOCK for a push of `worker` at `clock` beyond the live
// window (kPushWindow): a forged push for a far clock would otherwise hold
// memory until that clock (BSP rounds) or shadow the worker's genuine
// push of that clock as a duplicate.
Status CheckPushWindow(const ShardContext& ctx, int worker, int64_t clock, wire::Refusal* reason);

// The outcome of an init or push: refused (status not OK, `reason` set,
// nothing applied) or taken, with the acknowledgement to send.
struct Handled {
  Status status;
  wire::Refusal reason = wire::REFUSAL_UNSPECIFIED;
  wire::Header reply;      // the ack, request id set
  bool completed = false;  // a worker's clock completed here (held pulls may be served)
  uint32_t taken = 0;      // ApplyReplicate: chunks of the replicated push applied (APPLIED) here
};

Handled ApplyInit(const ShardContext& ctx, const transport::Message& m);
// An init offer (InitRequest.offer: digests, no payloads): which chunks the
// worker should send, offer again, or already holds (server/init_offers.h).
Handled ApplyInitOffer(const ShardContext& ctx, InitOffers& offers, const transport::Message& m, TimePoint now);
// A worker's push, or a regional aggregator's combined push
// (PushRequest.covers, BSP jobs): each covered worker in the job, of the
// aggregator's region and within the live window, chunks as a worker's;
// REFUSAL_PARTLY_TAKEN when a chunk took the clock from some but not all
// of them. Nothing of a refused push is applied.
Handled ApplyPush(const ShardContext& ctx, const transport::Message& m);
// The workers a push counts for: its covers, or its sender.
std::vector<int> PushedBy(const wire::Header& h);

// Replication (replication.backups 1, docs/reliability.md).
//
// Primary side: the op that replays a request the primary took (an init or
// a push, validated and applied), or a live-set change (`live`, `clocks` as
// given to ClockTable::SetLive), as sequence number `seq`. Payload frames go
// separately: TakeFrames(m) hands the request's frames over zero-copy.
wire::Header ReplicateOp(uint64_t seq, const transport::Message& taken);
wire::Header ReplicateMembership(uint64_t seq, const std::vector<int>& live, const std::vector<int64_t>& clocks);
std::vector<transport::Payload> TakeFrames(transport::Message& m);

// Backup side: checks and applies one ReplicateRequest. Refused unless it
// comes from this shard's primary (role SERVER, id ctx.server_id), carries
// one op, and its seq is *applied_seq + 1 (REFUSAL_REPLICATION_GAP) or at most
// *applied_seq (a duplicate: acknowledged, nothing applied). The op's init
// or push goes through ApplyInit / ApplyPush as if its worker had sent it,
// so it is validated again; a membership op installs the live set and
// closes rounds. On success `reply` is the ReplicateAck and *applied_seq
// advanced. Consumes m's frames.
Handled ApplyReplicate(const ShardContext& ctx, uint64_t* applied_seq, transport::Message& m);

// Checks a pull request: the sender (a member worker, the evaluator, or a
// tool), its clock (CheckClock, inclusive), no payload, chunk ids owned and
// unique; `reason` says which failed. On success `chunks` holds the chunks
// to read (every owned one when the request names none).
Status ValidatePull(const ShardContext& ctx, const transport::Message& m, wire::Refusal* reason,
                    std::vector<uint32_t>* chunks);

}  // namespace geodesic::server
