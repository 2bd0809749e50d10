#include "cluster/member_client.h"

#include <unistd.h>

#include "common/log.h"
#include "common/wait.h"

namespace geodesic::cluster {

MemberClient::MemberClient(zmq::context_t& ctx, MemberOptions options, transport::TrafficCounters* counters,
                           const Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      socket_(ctx, zmq::socket_type::dealer,
              transport::SocketOptions{.job = options_.job,
                                       .role = options_.role,
                                       .id = options_.id,
                                       .max_message_bytes = options_.max_message_bytes,
                                       .curve = options_.curve},
              counters) {}

MemberClient::~MemberClient() { Stop(true); }

wire::Header MemberClient::RegisterHeader() const {
  wire::Header h;
  auto* r = h.mutable_register_request();
  r->set_endpoint(options_.endpoint);
  r->set_region(options_.region);
  r->set_pid(::getpid());
  *r->mutable_model() = options_.model;
  r->set_token(options_.token);
  return h;
}

StatusOr<wire::RegisterReply> MemberClient::Join(const std::atomic<bool>* stop) {
  GD_RETURN_IF_ERROR(socket_.Connect(options_.coordinator));
  const Duration deadline = std::chrono::seconds(options_.timing.rendezvous_timeout_s);
  WaitReporter report(clock_, std::chrono::seconds(options_.timing.report_after_s));
  TimePoint start = clock_->Now();
  TimePoint last_send{};
  std::string waiting_for = "an answer from the coordinator at " + options_.coordinator;
  while (!stop->load()) {
    TimePoint now = clock_->Now();
    if (now - start > deadline)
      return DeadlineExceeded("start-up rendezvous timed out after " +
                              std::to_string(options_.timing.rendezvous_timeout_s) + " s waiting for " + waiting_for);
    if (now - last_send > std::chrono::milliseconds(1000)) {
      wire::Header h = RegisterHeader();
      h.set_request_id(next_request_++);
      Status s = socket_.Send(h, {});
      if (!s.ok()) GD_LOG(WARNING) << "registration: " << s;
      last_send = now;
    }
    if (report.Due())
      GD_LOG(INFO) << "start-up: waited " << static_cast<int>(report.ElapsedSeconds()) << " s for " << waiting_for
                   << transport::DescribeEndpointHost(options_.coordinator);
    if (!socket_.WaitReadable(100)) continue;
    while (auto in = socket_.Receive()) {
      if (!in->status.ok()) {
        GD_LOG(WARNING) << "coordinator sent a malformed message: " << in->status;
        continue;
      }
      const wire::Header& h = in->message.header;
      if (h.has_error_reply() && transport::FromWire(h.error_reply().code()) == Code::kAlreadyExists) {
        // Our predecessor (we are its restart) still holds the lease: it
        // runs out within lease_ms, then we are admitted.
        waiting_for = "the previous holder's lease to run out (" + h.error_reply().message() + ")";
        last_send = clock_->Now() - std::chrono::milliseconds(800);
        continue;
      }
      if (h.has_error_reply())
        return Status(transport::FromWire(h.error_reply().code()),
                      "coordinator refused registration: " + h.error_reply().message());
      if (!h.has_register_reply()) continue;
      const auto& r = h.register_reply();
      if (r.ready()) {
        MutexLock lock(mu_);
        last_reply_ = clock_->Now();
        map_version_ = r.shard_map().version();
        return r;
      }
      waiting_for = r.waiting_for() + " to register";
      // Not ready: ask again soon, but not in a tight loop.
      last_send = clock_->Now() - std::chrono::milliseconds(800);
    }
  }
  return Cancelled("stopped while joining");
}

void MemberClient::Start(std::function<void(wire::Heartbeat*)> fill) {
  fill_ = std::move(fill);
  thread_ = std::thread([this] { Loop(); });
}

void MemberClient::Stop(bool leave) {
  if (!thread_.joinable()) return;
  leave_ = leave;
  stop_ = true;
  thread_.join();
}

MembershipView MemberClient::view() const {
  MutexLock lock(mu_);
  MembershipView v = view_;
  v.seconds_since_reply = Seconds(clock_->Now() - last_reply_);
  return v;
}

Status MemberClient::error() const {
  MutexLock lock(mu_);
  return error_;
}

void MemberClient::Loop() {
  try {
    WaitReporter silent_report(clock_, std::chrono::seconds(options_.timing.report_after_s));
    TimePoint next = clock_->Now();
    while (!stop_.load()) {
      TimePoint now = clock_->Now();
      if (now >= next || nudge_.exchange(false)) {
        SendHeartbeat(now, &silent_report);
        next = now + Millis(options_.timing.heartbeat_ms);
      }
      int wait_ms =
          static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(next - clock_->Now()).count());
      if (!socket_.WaitReadable(std::clamp(wait_ms, 1, 50))) continue;
      while (auto in = socket_.Receive())
        if (in->status.ok()) OnReply(in->message.header, &next);
    }
    if (leave_.load()) {
      wire::Header h;
      h.mutable_leave_request();
      (void)socket_.Send(h, {});
      socket_.raw().set(zmq::sockopt::linger, 500);  // let the goodbye leave before close
    }
  } catch (const std::exception& e) {
    MutexLock lock(mu_);
    error_ = Internal(std::string("heartbeat thread: ") + e.what());
    GD_LOG(ERROR) << error_;
  }
}

void MemberClient::SendHeartbeat(TimePoint now, WaitReporter* silent_report) {
  wire::Header h;
  auto* hb = h.mutable_heartbeat();
  if (fill_) fill_(hb);
  hb->set_shard_map_version(map_version_.load());
  hb->set_keys_epoch(keys_installed_);
  hb->set_servers_epoch(servers_epoch_);
  h.set_request_id(next_request_++);
  Status s = socket_.Send(h, {});
  if (!s.ok()) GD_LOG(WARNING) << "heartbeat: " << s;
  double silent;
  {
    MutexLock lock(mu_);
    silent = Seconds(now - last_reply_);
  }
  if (silent * 1000 > options_.timing.lease_ms) {
    if (silent_report->Due())
      GD_LOG(WARNING) << "coordinator at " << options_.coordinator << " unreachable for " << static_cast<int>(silent)
                      << " s";
  } else {
    *silent_report = WaitReporter(clock_, std::chrono::seconds(options_.timing.report_after_s));
  }
}

void MemberClient::OnReply(const wire::Header& h, TimePoint* next) {
  if (h.has_error_reply()) {
    MutexLock lock(mu_);
    error_ = Status(transport::FromWire(h.error_reply().code()), "coordinator: " + h.error_reply().message());
    return;
  }
  if (h.has_register_reply()) {  // answer to a re-registration
    if (h.register_reply().ready() && options_.role == wire::WORKER) rejoin_clock_ = h.register_reply().start_clock();
    return;
  }
  if (!h.has_heartbeat_reply()) return;
  const auto& r = h.heartbeat_reply();
  if (options_.authorize && r.keys_epoch() > keys_installed_) {
    options_.authorize(r);
    keys_installed_ = r.keys_epoch();
    *next = clock_->Now();  // tell the coordinator now: workers wait for it
  }
  if (!r.known()) {
    // Heartbeats queued during a partition all come back unknown at
    // once: register again once per lease period, not once per reply.
    if (clock_->Now() - last_register_ > Millis(options_.timing.lease_ms / 2)) {
      last_register_ = clock_->Now();
      GD_LOG(WARNING) << "coordinator does not know us (lease lost); registering again";
      wire::Header reg = RegisterHeader();
      reg.set_request_id(next_request_++);
      (void)socket_.Send(reg, {});
    }
    return;
  }
  TakeView(r);
  if (options_.on_reply) options_.on_reply(r);
  replies_++;
}

void MemberClient::TakeView(const wire::HeartbeatReply& r) {
  MutexLock lock(mu_);
  last_reply_ = clock_->Now();
  view_.valid = true;
  view_.epoch = r.membership_epoch();
  view_.live.assign(r.live_workers().begin(), r.live_workers().end());
  view_.clocks.assign(r.live_worker_clocks().begin(), r.live_worker_clocks().end());
  view_.done = r.done_workers();
  view_.dead = r.dead_workers();
  view_.job_finished = r.job_finished();
  view_.training_ended = r.training_ended();
  view_.aggregators_down.assign(r.aggregators_down().begin(), r.aggregators_down().end());
  view_.promoted = view_.promoted || r.promoted();
  view_.migration = r.migration();
  if (r.has_shard_map() && r.shard_map().version() > view_.shard_map.version()) {
    view_.shard_map = r.shard_map();
    map_version_ = r.shard_map().version();
  }
  if (r.servers_epoch() > servers_epoch_) {
    servers_epoch_ = r.servers_epoch();
    view_.servers_epoch = r.servers_epoch();
    view_.servers.assign(r.servers().begin(), r.servers().end());
    servers_epoch_pub_ = servers_epoch_;
  }
}

}  // namespace geodesic::cluster
