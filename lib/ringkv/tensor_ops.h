#pragma once
// Copying operations on tensors. All validate first and change nothing on error.

#include <span>

#include "ringkv/tensor.h"

namespace ringkv {

// Joins tensors of equal dtype, rank and dims (except `axis`) along `axis` into a
// fresh contiguous tensor.
Tensor Concatenate(std::span<const Tensor> tensors, int axis);

// Copies src into dst's region [begin, begin + src.Dim(axis)) along `axis`, in
// place (dst is a view: every view of its storage sees the write). dtypes must
// match; the other dims must be equal; dst must be writable (not a read-only
// Borrow). src may overlap dst.
void SliceUpdate(Tensor& dst, const Tensor& src, int axis, std::int64_t begin);

}  // namespace ringkv
