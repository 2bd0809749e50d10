// Writes the seed corpus of the message fuzz targets: small, valid
// conversations in the record format of fuzz_input.h (an init then pushes
// and pulls for the shard; registrations and heartbeats for the
// coordinator; pull replies of several codecs, full and delta, for the
// worker client; the examples/ job files for the parser). The files in
// tests/fuzz/corpus/ came from `fuzz_message_seeds tests/fuzz/corpus`.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cluster/chunking.h"
#include "common/build_paths.h"
#include "compression/codec.h"
#include "transport/message.h"

using namespace geodesic;

namespace {

using Bytes = std::vector<uint8_t>;

struct Frame {
  Bytes bytes;
};

Bytes Serialize(wire::Header h, size_t payload_frames, wire::Role role, int id) {
  h.set_protocol(transport::kProtocolVersion);
  h.set_job("job");
  h.set_sender_role(role);
  h.set_sender_id(id);
  h.set_payload_frames(static_cast<uint32_t>(payload_frames));
  std::string s = h.SerializeAsString();
  return Bytes(s.begin(), s.end());
}

// A message record (fuzz_input.h): kind 0, part count, parts.
void AddMessage(Bytes* out, bool router, const Bytes& header, const std::vector<Bytes>& frames) {
  std::vector<Bytes> parts;
  if (router) parts.push_back({'p', 'e', 'e', 'r'});
  parts.push_back(header);
  parts.insert(parts.end(), frames.begin(), frames.end());
  out->push_back(static_cast<uint8_t>(parts.size() - 1));
  for (const Bytes& p : parts) {
    out->push_back(static_cast<uint8_t>(p.size() & 0xff));
    out->push_back(static_cast<uint8_t>(p.size() >> 8));
    out->insert(out->end(), p.begin(), p.end());
  }
}

// Encodes n values (value i = scale * (i % 5 - 2)) with `codec` into a ChunkData and a frame.
Bytes Encode(const std::string& codec, uint32_t chunk, uint64_t n, float scale, wire::ChunkData* d) {
  auto spec = compression::ParseCodecSpec(codec);
  if (!spec.ok()) std::abort();
  std::vector<float> x(n);
  for (uint64_t i = 0; i < n; ++i) x[i] = scale * static_cast<float>(static_cast<int>(i % 5) - 2);
  compression::Encoder enc(*spec, 7);
  Bytes out;
  compression::PayloadInfo info;
  if (!enc.Encode(x.data(), n, &out, &info, nullptr).ok()) std::abort();
  d->set_chunk_id(chunk);
  d->set_num_elems(n);
  info.ToWire(d);
  return out;
}

void Write(const std::string& dir, const std::string& name, const Bytes& b) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/" + name, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// The shard of fuzz_shard.cc with setup byte `setup`: init, pushes of both
// workers at clocks 0 and 1 with `codec`, a pull, a membership change.
Bytes ShardConversation(uint8_t setup, const std::string& codec) {
  const cluster::ChunkLayout layout(37, 1 + (setup & 7) * 2);
  const std::vector<uint32_t> owned = cluster::PlaceChunks(layout, 2).ChunksOf(0);
  Bytes out = {setup};
  auto chunks_message = [&](bool init, int worker, int64_t clock, const std::string& c) {
    wire::Header h;
    std::vector<Bytes> frames;
    auto* chunks = init ? h.mutable_init_request()->mutable_chunks() : h.mutable_push_request()->mutable_chunks();
    if (!init) h.mutable_push_request()->set_clock(clock);
    for (uint32_t id : owned) frames.push_back(Encode(c, id, layout.Size(id), init ? 0.5f : 0.01f, chunks->Add()));
    out.push_back(0);
    AddMessage(&out, true, Serialize(h, frames.size(), wire::WORKER, worker), frames);
  };
  chunks_message(true, 0, 0, "fp32");
  for (int64_t clock : {0, 1})
    for (int w : {0, 1}) chunks_message(false, w, clock, codec);
  wire::Header pull;
  pull.mutable_pull_request()->set_clock(1);
  out.push_back(0);
  AddMessage(&out, true, Serialize(pull, 0, wire::WORKER, 0), {});
  wire::Header skip;
  skip.mutable_push_request()->set_clock(2);
  skip.mutable_push_request()->set_skipped(true);
  out.push_back(0);
  AddMessage(&out, true, Serialize(skip, 0, wire::WORKER, 1), {});
  // A fragment clock (training.fragments): worker 0 skips its chunks by name.
  wire::Header some = skip;
  for (uint32_t id : owned) {
    auto* d = some.mutable_push_request()->add_chunks();
    d->set_chunk_id(id);
    d->set_num_elems(layout.Size(id));
  }
  out.push_back(0);
  AddMessage(&out, true, Serialize(some, 0, wire::WORKER, 0), {});
  out.insert(out.end(), {1, 1});  // worker 1 leaves
  return out;
}

Bytes CoordinatorConversation(bool with_evaluator) {
  Bytes out;
  auto add = [&](const wire::Header& h, wire::Role role, int id) {
    out.push_back(0);
    AddMessage(&out, true, Serialize(h, 0, role, id), {});
  };
  for (int s = 0; s < 2; ++s) {
    wire::Header h;
    h.mutable_register_request()->set_endpoint("tcp://127.0.0.1:" + std::to_string(7000 + s));
    h.mutable_register_request()->set_pid(100 + s);
    add(h, wire::SERVER, s);
  }
  for (int w = 0; w < 2; ++w) {
    wire::Header h;
    auto* m = h.mutable_register_request()->mutable_model();
    m->set_name("cnn");
    m->set_num_params(185000);
    m->set_layout_digest(42);
    h.mutable_register_request()->set_pid(200 + w);
    add(h, wire::WORKER, w);
  }
  for (int w = 0; w < 2; ++w) {
    wire::Header h;
    h.mutable_heartbeat()->set_clock(3);
    h.mutable_heartbeat()->set_done(w == 1);
    add(h, wire::WORKER, w);
  }
  wire::Header status;
  status.mutable_status_request();
  add(status, wire::CLIENT, 0);
  out.insert(out.end(), {1, 0x10, 0x27});  // 10 s pass: leases expire
  if (with_evaluator) {
    wire::Header h;
    h.mutable_register_request()->mutable_model()->set_num_params(185000);
    add(h, wire::EVALUATOR, 0);
    wire::Header leave;
    leave.mutable_leave_request();
    add(leave, wire::EVALUATOR, 0);
  }
  return out;
}

// fuzz_ps_client.cc's client: pull clock 0 (full), replies of both shards
// with `codec`, wait; then pull clock 1 answered with changes (delta) and wait.
Bytes PsClientConversation(const std::string& codec, bool zero_copy) {
  const cluster::ShardMap map = cluster::PlaceChunks(cluster::ChunkLayout(37, 8), 2);
  Bytes out;
  auto replies = [&](int64_t clock, bool delta, const std::string& c) {
    for (int s = 0; s < 2; ++s) {
      wire::Header h;
      auto* r = h.mutable_pull_reply();
      r->set_clock(clock);
      std::vector<Bytes> frames;
      for (uint32_t id : map.ChunksOf(s)) {
        auto* d = r->add_chunks();
        frames.push_back(Encode(c, id, map.layout.Size(id), delta ? 0.25f : 1.0f, d));
        d->set_version(static_cast<uint64_t>(clock + 1));
        if (delta) {
          d->set_delta(true);
          d->set_base_seq(0);
        }
      }
      out.insert(out.end(), {0, static_cast<uint8_t>(s)});
      AddMessage(&out, false, Serialize(h, frames.size(), wire::SERVER, s), frames);
    }
  };
  out.insert(out.end(), {1, 8});  // RequestPull(0, full)
  replies(0, false, zero_copy ? "fp32" : codec);
  out.insert(out.end(), {2, static_cast<uint8_t>(zero_copy ? 16 : 0)});  // WaitPull(0)
  if (zero_copy) return out;
  out.insert(out.end(), {1, 1});  // RequestPull(1)
  replies(1, true, codec);
  out.insert(out.end(), {2, 1});  // WaitPull(1)
  out.insert(out.end(), {3, 1});  // PushSkipped(1): request id 5
  wire::Header ack;
  ack.set_request_id(5);
  ack.mutable_push_ack()->set_clock(1);
  ack.mutable_push_ack()->set_result(wire::APPLIED);
  out.insert(out.end(), {0, 0});
  AddMessage(&out, false, Serialize(ack, 0, wire::SERVER, 0), {});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_message_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  // Framing: a push with one frame, to a ROUTER (flags 1) and a DEALER.
  {
    wire::Header h;
    h.mutable_push_request()->set_clock(4);
    wire::ChunkData* d = h.mutable_push_request()->add_chunks();
    Bytes frame = Encode("fp32", 0, 6, 1.0f, d);
    for (uint8_t flags : {0, 1}) {
      Bytes b = {flags, 0x00, 0x04};  // a limit of 1 MiB
      AddMessage(&b, flags & 1, Serialize(h, 1, wire::WORKER, 0), {frame});
      Write(dir + "/frames", "push" + std::to_string(flags), b);
    }
    wire::Header status;
    status.mutable_status_request();
    Bytes b = {3, 0x01, 0x00};  // any job, a 1 KiB limit
    AddMessage(&b, true, Serialize(status, 0, wire::CLIENT, 0), {});
    Write(dir + "/frames", "status", b);
  }
  // Setup bytes: chunk size 9 / 3 / 15, BSP / async, sgd / adam, cosine.
  Write(dir + "/shard", "bsp_fp32", ShardConversation(0x04, "fp32"));
  Write(dir + "/shard", "async_int8", ShardConversation(0x08 | 0x20 | 0x01, "int8:block=8"));
  Write(dir + "/shard", "adam_topk_zstd", ShardConversation(0x10 | 0x40 | 0x80 | 0x07, "topk:0.3+zstd:1"));
  Write(dir + "/shard", "async_fp16", ShardConversation(0x18 | 0x03, "fp16"));
  Write(dir + "/coordinator", "rendezvous", CoordinatorConversation(false));
  Write(dir + "/coordinator", "evaluator", CoordinatorConversation(true));
  Write(dir + "/ps_client", "int8", PsClientConversation("int8:block=8", false));
  Write(dir + "/ps_client", "topk_zstd", PsClientConversation("topk:0.5+zstd:1", false));
  Write(dir + "/ps_client", "sign", PsClientConversation("sign:block=8", false));
  Write(dir + "/ps_client", "zero_copy", PsClientConversation("fp32", true));
  for (const char* name : {"fashion_mnist", "three_regions"}) {
    std::ifstream f(SourcePath(std::string("examples/") + name + ".yaml"), std::ios::binary);
    Bytes b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (b.empty()) return 1;
    Write(dir + "/job", name, b);
  }
  Bytes overrides;
  for (const char* s : {"name: j\n", "training.staleness_bound=0", "wire.max_message_bytes=2000000"}) {
    if (!overrides.empty()) overrides.push_back(0);
    overrides.insert(overrides.end(), s, s + std::strlen(s));
  }
  Write(dir + "/job", "overrides", overrides);
  return 0;
}
