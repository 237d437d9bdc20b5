#pragma once
// How far a kernel's output is from the float64 reference (support/sdpa_reference.h).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "ringkv/kernels/sdpa.h"

namespace ringkv::test {

// Max abs difference between params.out (at params.out_strides) and the dense
// [B, Hq, L, Dv] reference; infinity when any output is not finite.
inline double MaxAbsError(const kernels::SdpaParams& params, const std::vector<double>& ref) {
  const std::int64_t batch = params.q.shape[0], hq = params.q.shape[1], seq_l = params.q.shape[2];
  const std::int64_t dv = params.kv.front().v.shape[3];
  const auto& st = params.out_strides;
  double worst = 0.0;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < hq; ++h) {
      for (std::int64_t i = 0; i < seq_l; ++i) {
        for (std::int64_t e = 0; e < dv; ++e) {
          const float got = params.out[b * st[0] + h * st[1] + i * st[2] + e * st[3]];
          const double want = ref[static_cast<std::size_t>(((b * hq + h) * seq_l + i) * dv + e)];
          if (!std::isfinite(got)) return std::numeric_limits<double>::infinity();
          worst = std::max(worst, std::abs(static_cast<double>(got) - want));
        }
      }
    }
  }
  return worst;
}

}  // namespace ringkv::test
