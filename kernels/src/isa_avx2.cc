// PLACEHOLDER until the xsimd kernels land: delegates to the scalar tier.
#include "fill_kernels.h"

namespace ringkv::kernels {
void FillAvx2Kernels(KernelTable& table) noexcept { FillScalarKernels(table); }
}  // namespace ringkv::kernels
