#include "attention_checks.h"

#include <fmt/format.h>

#include <array>
#include <cstdlib>
#include <utility>

#include "kernel_args.h"
#include "ringkv/error.h"
#include "ringkv/format.h"

namespace ringkv::detail {

void CheckQueryHeads(const char* function, const Tensor& q, std::int64_t kv_heads,
                     std::int64_t k_dim) {
  if (q.Dim(3) != k_dim) {
    throw ShapeError(fmt::format("[{}] q dim 3 (head dim) is {}, but the keys have {}", function,
                                 q.Dim(3), k_dim));
  }
  if (q.Dim(1) < 1 || q.Dim(1) % kv_heads != 0) {
    throw ShapeError(fmt::format("[{}] q dim 1 (heads) is {}, not a multiple of {} kv heads",
                                 function, q.Dim(1), kv_heads));
  }
}

bool QueryInPlace(const Tensor& q) {
  return q.Dtype() == DType::kF32 && (q.Stride(3) == 1 || q.Dim(3) == 1);
}

ByteRange RangeOf(const void* data, DType dtype, std::span<const std::int64_t> shape,
                  std::span<const std::int64_t> strides) {
  std::int64_t lo = 0, hi = 0;
  for (std::size_t axis = 0; axis < shape.size(); ++axis) {
    if (shape[axis] == 0) return {};
    if (IsQuantized(dtype) && axis + 1 == shape.size()) break;
    const std::int64_t reach = (shape[axis] - 1) * strides[axis];
    (reach < 0 ? lo : hi) += reach;
  }
  if (IsQuantized(dtype) && !shape.empty()) {
    // Strides count bytes and a row of the last axis takes RowBytes (its scales
    // included), not one byte per value: an int4 row of 64 is 40 bytes.
    const auto base = reinterpret_cast<std::uintptr_t>(data);
    return {base - static_cast<std::uintptr_t>(-lo),
            base + static_cast<std::uintptr_t>(hi) + RowBytes(dtype, shape.back())};
  }
  const auto elem = static_cast<std::int64_t>(SizeOf(dtype));
  const auto base = reinterpret_cast<std::uintptr_t>(data);
  return {base - static_cast<std::uintptr_t>(-lo * elem),
          base + static_cast<std::uintptr_t>((hi + 1) * elem)};
}

ByteRange RangeOf(const kernels::ArrayRef& a) {
  return RangeOf(a.data, a.dtype, a.shape, a.strides);
}

ByteRange RangeOf(const Tensor& t) {
  if (t.Empty()) return {};
  const kernels::ArrayRef a = ToArrayRef(t);
  return RangeOf(a);
}

bool Overlap(const ByteRange& a, const ByteRange& b) {
  return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi;
}

// With the axes of dim > 1 sorted by |stride|, each stride must step over
// everything the smaller ones reach.
bool ElementsOverlap(const Tensor& t) {
  std::array<std::pair<std::int64_t, std::int64_t>, 4> axes{};  // (|stride|, dim)
  std::size_t n = 0;
  for (int axis = 0; axis < t.Rank(); ++axis) {
    if (t.Dim(axis) > 1) axes[n++] = {std::abs(t.Stride(axis)), t.Dim(axis)};
  }
  // Insertion sort: std::sort over a 4-array trips GCC 12's -Warray-bounds.
  for (std::size_t i = 1; i < n; ++i) {
    for (std::size_t j = i; j > 0 && axes[j] < axes[j - 1]; --j) std::swap(axes[j], axes[j - 1]);
  }
  std::int64_t reach = 0;  // the largest offset the smaller axes make
  for (std::size_t i = 0; i < n; ++i) {
    if (axes[i].first <= reach) return true;
    reach += axes[i].first * (axes[i].second - 1);
  }
  return false;
}

void CheckOut(const char* function, const Tensor& out, const Tensor& q, std::int64_t v_dim) {
  const std::int64_t batch = q.Dim(0), heads = q.Dim(1), length = q.Dim(2);
  if (out.Empty()) {
    throw ShapeError(fmt::format("[{}] out is empty (no storage); expected f32 [{}, {}, {}, {}]",
                                 function, batch, heads, length, v_dim));
  }
  if (!out.IsWritable()) {
    throw ShapeError(
        fmt::format("[{}] out (shape {}) is read-only (borrowed through a const pointer)", function,
                    out.GetShape()));
  }
  if (out.Dtype() != DType::kF32) {
    throw ShapeError(fmt::format("[{}] out has dtype {}, expected f32", function, out.Dtype()));
  }
  if (out.Rank() != 4 || out.Dim(0) != batch || out.Dim(1) != heads || out.Dim(2) != length ||
      out.Dim(3) != v_dim) {
    throw ShapeError(fmt::format("[{}] out has shape {}, expected [{}, {}, {}, {}] (q shape {})",
                                 function, out.GetShape(), batch, heads, length, v_dim,
                                 q.GetShape()));
  }
  if (ElementsOverlap(out)) {
    throw ShapeError(fmt::format(
        "[{}] out (shape {}, strides [{}, {}, {}, {}]) has elements that share memory", function,
        out.GetShape(), out.Stride(0), out.Stride(1), out.Stride(2), out.Stride(3)));
  }
  if (Overlap(RangeOf(out), RangeOf(q))) {
    throw ShapeError(fmt::format("[{}] out (shape {}) overlaps q (shape {}) in memory", function,
                                 out.GetShape(), q.GetShape()));
  }
}

void ConvertQuery(const Tensor& q, float* dst, const kernels::KernelTable& table) {
  const std::int64_t heads = q.Dim(1), length = q.Dim(2), dim = q.Dim(3);
  ConvertQuery(q, dst, {heads * length * dim, length * dim, dim}, table);
}

void ConvertQuery(const Tensor& q, float* dst, const std::array<std::int64_t, 3>& dst_strides,
                  const kernels::KernelTable& table) {
  const std::int64_t batch = q.Dim(0), heads = q.Dim(1), length = q.Dim(2), dim = q.Dim(3);
  const auto elem = static_cast<std::int64_t>(SizeOf(q.Dtype()));
  const auto* src = static_cast<const std::byte*>(q.Data());
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t l = 0; l < length; ++l) {
        const std::byte* row = src + (b * q.Stride(0) + h * q.Stride(1) + l * q.Stride(2)) * elem;
        float* out = dst + b * dst_strides[0] + h * dst_strides[1] + l * dst_strides[2];
        if (q.Stride(3) == 1) {
          table.convert(q.Dtype(), row, DType::kF32, out, static_cast<std::size_t>(dim));
          continue;
        }
        for (std::int64_t c = 0; c < dim; ++c) {
          table.convert(q.Dtype(), row + c * q.Stride(3) * elem, DType::kF32, out + c, 1);
        }
      }
    }
  }
}

}  // namespace ringkv::detail
