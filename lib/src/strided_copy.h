#pragma once
// The one copy loop behind Clone, Contiguous, AsType, Concatenate and SliceUpdate.

#include "ringkv/tensor.h"

namespace ringkv::detail {

// dst[i] = src[i] for every index of their common shape, converted from
// src.Dtype() to dst.Dtype(). Dimensions are coalesced first, so the inner loop
// is one bulk convert (a memcpy when the dtypes agree) per contiguous run, not
// one call per element. The caller has checked the shapes; src and dst must not
// overlap in memory, and dst must be writable.
void CopyElements(const Tensor& src, Tensor& dst) noexcept;

// Whether the address ranges the two views span intersect (false when either
// has no elements). Conservative: views that interleave without sharing an
// element count as overlapping. Works across storages (two borrows of one buffer).
bool MayOverlap(const Tensor& a, const Tensor& b) noexcept;

// CopyElements, through a copy of src first when src may overlap dst (the only
// case that allocates).
void CopyElementsSafely(const Tensor& src, Tensor& dst);

}  // namespace ringkv::detail
