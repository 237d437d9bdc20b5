#pragma once
// One immutable table of kernel entry points per ISA tier. Each per-ISA
// translation unit exports a single function that fills its table; everything
// else in those units has internal linkage (docs/kernels.md explains why).

#include <cstddef>
#include <cstdint>

#include "ringkv/kernels/dtype.h"
#include "ringkv/kernels/isa.h"

namespace ringkv::kernels {

struct AttendTile;  // defined in kernels/src/attend_tile.h (internal)

struct KernelTable {
  Isa isa = Isa::kScalar;

  // dst[i] = src[i] converted from `from` to `to`, round-to-nearest-even when
  // narrowing, NaN and Inf preserved. Any pair of dtypes, including same-type copy.
  void (*convert)(DType from, const void* src, DType to, void* dst,
                  std::size_t n) noexcept = nullptr;

  // Row-wise copy of `rows` rows of `n` values: row r is read at src + r * src_stride
  // and written at dst + r * dst_stride, strides in SizeOf units of each side's
  // dtype. Float to float converts as `convert`; float to quantized (kI8 / kI4,
  // see dtype.h) quantizes, computing each row's or group's scales; quantized to
  // f32 / f16 / bf16 dequantizes; quantized to the same dtype copies the bytes.
  // Quantized to another quantized dtype is not supported (Expects).
  void (*convert_rows)(DType from, const void* src, std::ptrdiff_t src_stride, DType to, void* dst,
                       std::ptrdiff_t dst_stride, std::size_t rows,
                       std::size_t n) noexcept = nullptr;

  // The reference's gatherRingCols: for each of `rows` rows of `k` elements of
  // `elem_size` bytes, dst[s] = src[(s - ring_idx) mod k] (logical column 0 is the
  // oldest key; ring slot s holds logical column (s - ring_idx) mod k).
  void (*ring_gather)(const void* src, std::ptrdiff_t src_row_stride, void* dst,
                      std::ptrdiff_t dst_row_stride, std::size_t rows, std::size_t k,
                      std::size_t ring_idx, std::size_t elem_size) noexcept = nullptr;

  // Online-softmax attention of one tile of query rows against one range of keys
  // of one kv head; produces an unnormalised partial state (see attend_tile.h).
  void (*attend)(const AttendTile& tile) noexcept = nullptr;
  // Whether attend over bf16 K computes its scores from the queries rounded to
  // bf16 (nearest even), as bf16 dot product instructions need; queries that
  // are bf16 values already are used as they are. True for the AVX-512 tier on
  // CPUs with AVX512-BF16 (docs/kernels.md, "bf16 decode scores"). Every other
  // dtype, and every other table, uses the f32 queries.
  bool attend_rounds_bf16_queries = false;
  // Whether attend over bf16 V weighs it with the softmax weights rounded to
  // bf16 (nearest even; the normaliser sums the unrounded ones), as the bf16
  // dot products of its V step need. Set where attend_rounds_bf16_queries is
  // (docs/kernels.md, "bf16 V sums", which says what it costs).
  bool attend_rounds_bf16_weights = false;
};

// The table for `isa`, or nullptr when the tier is not compiled in, cannot run
// here, or is above the process's tier cap (TierCap(), RINGKV_ISA).
const KernelTable* KernelsFor(Isa isa) noexcept;

// The best table for this CPU within the tier cap; detection runs once, the
// table never changes. Tensor conversions and cache writes run this table.
const KernelTable& BestKernels() noexcept;

}  // namespace ringkv::kernels
