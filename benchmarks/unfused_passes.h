#pragma once
// The arithmetic of an unfused decode attention (bench_unfused.cc): scores =
// scale q.K^T into a buffer, a softmax over each row of it, out = P.V, each a pass
// of its own over f32 rows. Written as plain vectorisable loops (no intrinsics)
// and compiled once per tier in units of their own (unfused_passes_<tier>.cc with
// the tier's flags, -O3), so that the comparison with the fused kernel of a tier
// is made at that tier's vector width.
#include <cstddef>

#include "ringkv/kernels/isa.h"

namespace ringkv::bench {

struct UnfusedPasses {
  // scores[g * ld + j] = scale * sum_i q[g * d + i] k[j * d + i], for g < groups,
  // j < n. q [groups, d], k [n, d], d % 16 == 0.
  void (*scores)(const float* q, std::size_t groups, const float* k, std::size_t n, std::size_t d,
                 float scale, float* scores, std::size_t ld) noexcept = nullptr;
  // In place over one row of n > 0 finite values: s_j <- exp(s_j - max s) / sum_i exp(s_i - max s).
  void (*softmax)(float* row, std::size_t n) noexcept = nullptr;
  // out[g * d + i] += sum_j p[g * ld + j] v[j * d + i], for g < groups. v [n, d].
  void (*weighted_sum)(const float* p, std::size_t ld, std::size_t groups, const float* v,
                       std::size_t n, std::size_t d, float* out) noexcept = nullptr;
};

// One per unit; each fills the table with its unit's copies.
void FillUnfusedScalar(UnfusedPasses& passes) noexcept;    // baseline, not vectorised
void FillUnfusedBaseline(UnfusedPasses& passes) noexcept;  // baseline x86-64 (SSE2)
void FillUnfusedAvx2(UnfusedPasses& passes) noexcept;
void FillUnfusedAvx512(UnfusedPasses& passes) noexcept;  // only with RINGKV_ENABLE_AVX512

// The passes built for `isa`'s flags: the AVX2 and AVX-512 units for those tiers,
// the baseline (SSE2) unit for SSE4.2, the unvectorised one for scalar. Expects KernelsFor(isa) !=
// nullptr.
UnfusedPasses UnfusedPassesFor(kernels::Isa isa);

}  // namespace ringkv::bench
