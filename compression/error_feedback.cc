// Error feedback: residual per chunk = what the codec did not send. A chunk
// whose size changed since its residual was kept starts from zero (a
// residual for another shape of chunk means nothing).
#include <algorithm>

#include "compression/codec.h"

namespace geodesic::compression {

void ErrorFeedback::Correct(uint32_t chunk, const float* values, uint64_t n, float* corrected) {
  auto it = residual_.find(chunk);
  if (it == residual_.end() || it->second.size() != n) {
    if (corrected != values) std::copy(values, values + n, corrected);
    return;
  }
  const float* r = it->second.data();
  for (uint64_t i = 0; i < n; ++i) corrected[i] = values[i] + r[i];
}

void ErrorFeedback::Remember(uint32_t chunk, const float* corrected, const float* sent, uint64_t n) {
  std::vector<float>& r = residual_[chunk];
  r.resize(n);
  for (uint64_t i = 0; i < n; ++i) r[i] = corrected[i] - sent[i];
}

void ErrorFeedback::Reset(uint32_t chunk) { residual_.erase(chunk); }

void ErrorFeedback::ResetAll() { residual_.clear(); }

double ErrorFeedback::ResidualSquaredNorm() const {
  double sum = 0;
  for (const auto& [chunk, r] : residual_)
    for (float v : r) sum += static_cast<double>(v) * v;
  return sum;
}

}  // namespace geodesic::compression
