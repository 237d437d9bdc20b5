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

// What a cache storing `storage` reads back for `x` (f32, f16 or bf16, any
// strides), as a fresh contiguous tensor of x's shape: x.AsType(storage) for a
// float dtype; for int8 / int4 an f32 tensor of every last-axis row quantized
// as a cache write quantizes it (one scale per row, or per group of 32) and
// dequantized (x = scale * q), bit for bit what the cache's attention reads.
// For a no-cache reference that sees the keys and values a quantized cache
// holds. Throws ringkv::Error for a `storage` that is not a storage dtype, a
// rank-0 x with int8 / int4, or int4 with a last dim not a multiple of 32.
Tensor AsStored(const Tensor& x, DType storage);

}  // namespace ringkv
