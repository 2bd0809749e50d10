// libFuzzer target: the coordinator's request handling without a socket.
// Each message goes through the framing checks (transport::DecodeFrames, as from
// a ROUTER) and then CoordinatorState::Answer, what coordinator::Coordinator does
// with it; time is a FakeClock. Input: records, 0 = a message
// (fuzz_input.h), 1 = time passes (2 bytes, in ms) and leases expire.
// Invariants: every request but a LeaveRequest is answered; a refusal is an
// ErrorReply with a message; a register reply that says ready carries a
// shard map that a member accepts (cluster::ShardMap::FromWire); the status reply
// lists every member. Memory stays bounded (a model of 2^60 parameters is
// refused, not allocated).
#include "coordinator/coordinator.h"
#include "tests/fuzz/fuzz_input.h"

using namespace geodesic;
using namespace geodesic::coordinator;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::QuietLogs();
  fuzz::Reader in(data, size);
  CoordinatorOptions o;
  o.job_name = "job";
  o.num_servers = 2;
  o.num_workers = 2;
  o.chunk_bytes = 4096;
  o.staleness_bound = 1;
  FakeClock clock;
  CoordinatorState state(o, &clock);
  const transport::SocketOptions framing{
      .job = "job", .role = wire::COORDINATOR, .id = 0, .max_message_bytes = 1 << 20};

  for (int records = 0; !in.done() && records < 64; ++records) {
    if (in.Byte() % 2 == 1) {
      clock.Advance(std::chrono::milliseconds(in.U16()));
      (void)state.ExpireLeases();
      continue;
    }
    transport::Incoming got = transport::DecodeFrames(in.Parts(), /*router=*/true, framing);
    if (!got.status.ok()) continue;
    const wire::Header& h = got.message.header;
    bool refused = false;
    std::optional<wire::Header> reply = state.Answer(h, "", &refused);
    if (!reply) {
      if (h.body_case() != wire::Header::kLeaveRequest) fuzz::Fail("a request left unanswered");
      continue;
    }
    if (refused != reply->has_error_reply()) fuzz::Fail("refused without an ErrorReply, or the reverse");
    if (reply->has_error_reply() && reply->error_reply().message().empty())
      fuzz::Fail("an ErrorReply without a message");
    if (reply->has_register_reply() && reply->register_reply().ready()) {
      auto map = cluster::ShardMap::FromWire(reply->register_reply().shard_map(), o.num_servers);
      if (!map.ok()) fuzz::Fail("the coordinator handed out a shard map members refuse", map.status());
      if (reply->register_reply().servers_size() != o.num_servers) fuzz::Fail("register reply without every server");
    }
    wire::StatusReply st = state.Status();
    if (st.workers_size() != o.num_workers || st.servers_size() != o.num_servers)
      fuzz::Fail("status does not list every member");
    (void)state.WaitingFor();
    (void)state.job_finished();
  }
  return 0;
}
