#include "worker/client_update.h"

namespace geodesic::worker {

void LocalStep(float* y, const float* grad, const float* x_global, const float* correction, float* momentum_buffer,
               size_t n, const LocalOptimizerSpec& spec) {
  const auto lr = static_cast<float>(spec.lr), wd = static_cast<float>(spec.weight_decay),
             mu = static_cast<float>(spec.prox_mu), beta = static_cast<float>(spec.momentum);
  for (size_t j = 0; j < n; ++j) {
    float d = grad[j];
    if (wd != 0) d += wd * y[j];
    if (mu != 0) d += mu * (y[j] - x_global[j]);
    if (correction) d += correction[j];
    if (momentum_buffer) d = momentum_buffer[j] = beta * momentum_buffer[j] + d;
    y[j] -= lr * d;
  }
}

void ScaffoldControlDelta(const float* c, const float* x_global, const float* y, int64_t steps, double lr, size_t n,
                          float* control_delta) {
  const double scale = 1.0 / (static_cast<double>(steps) * lr);
  for (size_t j = 0; j < n; ++j)
    control_delta[j] =
        static_cast<float>(-static_cast<double>(c[j]) + (static_cast<double>(x_global[j]) - y[j]) * scale);
}

}  // namespace geodesic::worker
