// Optimizers that a server shard runs on its chunks: SGD with momentum
// (plain or Nesterov), Adam and AdamW, with the same update rules as
// torch.optim.SGD, Adam and AdamW (tests/server/optimizer_test.cc checks
// them against LibTorch on the same numbers).
//
// One ChunkOptimizer holds the state (momentum buffer, Adam moments) of one
// chunk. Step() reads the current parameters from `in` and writes the updated
// ones to `out`, which may be the same buffer; writing elsewhere lets the
// shard keep serving the old buffer to pulls still being sent. Each Step is
// one fused pass over the chunk, cut into pieces that run at once on a
// RangePool when one is given (the same bits as one piece: every value is
// updated on its own). Not synchronized: the shard's loop thread owns its
// optimizers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/job.h"

namespace geodesic {
class RangePool;
}

namespace geodesic::server {

class ChunkOptimizer {
 public:
  virtual ~ChunkOptimizer() = default;

  // Applies gradient `grad` (n values) scaled by `grad_scale`, with learning
  // rate lr * lr_scale. BSP rounds pass grad_scale = 1/contributors (the
  // mean); staleness scaling passes 1/staleness (see docs/architecture.md).
  virtual void Step(const float* in, float* out, const float* grad, size_t n, float grad_scale, float lr_scale) = 0;
  // An asynchronous update: one worker's gradient among the `per_clock`
  // (live workers) that make up a clock. SGD advances its momentum buffer
  // once per clock, not once per push, so that the momentum horizon in
  // clocks is the same as under BSP (momentum applied per push would decay
  // n times per clock and, with stale gradients, oscillate): each push moves
  // the parameters by its own gradient plus 1/per_clock of the momentum
  // term, and the buffer takes the clock's summed gradients when the clock's
  // last push arrives. With zero staleness a clock of async pushes moves the
  // parameters exactly as one BSP step does. Adam steps per push.
  virtual void StepAsync(const float* in, float* out, const float* grad, size_t n, float grad_scale, float lr_scale,
                         int per_clock) = 0;
  // How staleness scaling is applied: SGD scales this update's gradient,
  // Adam (invariant to gradient scale) scales its step size.
  virtual bool ScalesGradientForStaleness() const = 0;
  // Optimizer state as flat arrays, for checkpoints and tests.
  virtual size_t StateSize() const = 0;

  // Everything a resumed optimizer needs to continue bit for bit: counters
  // (Adam's step, SGD's pushes in the current clock) and float arrays
  // (momentum, moments), in an order fixed by the optimizer.
  struct State {
    std::vector<int64_t> counters;
    std::vector<std::vector<float>> arrays;
  };
  virtual State Save() const = 0;
  // Restores a Save() of the same optimizer over the same chunk size; false
  // (and nothing changed) when the counts or sizes do not fit.
  virtual bool Load(const State& state) = 0;
};

// `pool` (may be null: one thread) must outlive the optimizer.
std::unique_ptr<ChunkOptimizer> MakeChunkOptimizer(const OptimizerSpec& spec, size_t n, RangePool* pool = nullptr);

}  // namespace geodesic::server
