// libFuzzer target: a server shard's request path without a socket. Each
// message goes through the framing checks (transport::DecodeFrames, as from a
// ROUTER: the first part is the routing id) and then through what
// server::Server does with it (ApplyInit, ApplyPush, ValidatePull in
// server/requests.h) against a real ShardState, so decoded gradients are
// really applied or refused.
// Input: a set-up byte (chunk size, staleness bound, optimizer), then
// records: 0 = a message (fuzz_input.h), 1 = a membership change (a live
// mask of the two workers; BSP rounds then close). Invariants: a refused
// request changes nothing in the shard (values, versions, counters,
// clocks taken); parameters stay finite; refusals carry a reason and a message.
#include <cmath>

#include "server/requests.h"
#include "tests/fuzz/fuzz_input.h"

using namespace geodesic;
using namespace geodesic::server;

namespace {

constexpr int kWorkers = 2;

struct Fingerprint {
  std::vector<std::vector<float>> values;
  std::vector<uint64_t> versions;
  std::vector<int64_t> last_clocks;
  uint64_t applied = 0, duplicates = 0, dropped = 0;
  bool open_rounds = false;
  bool operator==(const Fingerprint&) const = default;
};

Fingerprint Take(const ShardState& s) {
  Fingerprint f;
  for (uint32_t c : s.owned()) {
    for (int w = 0; w < kWorkers; ++w) f.last_clocks.push_back(s.LastClock(w, c));
    if (!s.IsInitialized(c)) {
      f.values.emplace_back();
      f.versions.push_back(UINT64_MAX);
      continue;
    }
    auto snap = s.Read(c);
    f.values.emplace_back(snap.values.get(), snap.values.get() + s.layout().Size(c));
    f.versions.push_back(snap.version);
  }
  f.applied = s.updates_applied();
  f.duplicates = s.duplicates();
  f.dropped = s.dropped();
  f.open_rounds = s.HasOpenRounds();
  return f;
}

void CheckFinite(const ShardState& s) {
  for (uint32_t c : s.owned()) {
    if (!s.IsInitialized(c)) continue;
    auto snap = s.Read(c);
    for (uint64_t i = 0; i < s.layout().Size(c); ++i)
      if (!std::isfinite(snap.values[i])) fuzz::Fail("chunk " + std::to_string(c) + " holds a non-finite parameter");
  }
}

void CheckRefused(const Status& s, wire::Refusal reason, const Fingerprint& before, const ShardState& shard) {
  fuzz::CheckRefusal(s, "shard");
  if (reason == wire::REFUSAL_UNSPECIFIED) fuzz::Fail("a refusal without a reason", s);
  if (!(Take(shard) == before))
    fuzz::Fail("a refused request (" + transport::RefusalName(reason) + ") changed the shard", s);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::QuietLogs();
  fuzz::Reader in(data, size);
  const uint8_t setup = in.Byte();
  const cluster::ChunkLayout layout(5 * 8 - 3, 1 + (setup & 7) * 2);  // 37 values, a short last chunk
  const cluster::ShardMap map = cluster::PlaceChunks(layout, 2);
  ShardOptions so;
  const int64_t bounds[] = {0, 1, 3, 1'000'000};
  so.staleness_bound = bounds[(setup >> 3) & 3];
  so.staleness_scaling = setup & 32;
  so.optimizer.name = (setup & 64) ? OptimizerKind::kAdam : OptimizerKind::kSgd;
  so.optimizer.schedule = (setup & 128) ? LrSchedule::kCosine : LrSchedule::kConstant;
  so.total_clocks = 10;
  ShardState shard(so, layout, map.ChunksOf(0));
  ClockTable clocks(so.staleness_bound);
  clocks.SetLive({0, 1}, {0, 0});
  RequestDecoder decoder;
  const ShardContext ctx{
      .shard = &shard, .clocks = &clocks, .server_id = 0, .num_workers = kWorkers, .decoder = &decoder};
  const transport::SocketOptions framing{.job = "job", .role = wire::SERVER, .id = 0, .max_message_bytes = 1 << 20};

  for (int records = 0; !in.done() && records < 64; ++records) {
    if (in.Byte() % 2 == 1) {
      const uint8_t mask = in.Byte();
      std::vector<int> live;
      std::vector<int64_t> known;
      for (int w = 0; w < kWorkers; ++w)
        if (mask & (1 << w)) {
          live.push_back(w);
          known.push_back(clocks.ClockOf(w));
        }
      clocks.SetLive(live, known);
      shard.CloseRounds(clocks);
      CheckFinite(shard);
      continue;
    }
    transport::Incoming got = transport::DecodeFrames(in.Parts(), /*router=*/true, framing);
    if (!got.status.ok()) continue;
    const transport::Message& m = got.message;
    const Fingerprint before = Take(shard);
    switch (m.header.body_case()) {
      case wire::Header::kInitRequest: {
        Handled h = ApplyInit(ctx, m);
        if (!h.status.ok()) CheckRefused(h.status, h.reason, before, shard);
        break;
      }
      case wire::Header::kPushRequest: {
        Handled h = ApplyPush(ctx, m);
        if (!h.status.ok()) {
          CheckRefused(h.status, h.reason, before, shard);
        } else if (!h.reply.has_push_ack()) {
          fuzz::Fail("a push taken without an acknowledgement");
        }
        break;
      }
      case wire::Header::kPullRequest: {
        std::vector<uint32_t> chunks;
        wire::Refusal reason = wire::REFUSAL_UNSPECIFIED;
        Status s = ValidatePull(ctx, m, &reason, &chunks);
        if (!s.ok()) {
          CheckRefused(s, reason, before, shard);
          break;
        }
        for (uint32_t c : chunks)
          if (!shard.Owns(c)) fuzz::Fail("a pull accepted for a chunk not owned here");
        break;
      }
      default:
        break;
    }
    CheckFinite(shard);
  }
  return 0;
}
