#include "rms_norm.h"

#include <cmath>
#include <gsl/assert>

namespace ringkv::model {

void RmsNorm(std::span<const float> x, std::span<const float> weight, float eps,
             std::span<float> y) {
  const std::size_t d = weight.size();
  Expects(d > 0 && x.size() == y.size() && x.size() % d == 0);
  for (std::size_t row = 0; row < x.size() / d; ++row) {
    const float* in = x.data() + row * d;
    float* out = y.data() + row * d;
    double sum = 0;  // one row at a time, so the sum order never depends on the batch
    for (std::size_t i = 0; i < d; ++i)
      sum += static_cast<double>(in[i]) * static_cast<double>(in[i]);
    const auto inv = static_cast<float>(
        1.0 / std::sqrt(sum / static_cast<double>(d) + static_cast<double>(eps)));
    for (std::size_t i = 0; i < d; ++i) out[i] = in[i] * inv * weight[i];
  }
}

}  // namespace ringkv::model
