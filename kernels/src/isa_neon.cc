// The AArch64 Advanced SIMD (NEON) tier: 4 f32 lanes, FMA, f16 converted in
// registers (FCVTL/FCVTN). NEON is part of the AArch64 base architecture, so the
// unit needs no -m flag. Exports only FillNeonKernels; the -inl.h bodies put
// everything else in an anonymous namespace (internal linkage), see
// simd_compat-inl.h.
#include "attend-inl.h"
#include "attend_quant-inl.h"
#include "convert-inl.h"
#include "convert_rows-inl.h"
#include "fill_kernels.h"
#include "ring_gather-inl.h"

namespace ringkv::kernels {

void FillNeonKernels(KernelTable& table) noexcept {
  using Arch = xsimd::neon64;
  FillConvert<Arch>(table);
  FillConvertRows<Arch>(table);
  FillRingGather<Arch>(table);
  FillAttend<Arch>(table);
}

}  // namespace ringkv::kernels
