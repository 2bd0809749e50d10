// `geodesic bench transport`: push+pull goodput through one real server
// shard process, side by side with raw ZeroMQ moving the same bytes, in the
// same chunking, between two processes.
//
// Geodesic: this process is worker 0 of a one-shard job (a synthetic model
// of the given size). One round = push every chunk's gradient (the shard
// validates it and applies SGD with momentum) + pull every chunk back.
// Raw ZeroMQ: a DEALER sends the same chunks to a ROUTER in another process
// that answers each with a chunk of the same size; nothing is validated or
// computed. Both sides send zero-copy from preallocated buffers. Goodput
// counts payload bytes both ways: 2 x size per round. Rounds of the two
// systems alternate, and each reports its median round, so that machine
// noise hits both alike.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>
#include <zmq.hpp>

#include "bench/bench.h"
#include "bench/stats.h"
#include "cluster/member_client.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/log.h"
#include "deploy/process.h"
#include "transport/message.h"
#include "transport/security.h"
#include "worker/ps_client.h"
#include "worker/zmq_shard_links.h"

namespace geodesic::bench {
namespace {

using json = nlohmann::json;

std::string WaitForFile(const std::string& path, const deploy::Child& child, double timeout_s) {
  for (int i = 0; i < timeout_s * 100; ++i) {
    auto text = ReadFile(path);
    if (text.ok() && !text->empty()) return *text;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "";
}

// Raw ZeroMQ client: sends `bytes` in kChunkBytes messages, all pipelined,
// then receives the same number of equal replies.
class RawClient {
 public:
  RawClient(zmq::context_t& ctx, const std::string& endpoint, int64_t bytes, int64_t chunk)
      : socket_(ctx, zmq::socket_type::dealer), buf_(static_cast<size_t>(bytes)), chunk_(chunk) {
    socket_.set(zmq::sockopt::sndhwm, 100000);
    socket_.set(zmq::sockopt::rcvhwm, 100000);
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(endpoint);
    std::memset(buf_.data(), 1, buf_.size());
  }
  void Round() {
    int64_t n = static_cast<int64_t>(buf_.size());
    int messages = 0;
    for (int64_t off = 0; off < n; off += chunk_, ++messages) {
      size_t len = static_cast<size_t>(std::min<int64_t>(chunk_, n - off));
      zmq::message_t m(buf_.data() + off, len, nullptr, nullptr);  // zero-copy, static buffer
      socket_.send(m, zmq::send_flags::none);
    }
    for (int i = 0; i < messages; ++i) {
      zmq::message_t m;
      (void)socket_.recv(m);
    }
  }

 private:
  zmq::socket_t socket_;
  std::vector<char> buf_;
  int64_t chunk_;
};

// SIGTERM, up to 3 s to exit, then SIGKILL; returns once it has exited.
void StopChild(deploy::Child& c) {
  c.Signal(SIGTERM);
  for (int i = 0; i < 300 && !c.Poll(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  c.Signal(SIGKILL);
  while (!c.Poll()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

struct Cluster {
  std::unique_ptr<deploy::Child> coordinator, server;
  ~Cluster() {
    for (auto* c : {server.get(), coordinator.get()})
      if (c) StopChild(*c);
  }
};

// One shard of a one-shard job, with this process as worker 0 (plaintext, or
// CurveZMQ when the job says so: the coordinator and shard get the secret
// and tokens as the launcher gives them).
struct Rig {
  Cluster cluster;
  transport::TrafficCounters counters;
  std::unique_ptr<cluster::MemberClient> member;
  std::unique_ptr<worker::PsClient> ps;
  std::shared_ptr<float[]> params, grad;
  std::vector<worker::PulledChunk> pulled;
  int64_t clock = 0;

  Status Start(const std::string& exe, const std::string& dir, const JobSpec& job, zmq::context_t& ctx, int64_t floats,
               const std::atomic<bool>* stop) {
    GD_RETURN_IF_ERROR(MakeDirs(dir));
    const std::string job_path = dir + "/job.yaml";
    GD_RETURN_IF_ERROR(WriteFileAtomic(job_path, JobToYaml(job)));
    GD_ASSIGN_OR_RETURN(std::string coord, StartCoordinator(exe, dir, job_path, job));
    cluster::MemberOptions mo;
    GD_RETURN_IF_ERROR(StartServer(exe, dir, job_path, job, coord, mo));
    return Join(ctx, job, coord, floats, mo, stop);
  }

  // The coordinator's endpoint once it is up.
  StatusOr<std::string> StartCoordinator(const std::string& exe, const std::string& dir, const std::string& job_path,
                                         const JobSpec& job) {
    std::filesystem::remove(dir + "/coord");
    std::vector<std::string> cargs = {
        exe, "coordinator", "--job", job_path, "--endpoint-file", dir + "/coord", "--no-evaluator"};
    if (job.security.mode == SecurityMode::kCurve) cargs.insert(cargs.end(), {"--key-file", dir + "/coord.key"});
    cluster.coordinator = std::make_unique<deploy::Child>("coordinator", cargs, dir + "/coordinator.log");
    GD_RETURN_IF_ERROR(cluster.coordinator->Start());
    std::string coord = WaitForFile(dir + "/coord", *cluster.coordinator, 20);
    if (coord.empty()) return Unavailable("the coordinator did not start; see " + dir + "/coordinator.log");
    return coord;
  }

  // Starts the shard; in a secured job also fills in this worker's CURVE
  // credentials in `mo`.
  Status StartServer(const std::string& exe, const std::string& dir, const std::string& job_path, const JobSpec& job,
                     const std::string& coord, cluster::MemberOptions& mo) {
    std::vector<std::string> sargs = {exe, "server", "--job", job_path, "--id", "0", "--coordinator", coord};
    if (job.security.mode == SecurityMode::kCurve) {
      GD_ASSIGN_OR_RETURN(std::string secret, transport::LoadSecret(job.security.secret_file));
      auto token = [&](const std::string& role) {
        return transport::MintToken(
            secret, {.job = job.name, .role = role, .id = 0, .expiry_unix = transport::UnixNow() + 86400});
      };
      GD_ASSIGN_OR_RETURN(std::string server_token, token("server"));
      GD_RETURN_IF_ERROR(WriteFileAtomic(dir + "/server.token", server_token, false, 0600));
      sargs.insert(sargs.end(), {"--coordinator-key-file", dir + "/coord.key", "--token-file", dir + "/server.token"});
      GD_ASSIGN_OR_RETURN(transport::CurveKeyPair keys, transport::GenerateCurveKeyPair());
      GD_ASSIGN_OR_RETURN(std::string coord_key, ReadFile(dir + "/coord.key"));
      mo.curve = {.keys = keys, .server_key = coord_key};
      GD_ASSIGN_OR_RETURN(mo.token, token("worker"));
    }
    cluster.server = std::make_unique<deploy::Child>("server", sargs, dir + "/server.log");
    return cluster.server->Start();
  }

  // Joins as worker 0 of a synthetic model of `floats` parameters and
  // initializes the shard.
  Status Join(zmq::context_t& ctx, const JobSpec& job, const std::string& coord, int64_t floats,
              cluster::MemberOptions& mo, const std::atomic<bool>* stop) {
    mo.job = job.name;
    mo.role = wire::WORKER;
    mo.id = 0;
    mo.coordinator = coord;
    mo.model.set_name("synthetic");
    mo.model.set_num_params(static_cast<uint64_t>(floats));
    mo.model.set_layout_digest(1);
    mo.timing = job.membership;
    mo.max_message_bytes = job.wire.max_message_bytes;
    member = std::make_unique<cluster::MemberClient>(ctx, mo, &counters, RealClock::Get());
    GD_ASSIGN_OR_RETURN(wire::RegisterReply assignment, member->Join(stop));
    member->Start(nullptr);
    worker::PsClientOptions po;
    po.job = job.name;
    po.id = 0;
    po.wire = job.wire;
    po.timing = job.membership;
    ps = worker::MakePsClient(ctx, po, assignment, mo.curve.keys, &counters, RealClock::Get());
    GD_RETURN_IF_ERROR(ps->Connect());
    params = std::shared_ptr<float[]>(new float[floats]);
    grad = std::shared_ptr<float[]>(new float[floats]);
    std::fill(params.get(), params.get() + floats, 0.5f);
    std::fill(grad.get(), grad.get() + floats, 1e-4f);
    return ps->Init(params.get(), stop);
  }

  // One round: the pull goes first and the shard answers each chunk as soon
  // as our push has been applied to it, as a training worker's prefetch does.
  Status Round(const std::atomic<bool>* stop) {
    GD_RETURN_IF_ERROR(ps->Pull(clock + 1, {.after_own_push = true, .max_hold_s = 30}));
    GD_RETURN_IF_ERROR(ps->Push(clock, {.values = grad.get(), .owner = std::shared_ptr<const void>(grad, grad.get())}));
    // Read the pulled values in place, as the raw peer's bytes are.
    GD_ASSIGN_OR_RETURN(worker::PullTiming t, ps->WaitPull(clock + 1, {.borrowed = &pulled, .stop = stop}));
    (void)t;
    GD_ASSIGN_OR_RETURN(double w, ps->WaitAcks(0, stop));
    (void)w;
    ++clock;
    return Status::Ok();
  }

  ~Rig() {
    if (member) member->Stop(true);
  }
};
}  // namespace

Status RunZmqSink(const BenchOptions& options, const std::atomic<bool>* stop) {
  zmq::context_t ctx(1);
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::sndhwm, 100000);
  router.set(zmq::sockopt::rcvhwm, 100000);
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:*");
  GD_RETURN_IF_ERROR(WriteFileAtomic(options.endpoint, router.get(zmq::sockopt::last_endpoint)));
  // Replies come from a buffer as large as the largest round, walked in
  // order, so the raw peer sends distinct (cold) bytes as a shard does, not
  // one cache-hot buffer over and over.
  std::vector<char> reply(size_t{256} << 20, 2);
  size_t offset = 0;
  while (!stop->load()) {
    zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(100));
    } catch (const zmq::error_t&) {
      continue;
    }
    if (!(item.revents & ZMQ_POLLIN)) continue;
    zmq::message_t id, body;
    (void)router.recv(id);
    (void)router.recv(body);
    if (offset + body.size() > reply.size()) offset = 0;
    zmq::message_t out(reply.data() + offset, body.size(), nullptr, nullptr);
    offset += body.size();
    router.send(id, zmq::send_flags::sndmore);
    router.send(out, zmq::send_flags::none);
  }
  return Status::Ok();
}

namespace {

// A one-shard job with a synthetic model of `bytes`, written to `job_path`
// with the overrides applied (the shard reads the same file).
StatusOr<JobSpec> WriteBenchJob(const std::string& job_path, int mb, int64_t bytes, const BenchOptions& options) {
  const int64_t chunk = options.chunk_bytes;
  const std::string job_name = "bench-transport-" + std::to_string(mb);
  GD_RETURN_IF_ERROR(WriteFileAtomic(job_path, "name: " + job_name +
                                                   "\nregions:\n  local: {servers: 1, workers: 1}\n"
                                                   "model: {name: synthetic, synthetic_params: " +
                                                   std::to_string(bytes / 4) +
                                                   "}\n"
                                                   "training: {staleness_bound: inf, steps: 1000000000}\n"
                                                   "wire: {chunk_bytes: " +
                                                   std::to_string(chunk) + ", message_bytes: " + std::to_string(chunk) +
                                                   ", max_message_bytes: " + std::to_string(chunk * 2) +
                                                   "}\n"
                                                   "membership: {heartbeat_ms: 200, lease_ms: 60000}\n"));
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(job_path, options.overrides));
  GD_RETURN_IF_ERROR(WriteFileAtomic(job_path, JobToYaml(job)));
  return job;
}

// The plain shard and, with --curve, the same job with security.mode curve
// in its own coordinator and shard, measured in the same rounds.
StatusOr<std::vector<std::unique_ptr<Rig>>> StartRigs(const std::string& exe, const std::string& dir,
                                                      const JobSpec& job, zmq::context_t& ctx, int64_t floats,
                                                      bool curve, const std::atomic<bool>* stop) {
  std::vector<std::unique_ptr<Rig>> rigs;
  rigs.push_back(std::make_unique<Rig>());
  GD_RETURN_IF_ERROR(rigs.back()->Start(exe, dir + "/plain", job, ctx, floats, stop));
  if (curve) {
    JobSpec secured = job;
    secured.name = job.name + "-curve";
    secured.security.mode = SecurityMode::kCurve;
    secured.security.secret_file = dir + "/secret";
    if (!std::filesystem::exists(secured.security.secret_file))
      GD_RETURN_IF_ERROR(transport::CreateSecretFile(secured.security.secret_file));
    rigs.push_back(std::make_unique<Rig>());
    GD_RETURN_IF_ERROR(rigs.back()->Start(exe, dir + "/curve", secured, ctx, floats, stop));
  }
  return rigs;
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Alternating rounds of the raw peer and each rig, after two warm-up rounds
// (page faults, TCP windows): the record of one size.
StatusOr<json> Measure(std::vector<std::unique_ptr<Rig>>& rigs, RawClient& raw, int64_t bytes,
                       const BenchOptions& options, const std::atomic<bool>* stop) {
  for (int i = 0; i < 2; ++i) {
    for (auto& rig : rigs) GD_RETURN_IF_ERROR(rig->Round(stop));
    raw.Round();
  }
  std::vector<double> theirs;
  std::vector<std::vector<double>> ours(rigs.size());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(2 * options.seconds);
  while ((std::chrono::steady_clock::now() < deadline || theirs.size() < 5) && theirs.size() < 2000) {
    if (stop->load()) return Cancelled("interrupted");
    auto t0 = std::chrono::steady_clock::now();
    raw.Round();
    theirs.push_back(SecondsSince(t0));
    for (size_t i = 0; i < rigs.size(); ++i) {
      auto t1 = std::chrono::steady_clock::now();
      GD_RETURN_IF_ERROR(rigs[i]->Round(stop));
      ours[i].push_back(SecondsSince(t1));
    }
  }
  double moved = 2.0 * static_cast<double>(bytes);
  double g = moved / UpperMedian(ours[0]) / 1e9, r = moved / UpperMedian(theirs) / 1e9;
  json rec = {{"bytes", bytes}, {"geodesic_gbps", g},      {"raw_zmq_gbps", r},
              {"ratio", g / r}, {"rounds", theirs.size()}, {"chunk_bytes", options.chunk_bytes}};
  if (options.curve) {
    double c = moved / UpperMedian(ours[1]) / 1e9;
    rec["curve_gbps"] = c;
    rec["curve_vs_plain"] = c / g;
  }
  return rec;
}

void PrintRecords(const json& records, bool curve) {
  std::printf("%10s %16s %16s %8s", "size", "geodesic GB/s", "raw ZeroMQ GB/s", "ratio");
  if (curve) std::printf(" %14s %14s", "curve GB/s", "curve/plain");
  std::printf("\n");
  for (const auto& r : records) {
    std::printf("%7lld MB %16.2f %16.2f %8.2f", static_cast<long long>(r["bytes"].get<int64_t>() >> 20),
                r["geodesic_gbps"].get<double>(), r["raw_zmq_gbps"].get<double>(), r["ratio"].get<double>());
    if (curve) std::printf(" %14.3f %14.3f", r["curve_gbps"].get<double>(), r["curve_vs_plain"].get<double>());
    std::printf("\n");
  }
  std::printf("GB/s = 10^9 payload bytes per second, push + pull (both directions) through one shard on loopback.\n");
}

// Removes the bench's temporary directory.
struct TempDir {
  std::string path;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// Stops the raw peer when the bench ends.
struct StopOnExit {
  deploy::Child& child;
  ~StopOnExit() { StopChild(child); }
};

}  // namespace

Status RunTransportBench(const BenchOptions& options, const std::atomic<bool>* stop) {
  const std::string exe = options.binary.empty() ? deploy::SelfBinary() : options.binary;
  char tmpl[] = "/tmp/geodesic-bench-XXXXXX";
  const TempDir tmp{::mkdtemp(tmpl)};
  const std::string& dir = tmp.path;
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);

  // The raw peer lives for the whole bench.
  deploy::Child sink("zmq-sink", {exe, "bench", "zmq-sink", "--endpoint", dir + "/sink.endpoint"}, dir + "/sink.log");
  GD_RETURN_IF_ERROR(sink.Start());
  std::string sink_endpoint = WaitForFile(dir + "/sink.endpoint", sink, 20);
  if (sink_endpoint.empty()) return Unavailable("the raw ZeroMQ peer did not start");
  const StopOnExit stop_sink{sink};

  zmq::context_t ctx(1);
  json records = json::array();
  for (int mb : options.sizes_mb) {
    if (stop->load()) return Cancelled("interrupted");
    const int64_t bytes = int64_t{mb} << 20;
    GD_ASSIGN_OR_RETURN(JobSpec job, WriteBenchJob(dir + "/job-" + std::to_string(mb) + ".yaml", mb, bytes, options));
    GD_ASSIGN_OR_RETURN(auto rigs, StartRigs(exe, dir, job, ctx, bytes / 4, options.curve, stop));
    RawClient raw(ctx, sink_endpoint, bytes, options.chunk_bytes);
    GD_ASSIGN_OR_RETURN(json rec, Measure(rigs, raw, bytes, options, stop));
    records.push_back(rec);
    for (auto& rig : rigs)
      if (rig->ps->Stats().pushes_refused)
        return Internal("the shard refused bench pushes; see " + dir + "/*/server.log");
  }
  if (options.json) {
    std::cout << records.dump(2) << std::endl;
  } else {
    PrintRecords(records, options.curve);
  }
  return Status::Ok();
}

}  // namespace geodesic::bench
