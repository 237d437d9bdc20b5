// The AVX-512 (F, CD, DQ, BW, VL) tier. Compiled with -mavx512{f,cd,dq,bw,vl}.
// Exports only FillAvx512Kernels; the -inl.h bodies put everything else in an
// anonymous namespace (internal linkage), see simd_compat-inl.h.
#include "attend-inl.h"
#include "attend_quant-inl.h"
#include "convert-inl.h"
#include "convert_rows-inl.h"
#include "fill_kernels.h"
#include "ring_gather-inl.h"

namespace ringkv::kernels {

void FillAvx512Kernels(KernelTable& table) noexcept {
  using Arch = xsimd::avx512bw;
  FillConvert<Arch>(table);
  FillConvertRows<Arch>(table);
  FillRingGather<Arch>(table);
  FillAttend<Arch>(table);
}

}  // namespace ringkv::kernels
