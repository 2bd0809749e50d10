// The local optimizer of a federated client, on flat float buffers (no
// LibTorch): one step of SGD on the client's model y, with FedProx's
// proximal term and SCAFFOLD's drift correction, and SCAFFOLD's new client
// control variate after the round. docs/federated.md has the rules.
//
//   d = g + λ y + μ (y - x) + (c - c_i)      λ: weight decay, μ: FedProx,
//                                            x: the round's global model
//   with momentum β: b = β b + d, d = b
//   y -= η d
//
// μ = 0 and no correction skip those terms entirely, so FedProx with μ = 0
// and SCAFFOLD without control variates are FedAvg's local step bit for
// bit. Pure functions; thread-safe on distinct buffers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace geodesic::worker {

struct LocalOptimizerSpec {
  double lr = 0.05;
  double momentum = 0;
  double weight_decay = 0;
  double prox_mu = 0;  // FedProx's μ
};

// correction: n values c - c_i (SCAFFOLD), or null. momentum_buffer: n
// values kept across the client's steps, or null when momentum is 0.
void LocalStep(float* y, const float* grad, const float* x_global, const float* correction, float* momentum_buffer,
               size_t n, const LocalOptimizerSpec& spec);

// SCAFFOLD, option II of Karimireddy et al.: after K local steps of rate η
// from x to y, c_i+ = c_i - c + (x - y) / (K η). Writes c_i+ - c_i (what
// the client sends) to control_delta.
void ScaffoldControlDelta(const float* c, const float* x_global, const float* y, int64_t steps, double lr, size_t n,
                          float* control_delta);

}  // namespace geodesic::worker
