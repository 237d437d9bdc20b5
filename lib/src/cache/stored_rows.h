#pragma once
// How one side (K or V) of a storage block holds its rows, whatever the dtype.
//
// Float dtypes: a [1, Hkv, block_tokens, n] tensor of that dtype. Quantized
// dtypes (dtype.h: each row is its data then its f32 scales): Tensors cannot
// hold them, so the block keeps the bytes in a "carrier" f32 tensor
// [1, Hkv, block_tokens, CarrierColumns(dtype, n)], one stored row per carrier
// row, padded to 4 bytes (no padding when n % 4 == 0). Carrier tensors are only
// ever copied as bits (same-dtype copies are memcpy), never read as numbers:
// snapshots, forks, copy-on-write and ring copies move quantized rows unchanged.

#include <cstddef>
#include <cstdint>

#include "ringkv/dtype.h"
#include "ringkv/kernels/kernel_table.h"
#include "ringkv/kernels/sdpa.h"
#include "ringkv/tensor.h"

namespace ringkv::detail {

// The element dtype of a block side's tensor: dtype itself, or f32 for the carrier.
constexpr DType CarrierDtype(DType dtype) noexcept {
  return IsQuantized(dtype) ? DType::kF32 : dtype;
}

// Last-axis size of a block side's tensor for rows of n values.
constexpr std::int64_t CarrierColumns(DType dtype, std::int64_t n) noexcept {
  if (!IsQuantized(dtype)) return n;
  return static_cast<std::int64_t>((RowBytes(dtype, n) + 3) / 4);
}

// Bytes one stored row of n values takes in a block (scales and padding included).
constexpr std::size_t StoredRowBytes(DType dtype, std::int64_t n) noexcept {
  return static_cast<std::size_t>(CarrierColumns(dtype, n)) * SizeOf(CarrierDtype(dtype));
}

// Writes src [1, Hkv, L, n] (f32 / f16 / bf16, any strides) into the stored rows
// dst [1, Hkv, L, CarrierColumns(dtype, n)] as `dtype`: one pass per kv head
// (table.convert_rows quantizes as it copies). A float dtype is a plain
// converting copy. src must not overlap dst (a quantized cache hands out no
// views of its rows, so a user's tensor cannot).
void StoreRows(const Tensor& src, DType dtype, std::int64_t n, Tensor& dst,
               const kernels::KernelTable& table);

// Stored rows [1, Hkv, L, CarrierColumns(dtype, n)] as a fresh contiguous f32
// tensor [1, Hkv, L, n] (dequantised, or converted for a float dtype).
Tensor LoadRows(const Tensor& stored, DType dtype, std::int64_t n,
                const kernels::KernelTable& table);

// Stored rows as the kernels read them: shape [1, Hkv, L, n]; a quantized
// array's strides count bytes (sdpa.h), a float one's elements.
kernels::ArrayRef StoredArrayRef(const Tensor& stored, DType dtype, std::int64_t n);

}  // namespace ringkv::detail
