#pragma once
// The one exported symbol of each per-ISA translation unit.
#include "ringkv/kernels/kernel_table.h"

namespace ringkv::kernels {
void FillScalarKernels(KernelTable& table) noexcept;
#ifdef RINGKV_HAVE_X86_TIERS
void FillSse42Kernels(KernelTable& table) noexcept;
void FillAvx2Kernels(KernelTable& table) noexcept;
#endif
#ifdef RINGKV_HAVE_AVX512
void FillAvx512Kernels(KernelTable& table) noexcept;
// Replaces the AVX-512 table's attend with the one built with AVX512-VNNI.
void FillAvx512VnniAttend(KernelTable& table) noexcept;
// Replaces it with the one built with AVX512-VNNI and AVX512-BF16.
void FillAvx512Bf16Attend(KernelTable& table) noexcept;
#endif
#ifdef RINGKV_HAVE_NEON
void FillNeonKernels(KernelTable& table) noexcept;
#endif
}  // namespace ringkv::kernels
