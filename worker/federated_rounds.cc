#include "worker/federated_rounds.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include "common/draws.h"
#include "common/log.h"
#include "worker/examples.h"
#include "worker/federated/population.h"
#include "worker/federated/privacy.h"

namespace geodesic::worker {
namespace {

constexpr uint64_t kNoiseStream = 0x6e6f697365;  // "noise": DP noise keys apart from other draws

federated::ProfileSpec Profiles(const FederatedSpec& f) {
  return {.step_seconds = f.device_step_s,
          .compute_sigma = f.device_compute_sigma,
          .uplink_mbit_median = f.device_uplink_mbit,
          .uplink_sigma = f.device_uplink_sigma,
          .downlink_mbit_median = f.device_downlink_mbit,
          .downlink_sigma = f.device_downlink_sigma,
          .latency_ms_median = f.device_latency_ms,
          .latency_sigma = f.device_latency_sigma,
          .availability = f.availability,
          .dropout = f.dropout,
          .slow_fraction = f.device_slow_fraction,
          .slow_factor = f.device_slow_factor};
}

// Longest work first, each to the executor with the least work so far
// (ties: the lower executor, then the lower item): every executor computes
// the same assignment. Each executor's items come back in ascending order.
std::vector<std::vector<int64_t>> SpreadByWork(std::vector<int64_t> items, int executors,
                                               const std::function<int64_t(int64_t)>& work) {
  std::sort(items.begin(), items.end(),
            [&](int64_t a, int64_t b) { return work(a) > work(b) || (work(a) == work(b) && a < b); });
  std::vector<std::vector<int64_t>> out(executors);
  std::vector<int64_t> load(executors, 0);
  for (int64_t i : items) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    out[least].push_back(i);
    load[least] += work(i);
  }
  for (auto& mine : out) std::sort(mine.begin(), mine.end());
  return out;
}

// Counts one usable update, virtual or real, in the round's report.
void Tally(int64_t client, int64_t samples, double loss, double accuracy, double eval_accuracy, RoundReport& report) {
  ++report.trained;
  report.clients.push_back(client);
  report.samples += samples;
  report.mean_loss += loss;
  report.mean_accuracy += accuracy;
  if (eval_accuracy >= 0) report.client_accuracy.push_back(static_cast<float>(eval_accuracy));
}

void Average(RoundReport& report) {
  if (report.trained == 0) return;
  report.mean_loss /= static_cast<double>(report.trained);
  report.mean_accuracy /= static_cast<double>(report.trained);
}

}  // namespace

StatusOr<std::unique_ptr<FederatedRounds>> FederatedRounds::Create(const JobSpec& job, int executor,
                                                                   const ClientSplit& data) {
  std::unique_ptr<FederatedRounds> r(new FederatedRounds());
  r->job_ = &job;
  r->executor_ = executor;
  r->executors_ = std::max(1, job.NumWorkers());
  const FederatedSpec& f = job.federated;
  if (static_cast<int64_t>(data.clients.size()) != f.clients)
    return InvalidArgument("the training split is dealt to " + std::to_string(data.clients.size()) +
                           " clients, not federated.clients " + std::to_string(f.clients));
  r->clients_ = data.clients;
  r->digest_ = data.digest;
  for (const auto& c : r->clients_) {
    r->sizes_.push_back(static_cast<int64_t>(c.size()));
    r->steps_.push_back(LocalStepsFor(r->sizes_.back(), job.data.batch_size, f.local_epochs, f.local_steps));
  }
  const LocalOptimizerSpec local{.lr = f.local_lr, .momentum = f.local_momentum, .prox_mu = f.prox_mu};
  GD_ASSIGN_OR_RETURN(r->exec_, ClientExecutor::Create(job.model, job.seed, data.examples, data.shape,
                                                       job.data.batch_size, local, job.data.augment));
  GD_RETURN_IF_ERROR(r->SetUpUplinks());
  // What keeps every push within the shards' limit (docs/federated.md "Bounds
  // on updates"): a model value at most MaxUpdateValue(E); SCAFFOLD's control
  // push -(E / (η N)) Σ Δc_i sums at most N deltas, so each at most η times that.
  r->max_value_ = federated::MaxUpdateValue(r->executors_);
  r->max_control_value_ = static_cast<float>(r->max_value_ * std::min(1.0, job.training.outer_lr));
  if (f.fedbuff()) {
    std::vector<double> seconds;
    for (int64_t c = 0; c < f.clients; ++c) seconds.push_back(r->ClientTime(c));
    r->buffered_ = std::make_unique<federated::BufferedSchedule>(
        federated::BufferedSpec{.concurrency = f.InFlight(), .buffer = f.per_round, .max_staleness = f.max_staleness},
        Profiles(f), std::move(seconds), job.seed);
  }
  return r;
}

// The uplink codecs, each client's tier (by its profile's uplink) and each
// tier's payload size as planned: the codec's bytes before zstd, an upper
// bound with zstd.
Status FederatedRounds::SetUpUplinks() {
  const FederatedSpec& f = job_->federated;
  for (const std::string* name : {&f.uplink_codec, &f.slow_uplink_codec}) {
    if (name->empty()) break;
    auto spec = compression::ParseCodecSpec(*name);
    if (!spec.ok()) return InvalidArgument("federated uplink codec: " + spec.status().message());
    uplink_.push_back(*spec);
    const auto n = static_cast<uint64_t>(num_params());
    const uint64_t kept = spec->sparse() ? std::max<uint64_t>(1, static_cast<uint64_t>(spec->fraction * n)) : 0;
    uplink_bytes_.push_back(static_cast<double>(
        compression::MaxEncodedBytes({.codec = spec->codec, .block = spec->block, .kept = kept}, n)));
  }
  const federated::ProfileSpec profiles = Profiles(f);
  for (int64_t c = 0; c < f.clients; ++c) {
    const bool slow =
        uplink_.size() > 1 && federated::DrawProfile(profiles, c, job_->seed).uplink_mbit < f.slow_uplink_mbit;
    tier_.push_back(slow ? 1 : 0);
  }
  return Status::Ok();
}

double FederatedRounds::ClientTime(int64_t client) const {
  const double n = static_cast<double>(num_params());
  const double down = 4.0 * static_cast<double>(shard_values());
  const double up = uplink_bytes_[tier_[client]] + (job_->federated.scaffold() ? 4.0 * n : 0.0);
  return federated::ClientSeconds(federated::DrawProfile(Profiles(job_->federated), client, job_->seed), steps_[client],
                                  down, up);
}

bool FederatedRounds::Uplink(int64_t client, int64_t key, std::vector<float>& delta, RoundReport& report) {
  const compression::CodecSpec& spec = UplinkOf(client);
  const auto n = static_cast<uint64_t>(delta.size());
  if (!spec.lossy() && spec.zstd_level == 0) {
    report.uplink_bytes += 4.0 * static_cast<double>(n);
    return true;
  }
  constexpr uint64_t kUplinkStream = 0x75706c696e6b;  // "uplink"
  compression::Encoder encoder(
      spec, DrawKey({job_->seed, kUplinkStream, static_cast<uint64_t>(client), static_cast<uint64_t>(key)}));
  // The client's error feedback is the push path's, over one chunk.
  compression::ErrorFeedback* feedback =
      job_->federated.uplink_error_feedback && spec.lossy() ? &residuals_[client] : nullptr;
  if (feedback) feedback->Correct(0, delta.data(), n, delta.data());
  std::vector<uint8_t> payload;
  compression::PayloadInfo info;
  std::vector<float> sent(n);
  if (!encoder.Encode(delta.data(), n, &payload, &info, sent.data()).ok()) return false;
  if (feedback) feedback->Remember(0, delta.data(), sent.data(), n);
  delta.swap(sent);
  report.uplink_bytes += static_cast<double>(payload.size());
  return true;
}

int64_t FederatedRounds::Weight(int64_t client) const { return steps_[client] * job_->data.batch_size; }

// Every executor computes the same plan: the selection, each selected
// client's simulated time from its device profile (ClientTime), and which updates the
// round takes (federated::CloseRound). The accepted clients are spread over
// the executors by their work (Spread).
FederatedRounds::Plan FederatedRounds::PlanRound(int64_t round) const {
  const FederatedSpec& f = job_->federated;
  const federated::ProfileSpec profiles = Profiles(f);
  const federated::SelectionSpec selection{
      .per_round = f.per_round, .over_selection = f.over_selection, .weighted = f.weighted_selection};
  std::vector<federated::Candidate> candidates;
  for (int64_t c : federated::SelectClients(selection, profiles, sizes_, round, job_->seed))
    candidates.push_back(
        {.client = c, .seconds = ClientTime(c), .dropped = federated::DropsOut(profiles, c, round, job_->seed)});
  const federated::RoundClose close = federated::CloseRound(candidates, f.per_round, f.deadline_s);
  Plan plan;
  plan.selected = static_cast<int64_t>(candidates.size());
  plan.seconds = close.seconds;
  for (int64_t c : close.accepted) plan.total += f.dp() ? 1.0 : static_cast<double>(Weight(c));
  plan.mine = Spread(close.accepted)[executor_];
  // The dropped and late are counted by executor 0 alone, so that the
  // executors' counts add up to the round's.
  if (executor_ == 0) plan.dropped = close.dropped, plan.late = close.late;
  return plan;
}

// By work (SpreadByWork): a client's work is its local steps plus one for
// its fixed costs. Under SCAFFOLD and with real clients by ownership instead.
std::vector<std::vector<int64_t>> FederatedRounds::Spread(std::vector<int64_t> clients) const {
  if (!job_->federated.scaffold() && !job_->federated.gateway)
    return SpreadByWork(std::move(clients), executors_, [this](int64_t c) { return steps_[c] + 1; });
  std::vector<std::vector<int64_t>> out(executors_);  // a client trains where its control variate is
  std::sort(clients.begin(), clients.end());
  for (int64_t c : clients) out[c % executors_].push_back(c);
  return out;
}

StatusOr<bool> FederatedRounds::TrainClient(int64_t client, int64_t key, const float* global,
                                            std::optional<double> weight, std::vector<double>& sum,
                                            RoundReport& report) {
  const FederatedSpec& f = job_->federated;
  const int64_t n = num_params();
  const float* c = f.scaffold() ? global + n : nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  GD_ASSIGN_OR_RETURN(ClientOutcome o, exec_->Train(global, {.client = client,
                                                             .round = key,
                                                             .indices = &clients_[client],
                                                             .local_epochs = f.local_epochs,
                                                             .local_steps = f.local_steps,
                                                             .correction = c ? Correction(client, c).data() : nullptr,
                                                             .server_control = c,
                                                             .eval_samples = f.client_eval_samples}));
  report.compute_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - o.eval_seconds;
  report.eval_seconds += o.eval_seconds;
  if (!o.finite) {
    ++report.unusable;
    return false;
  }
  if (f.max_update_norm > 0 && federated::L2Norm(o.delta.data(), n) > f.max_update_norm) {
    ++report.refused;
    return false;
  }
  if (f.dp() && federated::ClipToNorm(o.delta.data(), n, f.dp_clip_norm) < 1) ++report.clipped;
  // A diverged but finite training: refused before its uplink's error
  // feedback keeps any of it, and again as decoded (with the residual).
  if (!WithinPush(client, o, report)) return false;
  if (!Uplink(client, key, o.delta, report)) {
    ++report.unusable;
    return false;
  }
  if (!WithinPush(client, o, report)) return false;
  const double w = weight.value_or(static_cast<double>(o.samples));
  for (int64_t j = 0; j < n; ++j) sum[j] += w * static_cast<double>(o.delta[j]);
  if (c) {
    std::vector<float>& ci = controls_[client];
    ci.resize(n, 0.0f);
    for (int64_t j = 0; j < n; ++j) {
      sum[n + j] += static_cast<double>(o.control_delta[j]);
      ci[j] += o.control_delta[j];
    }
  }
  Tally(client, o.samples, o.mean_loss, o.mean_accuracy, o.eval_accuracy, report);
  return true;
}

StatusOr<RoundReport> FederatedRounds::Run(int64_t round, const float* global, float* push) {
  const FederatedSpec& f = job_->federated;
  if (buffered_) return RunBuffered(round, global, push);
  Plan plan = PlanRound(round);
  RoundReport report;
  report.selected = plan.selected;
  report.dropped = plan.dropped;
  report.late = plan.late;
  report.seconds = plan.seconds;
  const int64_t n = num_params();
  std::vector<double> sum(shard_values(), 0.0);
  const std::optional<double> weight = f.dp() ? std::optional<double>(1.0) : std::nullopt;
  const std::set<int64_t> real = AskReal(round, plan.mine, global);
  const TimePoint deadline = std::chrono::steady_clock::now() +
                             std::chrono::duration_cast<Duration>(std::chrono::duration<double>(f.gateway_timeout_s));
  for (int64_t client : plan.mine) {
    if (real.count(client) && TakeReal(client, round, deadline, sum, report)) continue;
    GD_RETURN_IF_ERROR(TrainClient(client, round, global, weight, sum, report).status());
  }
  Average(report);
  if (f.dp()) {
    // DP-FedAvg: a fixed denominator (the clients asked for), and each
    // executor's share of the round's noise N(0, (z S)^2), so the E shares
    // add up to it.
    plan.total = static_cast<double>(f.per_round);
    AddNoise(round, sum);
  }
  const double scale = plan.total > 0 ? -static_cast<double>(executors_) / plan.total : 0.0;
  for (int64_t j = 0; j < n; ++j) push[j] = static_cast<float>(scale * sum[j]);
  if (f.scaffold()) {
    const double control_scale =
        -static_cast<double>(executors_) / (job_->training.outer_lr * static_cast<double>(f.clients));
    for (int64_t j = n; j < 2 * n; ++j) push[j] = static_cast<float>(control_scale * sum[j]);
  }
  return report;
}

// Keeps this step's global model for the clients starting from it, drops
// those no update may use any more, takes the schedule's step (replaying
// the earlier ones on a resumed job) and trains this executor's share.
StatusOr<RoundReport> FederatedRounds::RunBuffered(int64_t round, const float* global, float* push) {
  const FederatedSpec& f = job_->federated;
  const int64_t n = num_params();
  if (buffered_->version() > round)
    return FailedPrecondition("fedbuff step " + std::to_string(round) + " was already taken");
  versions_[round].assign(global, global + n);
  while (versions_.begin()->first < round - f.max_staleness) versions_.erase(versions_.begin());
  federated::BufferedStep step;
  do step = buffered_->Next();
  while (step.version < round);
  RoundReport report;
  report.selected = step.started;
  report.seconds = step.seconds;
  if (executor_ == 0) report.dropped = step.dropped, report.late = step.stale;
  std::vector<int64_t> order(step.accepted.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  const auto mine = SpreadByWork(order, executors_, [&](int64_t i) { return steps_[step.accepted[i].client] + 1; });
  std::vector<double> sum(n, 0.0);
  for (int64_t i : mine[executor_]) {
    const federated::Arrival& a = step.accepted[i];
    auto from = versions_.find(a.version);
    if (from == versions_.end()) {  // a version this executor never held (a resumed job)
      ++report.unusable;
      continue;
    }
    GD_ASSIGN_OR_RETURN(bool usable, TrainClient(a.client, a.start, from->second.data(),
                                                 federated::StalenessWeight(round - a.version), sum, report));
    if (usable) report.staleness_sum += round - a.version;
  }
  Average(report);
  const double scale = -static_cast<double>(executors_) / static_cast<double>(f.per_round);
  for (int64_t j = 0; j < n; ++j) push[j] = static_cast<float>(scale * sum[j]);
  return report;
}

std::set<int64_t> FederatedRounds::AskReal(int64_t round, const std::vector<int64_t>& mine, const float* global) {
  std::set<int64_t> asked;
  if (!gateway_) return asked;
  gateway_->Poll();
  for (int64_t client : mine)
    if (gateway_->Attached(client) && gateway_->Ask(client, round, global)) asked.insert(client);
  return asked;
}

bool FederatedRounds::TakeReal(int64_t client, int64_t round, TimePoint deadline, std::vector<double>& sum,
                               RoundReport& report) {
  const auto t0 = std::chrono::steady_clock::now();
  const federated::UpdateLimits limits{.num_params = num_params(),
                                       .max_samples = Weight(client),
                                       .max_norm = job_->federated.max_update_norm,
                                       .max_value = max_value_};
  StatusOr<federated::RealUpdate> u = gateway_->Await(client, round, deadline, limits);
  report.compute_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (u.status().code() == Code::kDeadlineExceeded) return false;  // not waited for: trains virtually
  if (!u.ok()) {
    GD_LOG(WARNING) << "round " << round << ": real client " << client << ": " << u.status().message();
    ++(u.status().code() == Code::kUnavailable ? report.dropped : report.refused);
    return true;
  }
  const auto w = static_cast<double>(u->info.samples());
  for (size_t j = 0; j < u->delta.size(); ++j) sum[j] += w * static_cast<double>(u->delta[j]);
  ++report.real;
  const wire::ClientUpdate& i = u->info;
  Tally(client, i.samples(), i.mean_loss(), i.mean_accuracy(), i.eval_accuracy(), report);
  report.uplink_bytes += 4.0 * static_cast<double>(u->delta.size());
  return true;
}

bool FederatedRounds::WithinPush(int64_t client, const ClientOutcome& o, RoundReport& report) const {
  const auto over = [](const std::vector<float>& v, float bound) {
    return std::any_of(v.begin(), v.end(), [bound](float x) { return std::fabs(x) > bound; });
  };
  if (!over(o.delta, max_value_) && !over(o.control_delta, max_control_value_)) return true;
  uint64_t skipped = 0;
  if (diverged_log_.Due(std::chrono::steady_clock::now(), &skipped))
    GD_LOG(WARNING) << "client " << client << ": an update value beyond " << max_value_
                    << " (or a control delta beyond " << max_control_value_
                    << "): a diverged training; refused, as a real client's would be"
                    << (skipped ? " (and " + std::to_string(skipped) + " more since the last such line)" : "");
  ++report.refused;
  return false;
}

std::vector<float>& FederatedRounds::Correction(int64_t client, const float* c) {
  const int64_t n = num_params();
  correction_.resize(n);
  auto kept = controls_.find(client);
  for (int64_t j = 0; j < n; ++j) correction_[j] = c[j] - (kept == controls_.end() ? 0.0f : kept->second[j]);
  return correction_;
}

void FederatedRounds::AddNoise(int64_t round, std::vector<double>& sum) const {
  const FederatedSpec& f = job_->federated;
  std::vector<float> noise(sum.size(), 0.0f);
  const uint64_t key =
      DrawKey({job_->seed, kNoiseStream, static_cast<uint64_t>(round), static_cast<uint64_t>(executor_)});
  federated::AddGaussianNoise(noise.data(), noise.size(),
                              f.dp_noise_multiplier * f.dp_clip_norm / std::sqrt(static_cast<double>(executors_)), key);
  for (size_t j = 0; j < sum.size(); ++j) sum[j] += noise[j];
}

}  // namespace geodesic::worker
