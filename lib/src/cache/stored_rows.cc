#include "stored_rows.h"

#include <gsl/assert>
#include <gsl/narrow>

#include "strided_copy.h"

namespace ringkv::detail {
namespace {

// Byte offset of a carrier tensor's stride (its element is 4 bytes).
std::ptrdiff_t CarrierBytes(const Tensor& stored, int axis) {
  return static_cast<std::ptrdiff_t>(stored.Stride(axis)) *
         static_cast<std::ptrdiff_t>(SizeOf(stored.Dtype()));
}

}  // namespace

void StoreRows(const Tensor& src, DType dtype, std::int64_t n, Tensor& dst,
               const kernels::KernelTable& table) {
  Expects(src.Rank() == 4 && dst.Rank() == 4 && src.Dim(3) == n);
  Expects(dst.Dtype() == CarrierDtype(dtype) && dst.Dim(3) == CarrierColumns(dtype, n));
  if (!IsQuantized(dtype)) {
    CopyElementsSafely(src, dst);
    return;
  }
  // convert_rows walks each row contiguously: a source with a strided head dim
  // goes through one contiguous copy of this block run first.
  const Tensor rows = src.Stride(3) == 1 ? src : src.Contiguous();
  const auto* const src_base = static_cast<const std::byte*>(rows.Data());
  auto* const dst_base = static_cast<std::byte*>(dst.MutableData());
  const std::size_t src_elem = SizeOf(rows.Dtype());
  for (std::int64_t h = 0; h < rows.Dim(1); ++h) {
    const std::byte* from = src_base + static_cast<std::ptrdiff_t>(h * rows.Stride(1)) *
                                           static_cast<std::ptrdiff_t>(src_elem);
    std::byte* to = dst_base + h * CarrierBytes(dst, 1);
    table.convert_rows(rows.Dtype(), from, static_cast<std::ptrdiff_t>(rows.Stride(2)), dtype, to,
                       CarrierBytes(dst, 2), gsl::narrow<std::size_t>(rows.Dim(2)),
                       gsl::narrow<std::size_t>(n));
  }
}

Tensor LoadRows(const Tensor& stored, DType dtype, std::int64_t n,
                const kernels::KernelTable& table) {
  Expects(stored.Rank() == 4 && stored.Dtype() == CarrierDtype(dtype));
  if (!IsQuantized(dtype)) return stored.AsType(DType::kF32);
  const std::int64_t heads = stored.Dim(1), length = stored.Dim(2);
  Tensor out = Tensor::Uninitialized(DType::kF32, {1, heads, length, n});
  if (length == 0) return out;
  const auto* const src_base = static_cast<const std::byte*>(stored.Data());
  auto* const dst_base = static_cast<float*>(out.MutableData());
  for (std::int64_t h = 0; h < heads; ++h) {
    table.convert_rows(dtype, src_base + h * CarrierBytes(stored, 1), CarrierBytes(stored, 2),
                       DType::kF32, dst_base + h * length * n, static_cast<std::ptrdiff_t>(n),
                       gsl::narrow<std::size_t>(length), gsl::narrow<std::size_t>(n));
  }
  return out;
}

kernels::ArrayRef StoredArrayRef(const Tensor& stored, DType dtype, std::int64_t n) {
  Expects(stored.Rank() == 4 && stored.Dtype() == CarrierDtype(dtype));
  kernels::ArrayRef ref;
  ref.data = stored.Data();
  ref.dtype = dtype;
  for (int axis = 0; axis < 4; ++axis) {
    const auto a = static_cast<std::size_t>(axis);
    ref.shape[a] = stored.Dim(axis);
    ref.strides[a] = IsQuantized(dtype) ? CarrierBytes(stored, axis) : stored.Stride(axis);
  }
  ref.shape[3] = n;
  if (IsQuantized(dtype)) ref.strides[3] = 1;
  return ref;
}

}  // namespace ringkv::detail
