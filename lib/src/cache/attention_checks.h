#pragma once
// The output and query checks every attention entry point applies (attention.cc
// and the batched ones in lib/src/sequence/), so their errors read alike.
// Private to lib/.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "ringkv/kernels/kernel_table.h"
#include "ringkv/kernels/sdpa.h"
#include "ringkv/tensor.h"

namespace ringkv::detail {

// The kernels read q in place when it is f32 with a unit inner stride.
bool QueryInPlace(const Tensor& q);

// The bytes [lo, hi) an array's elements span (gaps included); empty for no elements.
struct ByteRange {
  std::uintptr_t lo = 0, hi = 0;
};
ByteRange RangeOf(const void* data, DType dtype, std::span<const std::int64_t> shape,
                  std::span<const std::int64_t> strides);
ByteRange RangeOf(const kernels::ArrayRef& a);
ByteRange RangeOf(const Tensor& t);
bool Overlap(const ByteRange& a, const ByteRange& b);

// Whether two elements in view share an address.
bool ElementsOverlap(const Tensor& t);

// out must be a writable f32 [B, Hq, L, v_dim] (B, Hq, L: q's dims 0 to 2) whose
// elements have their own addresses and do not overlap q. Throws ShapeError
// prefixed with [function].
void CheckOut(const char* function, const Tensor& out, const Tensor& q, std::int64_t v_dim);

// q's dim 3 must be the keys' k_dim and its dim 1 (heads) a positive multiple of
// kv_heads (grouped-query attention). Throws ShapeError prefixed with [function].
void CheckQueryHeads(const char* function, const Tensor& q, std::int64_t kv_heads,
                     std::int64_t k_dim);

// bytes rounded up to kSdpaWorkspaceAlignment.
constexpr std::size_t RoundUp(std::size_t bytes) {
  return (bytes + kernels::kSdpaWorkspaceAlignment - 1) / kernels::kSdpaWorkspaceAlignment *
         kernels::kSdpaWorkspaceAlignment;
}

// q [B, Hq, L, D] of any dtype and strides -> contiguous f32 [B, Hq, L, D] at dst.
void ConvertQuery(const Tensor& q, float* dst, const kernels::KernelTable& table);
// The same into any layout whose D axis is contiguous: element (b, h, l, c) goes
// to dst[b * dst_strides[0] + h * dst_strides[1] + l * dst_strides[2] + c].
void ConvertQuery(const Tensor& q, float* dst, const std::array<std::int64_t, 3>& dst_strides,
                  const kernels::KernelTable& table);

}  // namespace ringkv::detail
