// A worker's side of a federated job (federated.clients > 0): the worker is
// a client executor. In round r every executor computes the same plan
// (PlanRound, from worker/federated/population.h): availability, the selection of
// ceil(per_round * (1 + over_selection)) clients, the dropouts, each
// client's simulated time from its device profile, and which updates the
// round takes (the first per_round to finish, none past deadline_s). The
// accepted clients are spread over the executors by their local steps,
// longest first to the least loaded. The executor trains its
// clients one after another from the round's global model
// (worker/client_executor.h) and pushes
//
//   -(E / W) Σ_i w_i Δ_i     (its clients, summed in client-id order)
//
// where w_i is client i's samples for the round and W the round's total
// over every accepted client, both computable by every executor from the
// partition alone. The shards average the E pushes of a round in worker
// order (BSP) and apply the outer step x -= outer_lr * mean(push), so
// x += outer_lr * Σ w_i Δ_i / W: FedAvg (FedAvgM with
// training.outer_momentum), deterministic for a seed. A client whose
// update is unusable (a non-finite loss, gradient or update) adds nothing;
// its weight stays in W, so the round's step shrinks by its share. Under
// DP-FedAvg (federated.dp_clip_norm > 0) each update is clipped, weighs 1,
// W is per_round, and each executor adds N(0, (zS)^2/E) to its sum from a
// generator keyed by (seed, round, executor), so the round's noise is
// N(0, (zS)^2) and runs stay deterministic.
//
// SCAFFOLD (federated.strategy: scaffold): the shards' vector is the model x
// followed by the server's control variate c (JobSpec::ShardValues), and
// each client keeps a control variate c_i (n floats, zero until it first
// trains) on the executor that owns it: client k on executor k mod E, so a
// round is spread by ownership instead of by work. A client trains with the
// correction c - c_i and returns Δc_i = c_i+ - c_i; the executor pushes
// -(E / (η N)) Σ Δc_i after its model push (η = training.outer_lr, N =
// federated.clients), so the shards' FedAvg step x -= η mean(push) gives
// c += (1/N) Σ_S Δc_i = (|S|/N) mean_S(Δc_i), Karimireddy et al.'s rule.
//
// FedBuff (federated.strategy: fedbuff): a round is a server step. Every
// executor computes the same schedule (worker/federated/buffered.h) and keeps the
// global models of the last max_staleness + 1 steps; each of the step's K
// updates trains from the version its client started from, weighs
// s = 1/sqrt(1 + staleness), and the executor pushes -(E / K) Σ s_i Δ_i,
// so the shards' step is x += η Σ s_i Δ_i / K.
//
// Real clients (federated.gateway; worker/federated/client_gateway.h): clients are
// spread by ownership (k mod E) as under SCAFFOLD, so that the executor a
// `geodesic client` process attached to is the one its id trains on. A
// selected client with a process attached trains there (the executor asks
// it before training its virtual clients and takes its update in id order);
// its weight is the sample count it claims, at most Weight(k), and W stays
// the plan's, so a refused or missing real update shrinks the round's step
// by its share, as an unusable one does. A real client that once missed
// the round's deadline is never waited for again: when the executor reaches
// its id without its update, it trains that client virtually.
//
// Bounds: whatever federated.max_update_norm says, no update, real or
// virtual, with a value beyond federated::MaxUpdateValue(E) (half the shards'
// kMaxValueMagnitude over E) joins a round, nor a SCAFFOLD control delta
// beyond min(1, η) times that. Since the weights of an executor's clients
// add up to at most W (FedBuff: at most K of them, each weighing at most 1;
// DP: at most per_round clipped updates), every pushed value is at most E
// times the largest value it took, so a shard never refuses a push built
// from client updates (docs/federated.md "Bounds on updates").
// Torch-free header; not synchronized (the training thread owns it).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/throttle.h"
#include "compression/codec.h"
#include "config/job.h"
#include "worker/client_executor.h"
#include "worker/dataset.h"
#include "worker/federated/buffered.h"
#include "worker/federated/client_gateway.h"
#include "worker/partition.h"

namespace geodesic::worker {

struct ClientSplit;  // worker/examples.h (LibTorch)

struct RoundReport {
  int64_t selected = 0;                // the round's selection, all executors
  int64_t trained = 0;                 // this executor's clients that sent a usable update
  int64_t dropped = 0;                 // the round's clients that dropped out (executor 0 counts them)
  int64_t late = 0;                    // the round's clients past the deadline or the round's close (executor 0)
  double seconds = 0;                  // the round's simulated time (device profiles; docs/federated.md)
  int64_t unusable = 0;                // this executor's clients whose update was not finite
  int64_t clipped = 0;                 // DP: this executor's clients whose update was clipped
  int64_t samples = 0;                 // samples this executor's clients trained on
  double mean_loss = 0;                // over the trained clients
  double mean_accuracy = 0;            // their training accuracy
  double compute_seconds = 0;          // training this executor's clients
  double eval_seconds = 0;             // evaluating the global model on their samples
  std::vector<float> client_accuracy;  // the global model on each trained client's first samples
  std::vector<int64_t> clients;        // the clients with a usable update, in id order
  int64_t staleness_sum = 0;           // FedBuff: over this executor's usable updates
  double uplink_bytes = 0;             // its clients' updates as their uplink codecs sent them
  int64_t refused = 0;                 // its clients whose update was refused (norm bound, a real client's bad update)
  int64_t real = 0;                    // its clients trained by a real client process, with a usable update
};

class FederatedRounds {
 public:
  static StatusOr<std::unique_ptr<FederatedRounds>> Create(const JobSpec& job, int executor, const ClientSplit& data);

  // Round `round` from `global` (shard_values() values: the model, and
  // under SCAFFOLD c after it); writes this executor's push to `push`
  // (shard_values() values; zeros when it has no clients this round).
  StatusOr<RoundReport> Run(int64_t round, const float* global, float* push);

  const std::string& digest() const { return digest_; }
  int64_t num_params() const { return exec_->num_params(); }
  int64_t shard_values() const { return job_->ShardValues(num_params()); }
  // SCAFFOLD: the clients whose control variate this executor keeps.
  size_t controls_kept() const { return controls_.size(); }
  // Uplink error feedback: the clients whose residual this executor keeps.
  size_t residuals_kept() const { return residuals_.size(); }
  // The codec client c's uplink uses (federated.uplink_codec, or the slow
  // tier's).
  const compression::CodecSpec& UplinkOf(int64_t client) const { return uplink_[tier_[client]]; }
  // federated.gateway: real clients attached to `gateway` train the
  // selected clients of their id (null: every client is virtual).
  void SetGateway(federated::ClientGateway* gateway) { gateway_ = gateway; }

 private:
  FederatedRounds() = default;
  struct Plan {
    std::vector<int64_t> mine;  // this executor's clients that did not drop out, in id order
    int64_t selected = 0, dropped = 0, late = 0;
    double seconds = 0;  // the round's simulated time
    double total = 0;    // W: the round's total weight over every accepted client
  };
  Plan PlanRound(int64_t round) const;
  int64_t Weight(int64_t client) const;  // samples client trains on per round
  // The round's accepted clients per executor, each list in id order.
  std::vector<std::vector<int64_t>> Spread(std::vector<int64_t> clients) const;
  // FedBuff's step `round`.
  StatusOr<RoundReport> RunBuffered(int64_t round, const float* global, float* push);
  // Trains `client` (its batch order keyed by `key`) from `global`; adds
  // its update, weighed by `weight` (nullopt: its samples), into sum[0, n)
  // (and under SCAFFOLD its Δc_i into sum[n, 2n)) and counts it. True
  // when the update was usable.
  StatusOr<bool> TrainClient(int64_t client, int64_t key, const float* global, std::optional<double> weight,
                             std::vector<double>& sum, RoundReport& report);
  // SCAFFOLD: c - c_i for `client` into correction_, and its c_i.
  std::vector<float>& Correction(int64_t client, const float* c);
  Status SetUpUplinks();
  // Client c's simulated time for one training: the shards' values down,
  // its steps, its update up in its uplink codec (and SCAFFOLD's Δc_i).
  double ClientTime(int64_t client) const;
  // Sends `delta` through the client's uplink codec (with its residual
  // under error feedback): delta becomes what the shards would decode.
  // False when the codec cannot carry it (fp16 overflow).
  bool Uplink(int64_t client, int64_t key, std::vector<float>& delta, RoundReport& report);
  void AddNoise(int64_t round, std::vector<double>& sum) const;  // DP: this executor's share
  // federated.gateway: asks the real clients attached for this round's
  // clients among `mine`; returns those asked.
  std::set<int64_t> AskReal(int64_t round, const std::vector<int64_t>& mine, const float* global);
  // Adds real client `client`'s update for `round` (checked by the
  // gateway), weighed by its samples, into sum[0, n). A refused update is
  // counted in `refused`, a client that left or missed the deadline in
  // `dropped`; both add nothing. False when the gateway did not wait for
  // it (it missed a deadline before): the caller trains it virtually.
  bool TakeReal(int64_t client, int64_t round, TimePoint deadline, std::vector<double>& sum, RoundReport& report);
  // Whether a virtual client's outcome keeps the push within the shards'
  // limit (max_value_, max_control_value_); if not it is refused (counted).
  bool WithinPush(int64_t client, const ClientOutcome& o, RoundReport& report) const;

  const JobSpec* job_ = nullptr;
  int executor_ = 0, executors_ = 1;
  Partition clients_;
  std::vector<int64_t> sizes_;  // each client's samples
  std::vector<int64_t> steps_;  // and its local steps a round (LocalStepsFor)
  std::string digest_;
  std::unique_ptr<ClientExecutor> exec_;
  std::unordered_map<int64_t, std::vector<float>> controls_;           // SCAFFOLD: c_i of the clients that trained here
  std::vector<float> correction_;                                      // SCAFFOLD: c - c_i of the client in training
  std::vector<compression::CodecSpec> uplink_;                         // [0]: uplink_codec, [1]: the slow tier's
  std::vector<uint8_t> tier_;                                          // each client's index into uplink_
  std::vector<double> uplink_bytes_;                                   // each tier's planned payload (no zstd)
  std::unordered_map<int64_t, compression::ErrorFeedback> residuals_;  // uplink error feedback, per client
  std::unique_ptr<federated::BufferedSchedule> buffered_;              // FedBuff
  std::map<int64_t, std::vector<float>> versions_;                     // FedBuff: the global model of recent steps
  federated::ClientGateway* gateway_ = nullptr;                        // federated.gateway
  float max_value_ = 0;          // an update value's largest magnitude (federated::MaxUpdateValue)
  float max_control_value_ = 0;  // SCAFFOLD: a control delta value's
  mutable Throttle diverged_log_{std::chrono::seconds(1)};
};

}  // namespace geodesic::worker
