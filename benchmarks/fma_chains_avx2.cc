// The AVX2 tier's f32 FMA peak loop and its int16 multiply-add loop (fma_chains.h),
// built with -mavx2 -mfma.
#include <immintrin.h>

#include "fma_chains.h"

namespace ringkv::bench {

// Twelve chains of 8 lanes cover a 4-cycle FMA latency on two FMA pipes with
// room to spare; spelled out so that they stay in registers (an array spilled).
float FmaChainsAvx2(std::size_t iterations, float seed) noexcept {
  // Distinct starting values: equal chains would be merged into one by the compiler.
  __m256 c0 = _mm256_set1_ps(seed), c1 = _mm256_set1_ps(seed + 1), c2 = _mm256_set1_ps(seed + 2),
         c3 = _mm256_set1_ps(seed + 3), c4 = _mm256_set1_ps(seed + 4),
         c5 = _mm256_set1_ps(seed + 5), c6 = _mm256_set1_ps(seed + 6),
         c7 = _mm256_set1_ps(seed + 7), c8 = _mm256_set1_ps(seed + 8),
         c9 = _mm256_set1_ps(seed + 9), c10 = _mm256_set1_ps(seed + 10),
         c11 = _mm256_set1_ps(seed + 11);
  const __m256 a = _mm256_set1_ps(0.999999f);
  const __m256 b = _mm256_set1_ps(1e-7f);
  for (std::size_t i = 0; i < iterations; ++i) {
    c0 = _mm256_fmadd_ps(c0, a, b);
    c1 = _mm256_fmadd_ps(c1, a, b);
    c2 = _mm256_fmadd_ps(c2, a, b);
    c3 = _mm256_fmadd_ps(c3, a, b);
    c4 = _mm256_fmadd_ps(c4, a, b);
    c5 = _mm256_fmadd_ps(c5, a, b);
    c6 = _mm256_fmadd_ps(c6, a, b);
    c7 = _mm256_fmadd_ps(c7, a, b);
    c8 = _mm256_fmadd_ps(c8, a, b);
    c9 = _mm256_fmadd_ps(c9, a, b);
    c10 = _mm256_fmadd_ps(c10, a, b);
    c11 = _mm256_fmadd_ps(c11, a, b);
  }
  const __m256 sum =
      _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                                  _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7))),
                    _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
  return _mm256_cvtss_f32(sum);
}

// Each chain feeds its own value to vpmaddwd (so that no multiply is loop
// invariant) and adds the products back: 12 chains of 4 cycles (3 + 1) leave the
// multiply-adds, not the latency, as the limit.
float MaddChainsAvx2(std::size_t iterations, float seed) noexcept {
  const int s = static_cast<int>(seed);
  __m256i c0 = _mm256_set1_epi32(s), c1 = _mm256_set1_epi32(s + 1), c2 = _mm256_set1_epi32(s + 2),
          c3 = _mm256_set1_epi32(s + 3), c4 = _mm256_set1_epi32(s + 4),
          c5 = _mm256_set1_epi32(s + 5), c6 = _mm256_set1_epi32(s + 6),
          c7 = _mm256_set1_epi32(s + 7), c8 = _mm256_set1_epi32(s + 8),
          c9 = _mm256_set1_epi32(s + 9), c10 = _mm256_set1_epi32(s + 10),
          c11 = _mm256_set1_epi32(s + 11);
  const __m256i b = _mm256_set1_epi16(3);
  for (std::size_t i = 0; i < iterations; ++i) {
    c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(c0, b));
    c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(c1, b));
    c2 = _mm256_add_epi32(c2, _mm256_madd_epi16(c2, b));
    c3 = _mm256_add_epi32(c3, _mm256_madd_epi16(c3, b));
    c4 = _mm256_add_epi32(c4, _mm256_madd_epi16(c4, b));
    c5 = _mm256_add_epi32(c5, _mm256_madd_epi16(c5, b));
    c6 = _mm256_add_epi32(c6, _mm256_madd_epi16(c6, b));
    c7 = _mm256_add_epi32(c7, _mm256_madd_epi16(c7, b));
    c8 = _mm256_add_epi32(c8, _mm256_madd_epi16(c8, b));
    c9 = _mm256_add_epi32(c9, _mm256_madd_epi16(c9, b));
    c10 = _mm256_add_epi32(c10, _mm256_madd_epi16(c10, b));
    c11 = _mm256_add_epi32(c11, _mm256_madd_epi16(c11, b));
  }
  const __m256i sum = _mm256_add_epi32(
      _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)),
                       _mm256_add_epi32(_mm256_add_epi32(c4, c5), _mm256_add_epi32(c6, c7))),
      _mm256_add_epi32(_mm256_add_epi32(c8, c9), _mm256_add_epi32(c10, c11)));
  return static_cast<float>(_mm256_extract_epi32(sum, 0));
}

}  // namespace ringkv::bench
