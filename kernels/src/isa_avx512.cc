// PLACEHOLDER until the xsimd kernels land: delegates to the scalar tier.
#include "fill_kernels.h"

namespace ringkv::kernels {
void FillAvx512Kernels(KernelTable& table) noexcept { FillScalarKernels(table); }
}  // namespace ringkv::kernels
