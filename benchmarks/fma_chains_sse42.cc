// The SSE4.2 tier's f32 multiply-add peak loop (fma_chains.h), built with -msse4.2.
#include <immintrin.h>

#include "fma_chains.h"

namespace ringkv::bench {

// The tier has no FMA: a multiply and an add per step, 12 chains of 4 lanes,
// spelled out so they stay in the 16 XMM registers next to a and b.
float FmaChainsSse42(std::size_t iterations, float seed) noexcept {
  __m128 c0 = _mm_set1_ps(seed), c1 = _mm_set1_ps(seed + 1), c2 = _mm_set1_ps(seed + 2),
         c3 = _mm_set1_ps(seed + 3), c4 = _mm_set1_ps(seed + 4), c5 = _mm_set1_ps(seed + 5),
         c6 = _mm_set1_ps(seed + 6), c7 = _mm_set1_ps(seed + 7), c8 = _mm_set1_ps(seed + 8),
         c9 = _mm_set1_ps(seed + 9), c10 = _mm_set1_ps(seed + 10), c11 = _mm_set1_ps(seed + 11);
  const __m128 a = _mm_set1_ps(0.999999f);
  const __m128 b = _mm_set1_ps(1e-7f);
  for (std::size_t i = 0; i < iterations; ++i) {
    c0 = _mm_add_ps(_mm_mul_ps(c0, a), b);
    c1 = _mm_add_ps(_mm_mul_ps(c1, a), b);
    c2 = _mm_add_ps(_mm_mul_ps(c2, a), b);
    c3 = _mm_add_ps(_mm_mul_ps(c3, a), b);
    c4 = _mm_add_ps(_mm_mul_ps(c4, a), b);
    c5 = _mm_add_ps(_mm_mul_ps(c5, a), b);
    c6 = _mm_add_ps(_mm_mul_ps(c6, a), b);
    c7 = _mm_add_ps(_mm_mul_ps(c7, a), b);
    c8 = _mm_add_ps(_mm_mul_ps(c8, a), b);
    c9 = _mm_add_ps(_mm_mul_ps(c9, a), b);
    c10 = _mm_add_ps(_mm_mul_ps(c10, a), b);
    c11 = _mm_add_ps(_mm_mul_ps(c11, a), b);
  }
  const __m128 sum = _mm_add_ps(_mm_add_ps(_mm_add_ps(_mm_add_ps(c0, c1), _mm_add_ps(c2, c3)),
                                           _mm_add_ps(_mm_add_ps(c4, c5), _mm_add_ps(c6, c7))),
                                _mm_add_ps(_mm_add_ps(c8, c9), _mm_add_ps(c10, c11)));
  return _mm_cvtss_f32(sum);
}

}  // namespace ringkv::bench
