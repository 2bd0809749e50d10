#include "worker/real_client.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <thread>

#include "cluster/status_probe.h"
#include "common/log.h"
#include "transport/message.h"
#include "worker/client_executor.h"
#include "worker/dataset.h"
#include "worker/examples.h"
#include "worker/partition.h"

namespace geodesic::worker {
namespace {

using SteadyClock = std::chrono::steady_clock;

// The client's samples (only its own, renumbered 0..m-1 in partition
// order, so that its batches are the executor's) and its trainer.
struct ClientData {
  std::vector<int64_t> indices;
  std::string digest;
  std::unique_ptr<ClientExecutor> exec;
};

// The executors run with OMP_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1 (the
// launcher and the rendered scripts set them), so their BLAS is single
// threaded. A client is started by whoever runs it, and OpenBLAS reads
// those variables only when it loads: without this, its GEMMs ran on every
// core and their sums came out in another order (the bit-for-bit test
// failed on a 2-core machine). The BLAS behind LibTorch is Debian's
// alternative, so the call is looked up, not linked.
void SingleThreadedBlas() {
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(1);
}

StatusOr<ClientData> LoadClient(const RealClientOptions& o) {
  const JobSpec& job = o.job;
  const FederatedSpec& f = job.federated;
  if (!f.enabled() || !f.gateway) return InvalidArgument("the job is not federated with federated.gateway: true");
  if (o.client < 0 || o.client >= f.clients)
    return InvalidArgument("--id " + std::to_string(o.client) + " is not in the population of " +
                           std::to_string(f.clients) + " clients");
  at::set_num_threads(job.training.threads);  // the executors' threads: the same arithmetic
  SingleThreadedBlas();
  GD_ASSIGN_OR_RETURN(ClientSplit own, LoadClientSplit(job, o.client));
  ClientData d;
  d.digest = own.digest;
  d.indices = std::move(own.clients[static_cast<size_t>(o.client)]);
  const LocalOptimizerSpec local{.lr = f.local_lr, .momentum = f.local_momentum, .prox_mu = f.prox_mu};
  GD_ASSIGN_OR_RETURN(d.exec, ClientExecutor::Create(job.model, job.seed, own.examples, own.shape, job.data.batch_size,
                                                     local, job.data.augment));
  GD_LOG(INFO) << "client " << o.client << ": " << d.indices.size() << " "
               << (own.examples.tokens() ? "windows" : "samples") << " (partition digest " << d.digest << ")";
  return d;
}

// Executor k mod E's gateway as the coordinator lists it; nullopt when the
// job has finished first.
StatusOr<std::optional<wire::WorkerStatus>> FindGateway(cluster::StatusProbe& probe, const RealClientOptions& o,
                                                        const std::atomic<bool>* stop) {
  const auto deadline = SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                                 std::chrono::duration<double>(o.join_timeout_s));
  while (!stop->load() && SteadyClock::now() < deadline) {
    if (auto r = probe.Poll()) {
      if (r->job_finished()) return std::optional<wire::WorkerStatus>();
      if (r->workers_size() > 0) {
        const wire::WorkerStatus& w = r->workers(static_cast<int>(o.client % r->workers_size()));
        if (w.live() && !w.gateway_endpoint().empty()) return std::optional<wire::WorkerStatus>(w);
      }
    }
    if (probe.refusal())
      return Unauthenticated("the coordinator refused the status request: " + probe.refusal()->message());
    probe.Wait(200);
  }
  if (stop->load()) return Cancelled("stopped before joining");
  return DeadlineExceeded("no client gateway listed for executor " +
                          std::to_string(o.client % std::max(1, o.job.NumWorkers())) + " within " +
                          std::to_string(o.join_timeout_s) + " s");
}

// A test's bad update in place of the honest one (RealClientOptions::misbehave).
void Misbehave(const std::string& how, wire::ClientUpdate& u, std::vector<float>& delta) {
  if (how == "shape") delta.pop_back();
  if (how == "nan") delta[0] = std::numeric_limits<float>::quiet_NaN();
  if (how == "norm")
    for (float& v : delta) v *= 1e6f;
  if (how == "samples") u.set_samples(u.samples() * 10);
  if (how == "huge") std::fill(delta.begin(), delta.end(), 1e30f);
  if (how == "lowest") std::fill(delta.begin(), delta.end(), std::numeric_limits<float>::lowest());
}

class Session {
 public:
  Session(const RealClientOptions& o, ClientData& d, transport::Socket& socket) : o_(o), d_(d), socket_(socket) {}

  // Hellos every second until a task comes; each task trained and
  // answered. Returns when the client should leave.
  Status Run(cluster::StatusProbe& probe, const std::atomic<bool>* stop, RealClientReport& report) {
    const auto start = SteadyClock::now();
    auto last_reply = start;
    auto last_hello = start - std::chrono::hours(1);
    while (!stop->load()) {
      const auto now = SteadyClock::now();
      if (o_.leave_after_s > 0 && now - start > std::chrono::duration<double>(o_.leave_after_s)) return Bye();
      if (now - last_hello > std::chrono::seconds(1)) {
        wire::Header h;
        h.mutable_client_hello()->set_client(o_.client);
        (void)socket_.Send(std::move(h), {});
        last_hello = now;
      }
      if (auto r = probe.Poll()) {
        last_reply = now;
        if (r->job_finished()) return report.job_finished = true, Status::Ok();
      }
      if (now - last_reply > std::chrono::seconds(10)) return Unavailable("the coordinator stopped answering; leaving");
      if (!socket_.WaitReadable(200)) continue;
      while (auto in = socket_.Receive()) {
        if (!in->status.ok()) continue;
        Status s = Handle(in->message, report);
        if (s.code() == Code::kCancelled) return report.job_finished = true, Status::Ok();  // the executor's bye
        GD_RETURN_IF_ERROR(s);
        last_hello = SteadyClock::now();  // a task answered: no hello needed for a while
        if (o_.max_tasks > 0 && report.tasks >= o_.max_tasks) return Bye();
      }
    }
    return Bye();
  }

 private:
  Status Bye() {
    wire::Header h;
    h.mutable_client_bye()->set_client(o_.client);
    (void)socket_.Send(std::move(h), {});
    return Status::Ok();
  }

  Status Handle(const transport::Message& m, RealClientReport& report) {
    if (m.header.has_error_reply()) {
      const wire::ErrorReply& e = m.header.error_reply();
      if (e.reason() == wire::REFUSAL_NOT_YOUR_CLIENT)
        return PermissionDenied("the gateway refused us: " + e.message());
      if (e.reason() == wire::REFUSAL_UNAUTHORIZED) return Status::Ok();  // our key is not listed yet: hello again
      ++report.refused;
      GD_LOG(WARNING) << "client " << o_.client << ": update refused: " << e.message();
      return Status::Ok();
    }
    if (m.header.has_client_bye()) return Cancelled("the executor is done");
    if (!m.header.has_client_task() || o_.misbehave == "silent") return Status::Ok();
    const wire::ClientTask& t = m.header.client_task();
    if (t.partition_digest() != d_.digest)
      return FailedPrecondition("the executor's partition digest is " + t.partition_digest() + ", ours " + d_.digest +
                                ": another job file or dataset");
    const int64_t n = d_.exec->num_params();
    if (t.num_params() != static_cast<uint64_t>(n) || m.frames.size() != 1 ||
        m.frames[0].size() != static_cast<size_t>(n) * sizeof(float))
      return FailedPrecondition("a task for a model of " + std::to_string(t.num_params()) + " parameters; ours has " +
                                std::to_string(n));
    return Train(m, t.round(), report);
  }

  Status Train(const transport::Message& m, int64_t round, RealClientReport& report) {
    const FederatedSpec& f = o_.job.federated;
    std::vector<float> scratch;
    const float* global = m.FrameFloats(0, &scratch);
    GD_ASSIGN_OR_RETURN(ClientOutcome out, d_.exec->Train(global, {.client = o_.client,
                                                                   .round = round,
                                                                   .indices = &d_.indices,
                                                                   .local_epochs = f.local_epochs,
                                                                   .local_steps = f.local_steps,
                                                                   .eval_samples = f.client_eval_samples}));
    if (!out.finite) {
      GD_LOG(WARNING) << "client " << o_.client << ": round " << round << " diverged; no update sent";
      return Status::Ok();
    }
    wire::Header h;
    wire::ClientUpdate* u = h.mutable_client_update();
    u->set_client(o_.client);
    u->set_round(round);
    u->set_samples(out.samples);
    u->set_mean_loss(out.mean_loss);
    u->set_mean_accuracy(out.mean_accuracy);
    u->set_eval_accuracy(out.eval_accuracy);
    Misbehave(o_.misbehave, *u, out.delta);
    h.set_payload_frames(1);
    GD_RETURN_IF_ERROR(socket_.Send(std::move(h), {transport::CopyPayload(out.delta.data(), out.delta.size() * 4)}));
    ++report.tasks;
    return Status::Ok();
  }

  const RealClientOptions& o_;
  ClientData& d_;
  transport::Socket& socket_;
};

}  // namespace

StatusOr<RealClientReport> RunRealClient(const RealClientOptions& o, zmq::context_t& ctx,
                                         const std::atomic<bool>* stop) {
  GD_ASSIGN_OR_RETURN(ClientData data, LoadClient(o));
  const transport::MemberCredentials& c = o.credentials;
  transport::CurveSocket to_coordinator;
  if (c.enabled()) to_coordinator = {.keys = c.keys, .server_key = c.coordinator_key};
  cluster::StatusProbe probe(ctx, o.job, o.coordinator, to_coordinator, c.token);
  GD_ASSIGN_OR_RETURN(std::optional<wire::WorkerStatus> gateway, FindGateway(probe, o, stop));
  RealClientReport report;
  if (!gateway) return report.job_finished = true, report;
  transport::CurveSocket to_gateway;
  if (c.enabled()) to_gateway = {.keys = c.keys, .server_key = gateway->gateway_key()};
  transport::TrafficCounters counters;
  transport::Socket socket(ctx, zmq::socket_type::dealer,
                           transport::SocketOptions{.job = o.job.name,
                                                    .role = wire::CLIENT,
                                                    .id = static_cast<int32_t>(o.client),
                                                    .max_message_bytes = o.job.wire.max_message_bytes,
                                                    .curve = to_gateway},
                           &counters);
  GD_RETURN_IF_ERROR(socket.Connect(gateway->gateway_endpoint()));
  GD_LOG(INFO) << "client " << o.client << ": executor " << gateway->id() << "'s gateway at "
               << gateway->gateway_endpoint();
  Session session(o, data, socket);
  GD_RETURN_IF_ERROR(session.Run(probe, stop, report));
  // Let the last update and the bye leave before the socket closes.
  socket.raw().set(zmq::sockopt::linger, 2000);
  return report;
}

}  // namespace geodesic::worker
