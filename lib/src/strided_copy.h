#pragma once
// The one copy loop behind Clone, Contiguous, AsType, Concatenate and SliceUpdate.

#include "ringkv/tensor.h"

namespace ringkv::detail {

// dst[i] = src[i] for every index of their common shape, converted from
// src.Dtype() to dst.Dtype(). Dimensions are coalesced first, so the inner loop
// is one bulk convert (a memcpy when the dtypes agree) per contiguous run, not
// one call per element. The caller has checked the shapes; src and dst must not
// overlap in memory.
void CopyElements(const Tensor& src, Tensor& dst) noexcept;

}  // namespace ringkv::detail
