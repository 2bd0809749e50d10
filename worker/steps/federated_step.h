// FederatedStep: a federated round a clock (federated.clients > 0): this
// worker is a client executor (worker/federated_rounds.h) that trains its
// clients of the round from the global model and pushes their share of the
// weighted mean update; the shards apply FedAvg's outer step. Pulls land
// in LocalRounds::global(). A round that still comes out beyond the shards'
// bound is skipped, not pushed to be refused. With federated.gateway, real
// client processes (`geodesic client`) attach to this executor's client
// gateway (worker/federated/client_gateway.h) and train their own ids. Each round
// leaves a record in the stats file's `rounds`.
//
// Threading: the loop's thread, but for the gateway's admitted keys, which
// the membership client's heartbeat thread sets (Authorize).
#pragma once

#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "transport/message.h"
#include "transport/security.h"
#include "worker/federated/client_gateway.h"
#include "worker/federated_rounds.h"
#include "worker/local_sgd.h"
#include "worker/steps/model_step.h"

namespace geodesic::worker {

// Where a federated.gateway listens and whom it admits.
struct GatewayPlace {
  zmq::context_t* ctx = nullptr;
  std::string bind;  // empty: the worker's region host, any port
  transport::CurveKeyPair keys;
};

class FederatedStep final : public ModelStep {
 public:
  // `traffic`: this process's byte counters, for the round records; it must outlive the step.
  FederatedStep(StepEnv& env, std::unique_ptr<FlatModel> model, std::unique_ptr<FederatedRounds> rounds,
                GatewayPlace gateway, transport::TrafficCounters* traffic);

  std::string ClockName() const override;
  // federated.gateway: listens for real clients before joining, so that the
  // registration carries the gateway's endpoint, and takes the admitted
  // clients' keys from the coordinator's heartbeat replies.
  Status BeforeJoin(cluster::MemberOptions& mo) override;
  Status Start(int64_t clock) override;
  StatusOr<double> Jump(int64_t from, int64_t to) override;
  StatusOr<Update> Compute(int64_t clock) override;
  Status AfterPush(int64_t clock, bool more) override;
  Status AwaitNext(int64_t clock) override;
  void Close() override { CloseRoundRecord(); }
  int64_t Steps(int64_t) const override { return env_.n.batches; }
  // Every federated.eval_every rounds (0: by time, as other jobs do).
  bool SnapshotDue(int64_t clock, double since_last_s, double every_s) const override;
  std::optional<SnapshotView> Snapshot(int64_t clock, bool last) const override;
  void AddStats(stats::WorkerStats* s) const override;

 private:
  float* global() const { return local_->global().data_ptr<float>(); }
  // This executor's clients of round `clock` into `push`; false if the round failed.
  bool RunRound(int64_t clock, torch::Tensor& push);
  void Count(int64_t clock, const RoundReport& r);
  void CloseRoundRecord();  // the round's end stamp and bytes

  std::unique_ptr<FederatedRounds> rounds_;
  std::unique_ptr<LocalRounds> local_;  // only its global()
  GatewayPlace place_;
  transport::TrafficCounters* traffic_;
  std::unique_ptr<federated::ClientGateway> gateway_;  // federated.gateway
  std::vector<stats::RoundStats> round_log_;           // one record per round
  double round_sent0_ = 0, round_received0_ = 0;       // the byte counters when the open one began
};

}  // namespace geodesic::worker
