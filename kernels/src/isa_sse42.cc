// The SSE4.2 tier (no F16C: f16 converts lane by lane). Compiled with -msse4.2.
// Exports only FillSse42Kernels; the -inl.h bodies put everything else in an
// anonymous namespace (internal linkage), see simd_compat-inl.h.
#include "attend-inl.h"
#include "attend_quant-inl.h"
#include "convert-inl.h"
#include "convert_rows-inl.h"
#include "fill_kernels.h"
#include "ring_gather-inl.h"

namespace ringkv::kernels {

void FillSse42Kernels(KernelTable& table) noexcept {
  using Arch = xsimd::sse4_2;
  FillConvert<Arch>(table);
  FillConvertRows<Arch>(table);
  FillRingGather<Arch>(table);
  FillAttend<Arch>(table);
}

}  // namespace ringkv::kernels
