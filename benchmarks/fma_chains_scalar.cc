// The scalar tier's f32 multiply-add peak loop (fma_chains.h). Built without
// auto-vectorisation (CMakeLists.txt): the scalar kernels run one lane at a time.
#include "fma_chains.h"

namespace ringkv::bench {

// Twelve chains of mul + add (3 + 3 cycles of latency) keep two multiply and two
// add pipes busy; spelled out so they stay in registers.
float FmaChainsScalar(std::size_t iterations, float seed) noexcept {
  float c0 = seed, c1 = seed + 1, c2 = seed + 2, c3 = seed + 3, c4 = seed + 4, c5 = seed + 5,
        c6 = seed + 6, c7 = seed + 7, c8 = seed + 8, c9 = seed + 9, c10 = seed + 10,
        c11 = seed + 11;
  const float a = 0.999999f;
  const float b = 1e-7f;
  for (std::size_t i = 0; i < iterations; ++i) {
    c0 = c0 * a + b;
    c1 = c1 * a + b;
    c2 = c2 * a + b;
    c3 = c3 * a + b;
    c4 = c4 * a + b;
    c5 = c5 * a + b;
    c6 = c6 * a + b;
    c7 = c7 * a + b;
    c8 = c8 * a + b;
    c9 = c9 * a + b;
    c10 = c10 * a + b;
    c11 = c11 * a + b;
  }
  return ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7)) + ((c8 + c9) + (c10 + c11));
}

}  // namespace ringkv::bench
