#pragma once
// K, V or Q of one layer as the kernels see it: [1, heads, rows, d] with
// deterministic values, quantized rows made by quantizing f32 ones, as the
// cache write does. Shared by the SDPA benchmarks and the A/B probe so that
// both time the same bytes.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "bench_util.h"
#include "ringkv/dtype.h"
#include "ringkv/kernels/kernel_table.h"
#include "ringkv/kernels/sdpa.h"
#include "roofline.h"

namespace ringkv::bench {

// A row's stride: d elements, or for quantized rows their bytes with scales.
inline std::int64_t RowStride(DType dtype, std::int64_t d) {
  return IsQuantized(dtype) ? static_cast<std::int64_t>(RowBytes(dtype, d)) : d;
}

// How many layers of kv_bytes each a cold benchmark cycles through so that K+V
// never stay cached: together at least four times the L3 this machine reports
// (at least 128 MiB, the figure for a 32 MiB L3, where it reports none), and
// never fewer than two. Sizing by the reported L3 matters on hosts with a large
// one (300 MiB on some cloud Xeons), where a fixed 128 MiB could stay cached.
inline std::size_t ColdLayerCount(std::size_t kv_bytes) {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const std::size_t footprint =
      std::max<std::size_t>(128 * kMiB, l3 > 0 ? 4 * static_cast<std::size_t>(l3) : 0);
  return std::max<std::size_t>(2, (footprint + kv_bytes - 1) / kv_bytes);
}

// The contiguous [1, heads, rows, d] view of `b`.
inline kernels::ArrayRef ContiguousRows(const Buffer& b, DType dtype, std::int64_t heads,
                                        std::int64_t rows, std::int64_t d) {
  const std::int64_t row = RowStride(dtype, d);
  kernels::ArrayRef a;
  a.data = b.Data();
  a.dtype = dtype;
  a.shape = {1, heads, rows, d};
  a.strides = {heads * rows * row, rows * row, row, 1};
  return a;
}

// heads x rows rows of d random values in `dtype`, and their view. Movable:
// the view points into the heap buffer, which a move does not relocate.
struct StoredRows {
  Buffer bytes{0};
  kernels::ArrayRef array;
};

inline StoredRows RandomStoredRows(DType dtype, std::int64_t heads, std::int64_t rows,
                                   std::int64_t d, std::uint32_t seed) {
  const auto count = static_cast<std::size_t>(heads * rows);
  StoredRows s;
  if (IsQuantized(dtype)) {
    const Buffer f32 = RandomBuffer(DType::kF32, count * static_cast<std::size_t>(d), seed);
    s.bytes = Buffer(count * RowBytes(dtype, d));
    kernels::BestKernels().convert_rows(DType::kF32, f32.Data(), d, dtype, s.bytes.Data(),
                                        RowStride(dtype, d), count, static_cast<std::size_t>(d));
  } else {
    s.bytes = RandomBuffer(dtype, count * static_cast<std::size_t>(d), seed);
  }
  s.array = ContiguousRows(s.bytes, dtype, heads, rows, d);
  return s;
}

// One layer's K and V, [1, heads, rows, d] each, and the segment over them.
struct KvLayer {
  KvLayer(DType dtype, std::int64_t heads, std::int64_t rows, std::int64_t d, std::uint32_t seed)
      : k(RandomStoredRows(dtype, heads, rows, d, seed)),
        v(RandomStoredRows(dtype, heads, rows, d, seed + 1)),
        segment{k.array, v.array} {}
  StoredRows k;
  StoredRows v;
  kernels::KvSegment segment;
};

}  // namespace ringkv::bench
