// The AVX2 + FMA + F16C tier. Compiled with -mavx2 -mfma -mf16c.
// Exports only FillAvx2Kernels; the -inl.h bodies put everything else in an
// anonymous namespace (internal linkage), see simd_compat-inl.h.
#include "attend-inl.h"
#include "attend_quant-inl.h"
#include "convert-inl.h"
#include "convert_rows-inl.h"
#include "fill_kernels.h"
#include "ring_gather-inl.h"

namespace ringkv::kernels {

void FillAvx2Kernels(KernelTable& table) noexcept {
  using Arch = xsimd::fma3<xsimd::avx2>;
  FillConvert<Arch>(table);
  FillConvertRows<Arch>(table);
  FillRingGather<Arch>(table);
  FillAttend<Arch>(table);
}

}  // namespace ringkv::kernels
