#include "server/optimizer.h"

#include <cmath>
#include <vector>

#include "common/range_pool.h"

namespace geodesic::server {
namespace {

// The loops over one piece [b, e) of a chunk, as free functions so that
// every operand is a local the compiler can keep in registers (inside the
// lambdas a store to the state could alias the captured scalars, which
// kept GCC from vectorizing).
struct SgdArgs {
  float lr, mu, wd, gs;
};

void SgdRange(const float* in, float* out, const float* grad, float* __restrict buf, size_t b, size_t e, SgdArgs a,
              bool nesterov) {
  const float lr = a.lr, mu = a.mu, wd = a.wd, gs = a.gs;
  if (mu > 0) {
    // Nesterov looks ahead by one more momentum step: d + mu * b.
    for (size_t i = b; i < e; ++i) {
      float d = grad[i] * gs + wd * in[i];
      float m = mu * buf[i] + d;
      buf[i] = m;
      out[i] = in[i] - lr * (nesterov ? d + mu * m : m);
    }
  } else {
    for (size_t i = b; i < e; ++i) out[i] = in[i] - lr * (grad[i] * gs + wd * in[i]);
  }
}

// An asynchronous push's share of the clock; at the clock's end the buffer
// takes the clock's summed gradients.
void SgdAsyncRange(const float* in, float* out, const float* grad, float* __restrict buf, float* __restrict acc,
                   size_t b, size_t e, SgdArgs a, float own, float share, bool clock_ends) {
  const float lr = a.lr, mu = a.mu, wd = a.wd, gs = a.gs;
  for (size_t i = b; i < e; ++i) {
    float d = grad[i] * gs + wd * in[i];
    acc[i] += d;
    out[i] = in[i] - lr * (own * d + share * buf[i]);
  }
  if (!clock_ends) return;
  for (size_t i = b; i < e; ++i) {
    buf[i] = mu * buf[i] + acc[i];
    acc[i] = 0.0f;
  }
}

struct AdamArgs {
  float b1, b2, eps, gs, l2, shrink, step, inv_sqrt_bc2;
};

void AdamRange(const float* in, float* out, const float* grad, float* __restrict m, float* __restrict v, size_t b,
               size_t e, AdamArgs a) {
  const float b1 = a.b1, b2 = a.b2, eps = a.eps, gs = a.gs, l2 = a.l2, shrink = a.shrink, step = a.step;
  const float inv_sqrt_bc2 = a.inv_sqrt_bc2;
  for (size_t i = b; i < e; ++i) {
    float g = grad[i] * gs + l2 * in[i];
    float mi = b1 * m[i] + (1.0f - b1) * g;
    float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    out[i] = in[i] * shrink - step * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

// torch.optim.SGD with dampening 0:
//   d = g + wd * p;  buf = momentum * buf + d  (buf starts at d);
//   p -= lr * buf, or with Nesterov p -= lr * (d + momentum * buf)
// A zero-initialized buffer gives the same first step as torch's clone.
class Sgd final : public ChunkOptimizer {
 public:
  Sgd(const OptimizerSpec& spec, size_t n, RangePool* pool)
      : pool_(pool),
        lr_(static_cast<float>(spec.lr)),
        momentum_(static_cast<float>(spec.momentum)),
        wd_(static_cast<float>(spec.weight_decay)),
        nesterov_(spec.nesterov),
        n_(n),
        buf_(spec.momentum > 0 ? n : 0, 0.0f) {}

  void Step(const float* in, float* out, const float* grad, size_t n, float grad_scale, float lr_scale) override {
    const SgdArgs a{lr_ * lr_scale, momentum_, wd_, grad_scale};
    float* buf = buf_.data();
    ForRanges(pool_, n, [&](int, size_t b, size_t e) { SgdRange(in, out, grad, buf, b, e, a, nesterov_); });
  }
  void StepAsync(const float* in, float* out, const float* grad, size_t n, float grad_scale, float lr_scale,
                 int per_clock) override {
    if (momentum_ == 0 || per_clock <= 1) {
      // One push per clock: the clock is this update.
      Step(in, out, grad, n, grad_scale, lr_scale);
      return;
    }
    if (acc_.empty()) acc_.assign(n, 0.0f);
    const float mu = momentum_;
    const SgdArgs a{lr_ * lr_scale, mu, wd_, grad_scale};
    // A clock's pushes sum to the BSP step on their sum D: plain,
    // D + mu * buf; Nesterov, (1 + mu) D + mu^2 * buf.
    const float own = nesterov_ ? 1.0f + mu : 1.0f;
    const float share = (nesterov_ ? mu * mu : mu) / static_cast<float>(per_clock);
    float* buf = buf_.data();
    float* acc = acc_.data();
    const bool clock_ends = ++pushes_in_clock_ >= per_clock;
    ForRanges(pool_, n, [&](int, size_t b, size_t e) {
      SgdAsyncRange(in, out, grad, buf, acc, b, e, a, own, share, clock_ends);
    });
    if (clock_ends) pushes_in_clock_ = 0;
  }
  bool ScalesGradientForStaleness() const override { return true; }
  size_t StateSize() const override { return buf_.size() + acc_.size(); }
  State Save() const override { return {{pushes_in_clock_}, {buf_, acc_}}; }
  bool Load(const State& s) override {
    // acc_ is empty until the first asynchronous push with momentum, or n long.
    if (s.counters.size() != 1 || s.arrays.size() != 2 || s.arrays[0].size() != buf_.size() ||
        (!s.arrays[1].empty() && s.arrays[1].size() != n_) || s.counters[0] < 0)
      return false;
    pushes_in_clock_ = static_cast<int>(s.counters[0]);
    buf_ = s.arrays[0];
    acc_ = s.arrays[1];
    return true;
  }

 private:
  RangePool* pool_;
  float lr_, momentum_, wd_;
  bool nesterov_;
  size_t n_;
  std::vector<float> buf_;
  std::vector<float> acc_;  // async: this clock's gradients so far
  int pushes_in_clock_ = 0;
};

// torch.optim.Adam (amsgrad off, L2 weight decay):
//   g += wd * p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// and torch.optim.AdamW (decoupled): p *= 1 - lr * wd first, g unchanged.
class Adam final : public ChunkOptimizer {
 public:
  Adam(const OptimizerSpec& spec, size_t n, RangePool* pool)
      : pool_(pool), spec_(spec), decoupled_(spec.name == OptimizerKind::kAdamW), m_(n, 0.0f), v_(n, 0.0f) {}

  void Step(const float* in, float* out, const float* grad, size_t n, float grad_scale, float lr_scale) override {
    ++t_;
    const double bc1 = 1.0 - std::pow(spec_.beta1, static_cast<double>(t_));
    const double bc2 = 1.0 - std::pow(spec_.beta2, static_cast<double>(t_));
    const float step = static_cast<float>(spec_.lr * lr_scale / bc1);
    const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    const float b1 = static_cast<float>(spec_.beta1), b2 = static_cast<float>(spec_.beta2);
    const float eps = static_cast<float>(spec_.eps), gs = grad_scale;
    const float wd = static_cast<float>(spec_.weight_decay);
    // L2 goes into the gradient; decoupled decay shrinks the parameters.
    const float l2 = decoupled_ ? 0.0f : wd;
    const float shrink = decoupled_ ? static_cast<float>(1.0 - spec_.lr * lr_scale * spec_.weight_decay) : 1.0f;
    const AdamArgs a{b1, b2, eps, gs, l2, shrink, step, inv_sqrt_bc2};
    float* m = m_.data();
    float* v = v_.data();
    ForRanges(pool_, n, [&](int, size_t b, size_t e) { AdamRange(in, out, grad, m, v, b, e, a); });
  }
  void StepAsync(const float* in, float* out, const float* grad, size_t n, float grad_scale, float lr_scale,
                 int /*per_clock*/) override {
    Step(in, out, grad, n, grad_scale, lr_scale);
  }
  bool ScalesGradientForStaleness() const override { return false; }
  size_t StateSize() const override { return m_.size() + v_.size(); }
  State Save() const override { return {{t_}, {m_, v_}}; }
  bool Load(const State& s) override {
    if (s.counters.size() != 1 || s.arrays.size() != 2 || s.arrays[0].size() != m_.size() ||
        s.arrays[1].size() != v_.size() || s.counters[0] < 0)
      return false;
    t_ = s.counters[0];
    m_ = s.arrays[0];
    v_ = s.arrays[1];
    return true;
  }

 private:
  RangePool* pool_;
  OptimizerSpec spec_;
  bool decoupled_;
  int64_t t_ = 0;
  std::vector<float> m_, v_;
};

}  // namespace

std::unique_ptr<ChunkOptimizer> MakeChunkOptimizer(const OptimizerSpec& spec, size_t n, RangePool* pool) {
  if (spec.name == OptimizerKind::kAdam || spec.name == OptimizerKind::kAdamW)
    return std::make_unique<Adam>(spec, n, pool);
  return std::make_unique<Sgd>(spec, n, pool);
}

}  // namespace geodesic::server
