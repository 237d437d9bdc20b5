#pragma once
// PLACEHOLDER: until the xsimd body lands, this tier uses the scalar one.
#include "fill_kernels.h"
#include "simd_compat-inl.h"

namespace ringkv::kernels {
namespace {

template <class Arch>
void FillRingGather(KernelTable& table) {
  KernelTable scalar;
  FillScalarKernels(scalar);
  table.ring_gather = scalar.ring_gather;
}

}  // namespace
}  // namespace ringkv::kernels
