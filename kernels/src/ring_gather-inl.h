#pragma once
// The reference's gatherRingCols with vectorised copies: ring slot s of a row
// takes logical column (s - ring_idx) mod k, i.e. the row is rotated right by
// r = ring_idx mod k. Per row that is two contiguous copies:
//   dst[0, r) = src[k - r, k)   and   dst[r, k) = src[0, k - r).
// The element size only scales the byte counts, so one byte-batch copy serves
// 1-, 2- and 4-byte elements.
#include <cstddef>
#include <cstdint>

#include "fill_kernels.h"
#include "simd_compat-inl.h"

namespace ringkv::kernels {
namespace {

template <class Arch>
void RingGather(const void* src, std::ptrdiff_t src_row_stride, void* dst,
                std::ptrdiff_t dst_row_stride, std::size_t rows, std::size_t k,
                std::size_t ring_idx, std::size_t elem_size) noexcept {
  if (k == 0 || rows == 0) return;
  const std::size_t r = ring_idx % k;
  const std::size_t row_bytes = k * elem_size;
  const std::size_t head_bytes = r * elem_size;  // dst[0, r)
  const auto src_step = src_row_stride * static_cast<std::ptrdiff_t>(elem_size);
  const auto dst_step = dst_row_stride * static_cast<std::ptrdiff_t>(elem_size);
  const auto* s = static_cast<const std::uint8_t*>(src);
  auto* d = static_cast<std::uint8_t*>(dst);
  const auto dense = static_cast<std::ptrdiff_t>(row_bytes);
  if (r == 0 && src_step == dense && dst_step == dense) {
    // No rotation over packed rows (k == 1 always lands here when packed): one copy.
    CopyBytes<Arch>(s, d, rows * row_bytes);
    return;
  }
  for (std::size_t row = 0; row < rows; ++row) {
    CopyBytes<Arch>(s + (row_bytes - head_bytes), d, head_bytes);
    CopyBytes<Arch>(s, d + head_bytes, row_bytes - head_bytes);
    s += src_step;
    d += dst_step;
  }
}

template <class Arch>
void FillRingGather(KernelTable& table) {
  table.ring_gather = RingGather<Arch>;
}

}  // namespace
}  // namespace ringkv::kernels
