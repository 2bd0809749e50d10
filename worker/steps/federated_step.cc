#include "worker/steps/federated_step.h"

#include <chrono>

#include "cluster/member_client.h"
#include "common/log.h"
#include "worker/ps_client.h"

namespace geodesic::worker {
namespace {

double UnixNow() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// What a round's report adds to its record.
void Record(const RoundReport& r, stats::RoundStats& rec) {
  rec.set_selected(static_cast<uint32_t>(r.selected));
  rec.set_trained(static_cast<uint32_t>(r.trained));
  rec.set_dropped(static_cast<uint32_t>(r.dropped));
  rec.set_late(static_cast<uint32_t>(r.late));
  rec.set_simulated_seconds(r.seconds);
  rec.set_unusable(static_cast<uint32_t>(r.unusable));
  rec.set_clipped(static_cast<uint32_t>(r.clipped));
  rec.set_samples(static_cast<uint32_t>(r.samples));
  rec.set_compute_seconds(r.compute_seconds);
  rec.set_client_eval_seconds(r.eval_seconds);
  for (float a : r.client_accuracy) rec.add_client_accuracy(a);
  for (int64_t c : r.clients) rec.add_clients(static_cast<uint32_t>(c));
  rec.set_staleness_sum(static_cast<uint32_t>(r.staleness_sum));
  rec.set_client_uplink_bytes(r.uplink_bytes);
  rec.set_refused(static_cast<uint32_t>(r.refused));
  rec.set_real(static_cast<uint32_t>(r.real));
}

}  // namespace

FederatedStep::FederatedStep(StepEnv& env, std::unique_ptr<FlatModel> model, std::unique_ptr<FederatedRounds> rounds,
                             GatewayPlace gateway, transport::TrafficCounters* traffic)
    : ModelStep(env, std::move(model)), rounds_(std::move(rounds)), place_(std::move(gateway)), traffic_(traffic) {}

std::string FederatedStep::ClockName() const {
  return " federated rounds (" + ToString(env_.job.federated.strategy) + ")";
}

Status FederatedStep::BeforeJoin(cluster::MemberOptions& mo) {
  const JobSpec& job = env_.job;
  if (!job.federated.gateway) return Status::Ok();
  gateway_ = std::make_unique<federated::ClientGateway>(
      *place_.ctx,
      federated::GatewayOptions{
          .job = job.name,
          .executor = env_.id,
          .executors = job.NumWorkers(),
          .clients = job.federated.clients,
          .num_params = model_->num_params(),
          .partition_digest = rounds_->digest(),
          .bind = place_.bind.empty() ? "tcp://" + job.RegionOfWorker(env_.id).host + ":*" : place_.bind,
          .keys = place_.keys,
      },
      traffic_, env_.clock);
  GD_RETURN_IF_ERROR(gateway_->Start());
  mo.endpoint = gateway_->endpoint();
  federated::ClientGateway* g = gateway_.get();
  mo.authorize = [g](const wire::HeartbeatReply& r) { g->Authorize(r); };
  rounds_->SetGateway(g);
  GD_LOG(INFO) << "federated: client gateway at " << gateway_->endpoint();
  return Status::Ok();
}

// Rounds pull into global() (federated rounds use only it of LocalRounds).
Status FederatedStep::Start(int64_t clock) {
  local_ = std::make_unique<LocalRounds>(env_.job, model_->params());
  GD_RETURN_IF_ERROR(env_.PullFull(clock, global()).status());
  local_->Restart();
  env_.pulled_through = clock;
  env_.pushed_through = clock - 1;
  return Status::Ok();
}

StatusOr<double> FederatedStep::Jump(int64_t, int64_t to) {
  GD_ASSIGN_OR_RETURN(double waited, env_.PullFull(to, global()));
  local_->Restart();
  env_.pulled_through = std::min<int64_t>(to, env_.clocks - 1);
  return waited;
}

StatusOr<Update> FederatedStep::Compute(int64_t clock) {
  torch::Tensor push = torch::zeros({rounds_->shard_values()});
  const bool usable = RunRound(clock, push);
  Update u;
  u.computed = u.resumed = env_.clock->Now();
  if (!usable) {
    GD_LOG(ERROR) << "round " << clock << ": loss or gradient is not finite; skipping this round's push";
    return u;
  }
  // Client updates are checked at the gateway and when they are combined
  // (federated_rounds.h); a round that still came out beyond the bound is
  // left out, not pushed to be refused.
  if (Status pushable = CheckPushable(push.data_ptr<float>(), push.numel(), clock); !pushable.ok()) {
    GD_LOG(ERROR) << "round " << clock << ": " << pushable.message() << "; the round is skipped";
    return u;
  }
  Hand(std::move(push), &u);
  return u;
}

bool FederatedStep::RunRound(int64_t clock, torch::Tensor& push) {
  stats::RoundStats& rec = round_log_.emplace_back();
  rec.set_round(static_cast<uint32_t>(clock));
  rec.set_start_unix(UnixNow());
  round_sent0_ = traffic_->bytes_sent.load();
  round_received0_ = traffic_->bytes_received.load();
  StatusOr<RoundReport> r = rounds_->Run(clock, global(), push.data_ptr<float>());
  rec.set_pushed_unix(UnixNow());
  if (!r.ok()) {
    GD_LOG(ERROR) << "round " << clock << ": " << r.status();
    return false;
  }
  Record(*r, rec);
  Count(clock, *r);
  return true;
}

void FederatedStep::Count(int64_t clock, const RoundReport& r) {
  if (r.refused > 0) GD_LOG(WARNING) << "round " << clock << ": " << r.refused << " client update(s) refused";
  StepCounters& n = env_.n;
  ++n.batches;
  n.clients_trained += r.trained;
  n.clients_dropped += r.dropped;
  n.clients_late += r.late;
  n.clients_unusable += r.unusable;
  n.clients_clipped += r.clipped;
  n.clients_refused += r.refused;
  n.real_updates += r.real;
  n.samples += r.samples;
  if (r.trained > 0) {
    n.loss_ema = n.loss_ema < 0 ? r.mean_loss : 0.8 * n.loss_ema + 0.2 * r.mean_loss;
    if (r.mean_accuracy >= 0) n.acc_ema = n.acc_ema < 0 ? r.mean_accuracy : 0.8 * n.acc_ema + 0.2 * r.mean_accuracy;
  }
  if (r.unusable > 0)
    GD_LOG(WARNING) << "round " << clock << ": " << r.unusable << " client update(s) not finite; left out";
}

Status FederatedStep::AfterPush(int64_t clock, bool more) {
  if (!more) return Status::Ok();
  GD_RETURN_IF_ERROR(env_.ps->Pull(clock + 1));
  env_.pulled_through = clock + 1;
  return Status::Ok();
}

// The next round starts from the pulled global model; this round's record
// closes (the last one closes once its push is acknowledged, Close).
Status FederatedStep::AwaitNext(int64_t clock) {
  GD_RETURN_IF_ERROR(env_.WaitPull(clock + 1, global()));
  local_->Restart();
  CloseRoundRecord();
  return Status::Ok();
}

void FederatedStep::CloseRoundRecord() {
  if (round_log_.empty() || round_log_.back().end_unix() > 0) return;
  stats::RoundStats& rec = round_log_.back();
  rec.set_end_unix(UnixNow());
  rec.set_bytes_sent(traffic_->bytes_sent.load() - round_sent0_);
  rec.set_bytes_received(traffic_->bytes_received.load() - round_received0_);
}

bool FederatedStep::SnapshotDue(int64_t clock, double since_last_s, double every_s) const {
  if (env_.job.federated.eval_every > 0) return clock % env_.job.federated.eval_every == 0;
  return ModelStep::SnapshotDue(clock, since_last_s, every_s);
}

// The global model as last pulled; the last snapshot is of the last
// round's start (the shards' final model is the evaluator's test_accuracy).
std::optional<SnapshotView> FederatedStep::Snapshot(int64_t clock, bool last) const {
  if (!model_->has_network()) return std::nullopt;
  if (last) clock = std::max<int64_t>(clock - 1, 0);
  return SnapshotView{.values = global(), .count = model_->num_params(), .step = clock * env_.job.training.local_steps};
}

void FederatedStep::AddStats(stats::WorkerStats* s) const {
  const JobSpec& job = env_.job;
  const StepCounters& n = env_.n;
  s->set_partition(ToString(job.data.partition));
  s->set_partition_digest(rounds_->digest());
  s->set_clients_trained(n.clients_trained);
  s->set_clients_dropped(n.clients_dropped);
  s->set_client_updates_unusable(n.clients_unusable);
  if (job.federated.dp()) s->set_client_updates_clipped(n.clients_clipped);
  s->set_clients_late(n.clients_late);
  s->set_client_updates_refused(n.clients_refused);
  if (job.federated.gateway) s->set_real_client_updates(n.real_updates);
  if (gateway_) *s->mutable_gateway() = gateway_->Stats();
  for (const stats::RoundStats& r : round_log_) *s->add_rounds() = r;
}

}  // namespace geodesic::worker
