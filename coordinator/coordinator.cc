#include "coordinator/coordinator.h"

#include "common/files.h"
#include "common/log.h"
#include "coordinator/metrics.h"
#include "proto/stats.pb.h"
#include "proto/stats_json.h"

namespace geodesic::coordinator {

Coordinator::Coordinator(CoordinatorProcessOptions options, zmq::context_t& ctx, const Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      ctx_(ctx),
      guard_(ctx),
      socket_(ctx, zmq::socket_type::router,
              transport::SocketOptions{.job = options_.coordinator.job_name,
                                       .role = wire::COORDINATOR,
                                       .id = 0,
                                       .max_message_bytes = options_.coordinator.max_message_bytes,
                                       .send_timeout_ms = transport::kNeverBlock,
                                       .curve = transport::CurveSocket{.keys = options_.keys, .server_key = {}}},
              &counters_),
      refusals_(clock),
      state_(options_.coordinator, clock),
      store_(options_.state_file, clock, &fds_) {}

void Coordinator::Reply(const transport::Message& request, wire::Header reply) {
  reply.set_request_id(request.header.request_id());
  Status s = socket_.Send(std::move(reply), {}, request.peer);
  if (s.ok()) return;
  // At most one line a second: a peer that never reads fails every reply.
  uint64_t skipped = 0;
  if (failed_reply_log_.Due(clock_->Now(), &skipped))
    GD_LOG(WARNING) << "reply to " << transport::PeerName(request) << " failed: " << s << " (and " << skipped
                    << " more failed replies since the last such line)";
}

// Counts and logs one refusal (rate-limited); false if it goes unanswered.
bool Coordinator::NoteRefusal(const transport::Message& m, const wire::ErrorReply& e) {
  counters_.messages_refused++;
  const transport::RefusalLimiter::Verdict v = refusals_.Note(m.peer, e.reason());
  if (v.log)
    GD_LOG(WARNING) << "refused " << transport::BodyName(m.header) << " from " << transport::PeerName(m) << " ("
                    << transport::RefusalName(e.reason()) << "): " << e.message()
                    << transport::UnloggedNote(v.unlogged, e.reason());
  if (v.muted) GD_LOG(WARNING) << transport::MutedNote(transport::PeerName(m), refusals_.limits());
  return v.answer;
}

void Coordinator::Handle(transport::Message& m) {
  bool refused = false;
  std::optional<wire::Header> reply = state_.Answer(m.header, m.peer_key, &refused);
  if (refused && reply && !NoteRefusal(m, reply->error_reply())) return;
  // A key bound at registration is saved before the member learns it is
  // in: a coordinator restarted from a state without it would let another
  // key speak for that member.
  if (state_.secure() && m.header.has_register_request() && !refused) store_.Save(state_, true);
  if (reply) Reply(m, std::move(*reply));
}

stats::CoordinatorStats Coordinator::Stats() const {
  stats::CoordinatorStats j;
  j.set_role("coordinator");
  j.set_bytes_sent(counters_.bytes_sent.load());
  j.set_bytes_received(counters_.bytes_received.load());
  j.set_messages_refused(counters_.messages_refused.load());
  for (const auto& [reason, n] : refusals_.by_reason())
    (*j.mutable_refused_by_reason())[transport::RefusalName(reason)] = n;
  j.set_refusals_unanswered(refusals_.unanswered());
  j.set_sends_dropped(counters_.sends_dropped.load());
  if (zap_) j.set_handshakes_refused(guard_.handshake_failures());
  j.set_connections_limited(guard_.refused());
  j.set_training_seconds(state_.training_seconds());
  if (!state_.plan_note().empty()) {
    j.mutable_plan()->set_note(state_.plan_note());
    j.mutable_plan()->set_predicted_step_ms(state_.planned_step_ms());
    if (auto m = state_.shard_map())
      for (uint64_t b : m->BytesPerServer(options_.coordinator.num_servers)) j.mutable_plan()->add_bytes_per_server(b);
  }
  if (options_.coordinator.replan.enabled) {
    for (const auto& r : state_.replans()) {
      stats::Replan& out = *j.add_replans();
      out.set_id(r.id);
      out.set_clock(r.clock);
      out.set_reason(r.reason);
      for (const auto& d : r.drifted) out.add_drifted(d);
      out.set_moved_chunks(r.moves.size());
      for (const auto& mv : r.moves) {
        stats::ChunkMove& m = *out.add_moves();
        m.set_chunk(mv.chunk);
        m.set_from(mv.from);
        m.set_to(mv.to);
      }
      out.set_predicted_step_ms_before(r.predicted_step_ms_before);
      out.set_predicted_step_ms_after(r.predicted_step_ms_after);
      out.set_barrier_ms(r.barrier_ms);
      out.set_transfer_ms(r.transfer_ms);
      out.set_shard_map_version(r.map_version);
    }
    if (auto m = state_.shard_map()) j.set_shard_map_version(m->version);
  }
  j.set_job_finished(state_.job_finished());
  if (state_.elastic()) {
    j.set_units_total(state_.units().total());
    j.set_units_finished(state_.units().finished());
    j.set_units_reissued(state_.units().reissued());
    for (const auto& e : state_.membership_events()) *j.add_membership() = e;
  }
  j.set_failovers(static_cast<uint32_t>(state_.promotions()));
  return j;
}

void Coordinator::WriteStats() const {
  const stats::CoordinatorStats j = Stats();
  if (metrics_.serving())
    metrics_.Publish(CoordinatorMetrics(
        j, {.job = options_.coordinator.job_name, .region = options_.region, .role = "coordinator", .id = "0"}));
  if (options_.stats_file.empty()) return;
  const std::string text = StatsToJson(j);
  Status s = fds_.Spend([&] { return WriteFileAtomic(options_.stats_file, text, /*durable=*/false); });
  if (!s.ok()) GD_LOG(WARNING) << s;
}

Status Coordinator::Listen() {
  if (!options_.keys.secret_key.empty()) {
    if (options_.coordinator.secret.empty()) return FailedPrecondition("a secured coordinator needs the job secret");
    zap_ = std::make_unique<transport::ZapHandler>(ctx_, /*admit_any=*/true);
    GD_RETURN_IF_ERROR(zap_->Start());
    if (!options_.key_file.empty()) GD_RETURN_IF_ERROR(WriteFileAtomic(options_.key_file, options_.keys.public_key));
  }
  GD_RETURN_IF_ERROR(guard_.Watch(socket_.raw()));
  GD_RETURN_IF_ERROR(socket_.Bind(options_.bind));
  GD_LOG(INFO) << "listening on " << socket_.endpoint() << " for " << options_.coordinator.num_servers
               << " servers and " << options_.coordinator.num_workers << " workers";
  if (!options_.endpoint_file.empty()) GD_RETURN_IF_ERROR(WriteFileAtomic(options_.endpoint_file, socket_.endpoint()));
  return Status::Ok();
}

void Coordinator::ReceiveAll() {
  if (!socket_.WaitReadable(50)) return;
  for (int i = 0; i < 256; ++i) {
    auto in = socket_.Receive();
    if (!in) break;
    if (!in->status.ok()) {
      // Framing refusals: counted by the socket, logged here, never answered
      // (the sender may not be a member at all).
      wire::ErrorReply e;
      e.set_reason(in->refusal);
      e.set_message(in->status.message());
      (void)NoteRefusal(in->message, e);
      counters_.messages_refused--;  // the socket already counted it
      continue;
    }
    Handle(in->message);
  }
}

void Coordinator::Step(WaitReporter* rendezvous) {
  for (const auto& line : state_.ExpireLeases()) GD_LOG(WARNING) << line;
  if (options_.replan_requests && options_.replan_requests->load() != seen_replan_requests_) {
    seen_replan_requests_ = options_.replan_requests->load();
    state_.RequestReplan("requested (geodesic wan replan)");
  }
  for (const auto& line : state_.Tick()) GD_LOG(INFO) << line;
  store_.Save(state_, false);
  if (!state_.started() && rendezvous->Due())
    GD_LOG(INFO) << "start-up: waiting " << static_cast<int>(rendezvous->ElapsedSeconds()) << " s for "
                 << state_.WaitingFor() << " to register";
  // An elastic job whose workers are all gone with units left waits for one.
  uint64_t skipped = 0;
  if (state_.elastic() && state_.started() && !state_.units().complete() && state_.LiveWorkers() == 0 &&
      idle_report_.Due(clock_->Now(), &skipped))
    GD_LOG(WARNING) << "no live worker and " << state_.units().total() - state_.units().finished()
                    << " data unit(s) left: waiting for a worker to join";
  if (state_.started() && !announced_start_) {
    announced_start_ = true;
    auto bytes = state_.shard_map()->BytesPerServer(options_.coordinator.num_servers);
    std::string per;
    for (size_t i = 0; i < bytes.size(); ++i) per += (i ? ", " : "") + std::to_string(bytes[i] / 1024) + " KiB";
    GD_LOG(INFO) << "all members registered; " << state_.shard_map()->layout.num_chunks() << " chunks placed (" << per
                 << " per server); training starts";
  }
}

bool Coordinator::Finished(TimePoint now) {
  if (!state_.job_finished()) return false;
  if (!finished_since_) {
    finished_since_ = now;
    GD_LOG(INFO) << "job finished after " << state_.training_seconds() << " s of training";
  }
  // Give servers and aggregators a few heartbeats to hear it and leave (an
  // aggregator that never heard it would wait for a coordinator that is
  // gone; a rendered host's script waited for it).
  return state_.serving_members_left() || now - *finished_since_ > Millis(2 * options_.coordinator.membership.lease_ms);
}

Status Coordinator::Run(const std::atomic<bool>* stop) {
  GD_RETURN_IF_ERROR(store_.Load(&state_, options_.coordinator.membership.lease_ms));
  GD_RETURN_IF_ERROR(Listen());
  GD_RETURN_IF_ERROR(metrics_.Start(options_.http, [] { return true; }));
  WriteStats();
  WaitReporter rendezvous(clock_, std::chrono::seconds(options_.coordinator.membership.report_after_s));
  TimePoint last_stats = clock_->Now();
  while (!stop->load()) {
    ReceiveAll();
    Step(&rendezvous);
    TimePoint now = clock_->Now();
    if (now - last_stats > std::chrono::seconds(2)) {
      WriteStats();
      last_stats = now;
    }
    if (Finished(now)) break;
  }
  store_.Save(state_, true);
  WriteStats();
  metrics_.Linger(options_.http, /*finished=*/true);
  return Status::Ok();
}

}  // namespace geodesic::coordinator
