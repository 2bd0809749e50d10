// ClientExecutor: trains federated clients one after another in one process.
// A client is only its indices into the shared training examples (images
// or token windows, from the partition: worker/examples.h) and, for
// SCAFFOLD, its control variate, both kept by the
// caller; the model, gradient buffer and momentum buffer belong to the
// executor and are reused for every client, so the memory of an idle client
// is its indices. Each client starts from the round's global model, runs
// its local steps (worker/client_update.h: SGD, FedProx, SCAFFOLD) over a
// batch order seeded by (job seed, client, round), and returns its update.
// LibTorch stays in the .cc. Not thread-safe: one executor per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "config/job.h"
#include "worker/client_update.h"
#include "worker/dataset.h"

namespace geodesic::worker {

struct Examples;     // worker/examples.h (LibTorch)
struct SampleShape;  // worker/model.h

struct ClientRound {
  int64_t client = 0;
  int64_t round = 0;
  const std::vector<int64_t>* indices = nullptr;  // the client's samples in the training set
  double local_epochs = 1;                        // passes over its samples, rounded down to whole batches
  int64_t local_steps = 0;                        // > 0: this many steps instead
  const float* correction = nullptr;              // SCAFFOLD: c - c_i (n values), else null
  const float* server_control = nullptr;          // SCAFFOLD: c, for the client's new control
  int64_t eval_samples = 0;                       // > 0: first evaluate `global` on this many of the client's samples
                                                  // (classifiers only: a module's own loss has no accuracy)
};

struct ClientOutcome {
  std::vector<float> delta;  // client model - global model
  int64_t samples = 0;       // samples trained on: FedAvg's weight
  int64_t steps = 0;
  double mean_loss = 0;      // over the local steps
  double mean_accuracy = 0;  // training accuracy over the local steps
  // False when a loss or gradient was not finite: the update is not usable
  // (delta is empty) and the round goes on without it.
  bool finite = true;
  std::vector<float> control_delta;  // SCAFFOLD: c_i+ - c_i
  double eval_accuracy = -1;         // `global` on the client's first eval_samples samples; -1: not asked
                                     // (classifiers only)
  double eval_seconds = 0;           // the time that took
};

class ClientExecutor {
 public:
  // `train` (of samples shaped `shape`) is shared by every client this
  // executor runs. `augment` changes each batch of images as a worker's
  // (data.augment), drawn from (seed, client, round, step). Each step's
  // loss is the model's objective (worker/objective.h).
  static StatusOr<std::unique_ptr<ClientExecutor>> Create(const ModelSpec& model, uint64_t seed, const Examples& train,
                                                          const SampleShape& shape, int batch_size,
                                                          const LocalOptimizerSpec& local,
                                                          const AugmentSpec& augment = {});
  ~ClientExecutor();

  int64_t num_params() const;
  // Trains one client from `global` (num_params values).
  StatusOr<ClientOutcome> Train(const float* global, const ClientRound& round);

 private:
  struct Impl;
  explicit ClientExecutor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A client's local steps in a round: `local_steps` if > 0, else
// local_epochs passes over its whole batches (at least one step).
int64_t LocalStepsFor(int64_t samples, int batch_size, double local_epochs, int64_t local_steps);

// The batch-order seed of `client` in `round` of a job seeded `job_seed`.
uint64_t ClientSeed(uint64_t job_seed, int64_t client, int64_t round);

}  // namespace geodesic::worker
