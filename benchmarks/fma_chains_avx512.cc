// The AVX-512 tier's f32 FMA peak loop (fma_chains.h), built with the AVX-512 tier's flags.
#include <immintrin.h>

#include "fma_chains.h"

namespace ringkv::bench {

// Sixteen chains of 16 lanes: two 512-bit FMA pipes at a 4-cycle latency need 8,
// the rest is margin for longer latencies; 16 + 2 of the 32 ZMM registers.
float FmaChainsAvx512(std::size_t iterations, float seed) noexcept {
  __m512 c0 = _mm512_set1_ps(seed), c1 = _mm512_set1_ps(seed + 1), c2 = _mm512_set1_ps(seed + 2),
         c3 = _mm512_set1_ps(seed + 3), c4 = _mm512_set1_ps(seed + 4),
         c5 = _mm512_set1_ps(seed + 5), c6 = _mm512_set1_ps(seed + 6),
         c7 = _mm512_set1_ps(seed + 7), c8 = _mm512_set1_ps(seed + 8),
         c9 = _mm512_set1_ps(seed + 9), c10 = _mm512_set1_ps(seed + 10),
         c11 = _mm512_set1_ps(seed + 11), c12 = _mm512_set1_ps(seed + 12),
         c13 = _mm512_set1_ps(seed + 13), c14 = _mm512_set1_ps(seed + 14),
         c15 = _mm512_set1_ps(seed + 15);
  const __m512 a = _mm512_set1_ps(0.999999f);
  const __m512 b = _mm512_set1_ps(1e-7f);
  for (std::size_t i = 0; i < iterations; ++i) {
    c0 = _mm512_fmadd_ps(c0, a, b);
    c1 = _mm512_fmadd_ps(c1, a, b);
    c2 = _mm512_fmadd_ps(c2, a, b);
    c3 = _mm512_fmadd_ps(c3, a, b);
    c4 = _mm512_fmadd_ps(c4, a, b);
    c5 = _mm512_fmadd_ps(c5, a, b);
    c6 = _mm512_fmadd_ps(c6, a, b);
    c7 = _mm512_fmadd_ps(c7, a, b);
    c8 = _mm512_fmadd_ps(c8, a, b);
    c9 = _mm512_fmadd_ps(c9, a, b);
    c10 = _mm512_fmadd_ps(c10, a, b);
    c11 = _mm512_fmadd_ps(c11, a, b);
    c12 = _mm512_fmadd_ps(c12, a, b);
    c13 = _mm512_fmadd_ps(c13, a, b);
    c14 = _mm512_fmadd_ps(c14, a, b);
    c15 = _mm512_fmadd_ps(c15, a, b);
  }
  const __m512 s0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                                  _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
  const __m512 s1 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)),
                                  _mm512_add_ps(_mm512_add_ps(c12, c13), _mm512_add_ps(c14, c15)));
  return _mm512_cvtss_f32(_mm512_add_ps(s0, s1));
}

}  // namespace ringkv::bench
