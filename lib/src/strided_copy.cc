#include "strided_copy.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <gsl/assert>

#include "ringkv/kernels/kernel_table.h"

namespace ringkv::detail {
namespace {

struct Axis {
  std::int64_t size;
  std::int64_t src_stride;  // elements
  std::int64_t dst_stride;  // elements
};

// Drops size-1 axes and merges each axis into the one outside it when both
// tensors step over it contiguously (outer stride == inner size * inner stride).
// Returns the number of merged axes, outermost first; 0 means a single element.
int Coalesce(const Tensor& src, const Tensor& dst, std::array<Axis, Shape::kMaxRank>& axes) {
  int count = 0;
  for (int axis = 0; axis < src.Rank(); ++axis) {
    const Axis next{src.Dim(axis), src.Stride(axis), dst.Stride(axis)};
    if (next.size == 1) continue;
    if (count > 0) {
      Axis& last = axes[static_cast<std::size_t>(count - 1)];
      if (last.src_stride == next.size * next.src_stride &&
          last.dst_stride == next.size * next.dst_stride) {
        last = Axis{last.size * next.size, next.src_stride, next.dst_stride};
        continue;
      }
    }
    axes[static_cast<std::size_t>(count++)] = next;
  }
  return count;
}

// [first byte, one past the last byte) of the elements a view can reach.
struct ByteRange {
  std::uintptr_t begin;
  std::uintptr_t end;
};

ByteRange RangeOf(const Tensor& t) noexcept {
  std::int64_t last = 0;  // element offset; fits: the view lies inside its storage
  for (int axis = 0; axis < t.Rank(); ++axis) last += (t.Dim(axis) - 1) * t.Stride(axis);
  const auto begin = reinterpret_cast<std::uintptr_t>(t.Data());
  return {begin, begin + (static_cast<std::uintptr_t>(last) + 1) * SizeOf(t.Dtype())};
}

}  // namespace

bool MayOverlap(const Tensor& a, const Tensor& b) noexcept {
  if (a.NumElements() == 0 || b.NumElements() == 0) return false;
  const ByteRange ra = RangeOf(a);
  const ByteRange rb = RangeOf(b);
  return ra.begin < rb.end && rb.begin < ra.end;
}

void CopyElementsSafely(const Tensor& src, Tensor& dst) {
  if (MayOverlap(src, dst)) {
    CopyElements(src.Clone(), dst);
  } else {
    CopyElements(src, dst);
  }
}

void CopyElements(const Tensor& src, Tensor& dst) noexcept {
  Expects(src.GetShape() == dst.GetShape());
  Expects(src.NumElements() == 0 || dst.IsWritable());
  if (src.NumElements() == 0) return;

  std::array<Axis, Shape::kMaxRank> axes{};
  int count = Coalesce(src, dst, axes);
  // The innermost axis becomes one bulk run when both sides are unit-stride.
  std::int64_t run = 1;
  if (count > 0) {
    const Axis& inner = axes[static_cast<std::size_t>(count - 1)];
    if (inner.src_stride == 1 && inner.dst_stride == 1) {
      run = inner.size;
      --count;
    }
  }

  const auto convert = kernels::BestKernels().convert;
  const DType from = src.Dtype();
  const DType to = dst.Dtype();
  const auto src_elem = static_cast<std::ptrdiff_t>(SizeOf(from));
  const auto dst_elem = static_cast<std::ptrdiff_t>(SizeOf(to));
  const auto* src_base = static_cast<const std::byte*>(src.Data());
  auto* dst_base = static_cast<std::byte*>(dst.MutableData());
  const auto run_size = static_cast<std::size_t>(run);

  // The next axis out is walked by a tight loop (`rows` runs, fixed steps), the
  // rest by an odometer, so short runs do not pay for the odometer each time.
  Axis rows{1, 0, 0};
  if (count > 0) rows = axes[static_cast<std::size_t>(--count)];
  const std::ptrdiff_t src_step = rows.src_stride * src_elem;  // bytes
  const std::ptrdiff_t dst_step = rows.dst_stride * dst_elem;
  // Equal dtypes skip the table: an indirect call per run costs more than a
  // short run's memcpy (the [.., 8] head-dim slices of a cache).
  const std::size_t run_bytes = run_size * SizeOf(from);

  std::array<std::int64_t, Shape::kMaxRank> index{};  // position on each odometer axis
  std::ptrdiff_t src_offset = 0;                      // elements
  std::ptrdiff_t dst_offset = 0;
  while (true) {
    const std::byte* src_run = src_base + src_offset * src_elem;
    std::byte* dst_run = dst_base + dst_offset * dst_elem;
    if (from == to) {
      for (std::int64_t r = 0; r < rows.size; ++r, src_run += src_step, dst_run += dst_step) {
        std::memcpy(dst_run, src_run, run_bytes);
      }
    } else {
      for (std::int64_t r = 0; r < rows.size; ++r, src_run += src_step, dst_run += dst_step) {
        convert(from, src_run, to, dst_run, run_size);
      }
    }
    int axis = count - 1;
    for (; axis >= 0; --axis) {
      const Axis& a = axes[static_cast<std::size_t>(axis)];
      auto& i = index[static_cast<std::size_t>(axis)];
      src_offset += a.src_stride;
      dst_offset += a.dst_stride;
      if (++i < a.size) break;
      src_offset -= a.size * a.src_stride;
      dst_offset -= a.size * a.dst_stride;
      i = 0;
    }
    if (axis < 0) return;
  }
}

}  // namespace ringkv::detail
