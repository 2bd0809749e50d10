// libFuzzer target: a worker's handling of what servers send back
// (worker::PsClient::OnMessage, then WaitPull): pull replies of every
// codec, zstd-compressed or not, full values or changes (delta against
// base_seq) decoded into the worker's parameter buffer or handed over
// zero-copy; push and init acks; error replies. Two shards of 5 chunks over
// 37 values; the client's DEALERs connect to two inproc ROUTERs that never
// answer (the replies come from the input) and are drained after each input.
// Input: records, 0 = a reply
// from shard (next byte % 2) (fuzz_input.h), 1 = RequestPull (a byte:
// clock % 4, 4 = final, 8 = full), 2 = WaitPull (a byte: clock, final,
// 16 = zero-copy), 3 = PushSkipped. WaitPull never blocks (stop is set).
// Invariants: writes stay inside the parameter buffer (ASan); a pull that
// completes leaves every parameter finite; borrowed chunks are whole and
// finite; errors carry messages.
#include <cmath>
#include <memory>

#include "cluster/chunking.h"
#include "tests/fuzz/fuzz_input.h"
#include "worker/ps_client.h"
#include "worker/zmq_shard_links.h"

using namespace geodesic;

namespace {

// One context and two bound ROUTERs for many inputs: a context per input
// cost a reaper and an I/O thread each time (400-800 inputs/s). The ROUTERs
// are bound, so the client's connects complete (a connect to an inproc name
// nobody binds stays pending in the context for good), and Drain() reads
// what the client sent and lets ZeroMQ finish closing its sockets. Closing
// is asynchronous: a descheduled reaper thread lets closed sockets pile up
// towards the context's limit of 1023, so the context is replaced (its
// destructor waits for every close) every kInputsPerContext inputs.
struct Servers {
  static constexpr int kInputsPerContext = 200;
  zmq::context_t ctx{1};
  zmq::socket_t router[2] = {{ctx, zmq::socket_type::router}, {ctx, zmq::socket_type::router}};
  int inputs = 0;
  Servers() {
    for (int s = 0; s < 2; ++s) {
      router[s].set(zmq::sockopt::linger, 0);
      router[s].bind(Endpoint(s));
    }
  }
  static std::string Endpoint(int s) { return "inproc://fuzz-ps-client-" + std::to_string(s); }
  void Drain() {
    zmq::message_t m;
    for (auto& r : router)
      while (r.recv(m, zmq::recv_flags::dontwait)) {
      }
  }
};

Servers& TheServers() {
  static auto servers = std::make_unique<Servers>();
  if (++servers->inputs > Servers::kInputsPerContext) {
    servers.reset();  // closes the ROUTERs, then waits for every socket of the context
    servers = std::make_unique<Servers>();
  }
  return *servers;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Servers& servers = TheServers();
  servers.Drain();
  fuzz::QuietLogs();
  fuzz::Reader in(data, size);
  const cluster::ShardMap map = cluster::PlaceChunks(cluster::ChunkLayout(37, 8), 2);
  wire::RegisterReply assignment;
  *assignment.mutable_shard_map() = map.ToWire();
  for (int s = 0; s < 2; ++s) {
    auto* server = assignment.add_servers();
    server->set_id(s);
    server->set_endpoint(Servers::Endpoint(s));
    server->set_region("r");
  }
  worker::PsClientOptions options;
  options.job = "job";
  transport::TrafficCounters counters;
  FakeClock clock;
  std::unique_ptr<worker::PsClient> made =
      worker::MakePsClient(servers.ctx, options, assignment, {}, &counters, &clock);
  worker::PsClient& client = *made;
  if (Status s = client.Connect(); !s.ok()) fuzz::Fail("inproc connect failed", s);
  const transport::SocketOptions framing{.job = "job", .role = wire::WORKER, .id = 0, .max_message_bytes = 1 << 20};
  std::vector<float> params(client.shard_map().layout.num_params(), 0.0f);
  std::atomic<bool> stop{true};

  for (int records = 0; !in.done() && records < 64; ++records) {
    switch (in.Byte() % 4) {
      case 0: {
        const int shard = in.Byte() % 2;
        transport::Incoming got = transport::DecodeFrames(in.Parts(), /*router=*/false, framing);
        if (got.status.ok()) client.OnMessage(shard, got.message);
        break;
      }
      case 1: {
        const uint8_t b = in.Byte();
        Status s = client.Pull(b % 4, worker::PullOptions{.final = (b & 4) != 0, .full = (b & 8) != 0});
        if (!s.ok()) fuzz::Fail("Pull failed", s);
        break;
      }
      case 2: {
        const uint8_t b = in.Byte();
        std::vector<worker::PulledChunk> borrowed;
        const bool zero_copy = b & 16;
        auto t =
            client.WaitPull((b & 4) != 0 ? worker::kFinalPull : b % 4, {.params = zero_copy ? nullptr : params.data(),
                                                                        .borrowed = zero_copy ? &borrowed : nullptr,
                                                                        .stop = &stop});
        if (!t.ok()) {
          fuzz::CheckRefusal(t.status(), "WaitPull");
          break;
        }
        for (float v : params)
          if (!std::isfinite(v)) fuzz::Fail("a completed pull left a non-finite parameter");
        for (const auto& c : borrowed) {
          if (c.frame.size() != map.layout.Size(c.chunk_id) * sizeof(float))
            fuzz::Fail("a borrowed chunk of the wrong size");
          for (uint64_t i = 0; i < map.layout.Size(c.chunk_id); ++i)
            if (!std::isfinite(c.values()[i])) fuzz::Fail("a borrowed chunk holds a non-finite value");
        }
        break;
      }
      default: {
        Status s = client.Push(in.Byte() % 4, {});
        if (!s.ok()) fuzz::Fail("PushSkipped failed", s);
        break;
      }
    }
  }
  return 0;
}
