#include "ringkv/tensor_ops.h"

#include <fmt/format.h>

#include <cstddef>
#include <gsl/narrow>
#include <vector>

#include "ringkv/error.h"
#include "ringkv/format.h"
#include "ringkv/kernels/kernel_table.h"
#include "strided_copy.h"

namespace ringkv {
namespace {

// Throws unless `other` matches `first` in dtype, rank and every dim but `axis`.
void CheckCompatible(const char* function, const char* name, const Tensor& first,
                     const Tensor& other, int axis) {
  if (other.Dtype() != first.Dtype()) {
    throw ShapeError(
        fmt::format("[{}] {} dtype {} != {}", function, name, other.Dtype(), first.Dtype()));
  }
  if (other.Rank() != first.Rank()) {
    throw ShapeError(fmt::format("[{}] {} rank {} (shape {}) != {} (shape {})", function, name,
                                 other.Rank(), other.GetShape(), first.Rank(), first.GetShape()));
  }
  for (int a = 0; a < first.Rank(); ++a) {
    if (a != axis && other.Dim(a) != first.Dim(a)) {
      throw ShapeError(fmt::format("[{}] {} dim {} is {} (shape {}), expected {} (shape {})",
                                   function, name, a, other.Dim(a), other.GetShape(), first.Dim(a),
                                   first.GetShape()));
    }
  }
}

}  // namespace

Tensor Concatenate(std::span<const Tensor> tensors, int axis) {
  if (tensors.empty()) throw ShapeError("[Concatenate] tensors is empty");
  const Tensor& first = tensors[0];
  if (axis < 0 || axis >= first.Rank()) {
    throw ShapeError(fmt::format("[Concatenate] axis {} outside [0, {}) for tensors[0] shape {}",
                                 axis, first.Rank(), first.GetShape()));
  }
  std::int64_t total = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = fmt::format("tensors[{}]", i);
    CheckCompatible("Concatenate", name.c_str(), first, tensors[i], axis);
    total += tensors[i].Dim(axis);
  }

  Tensor result = Tensor::Uninitialized(first.Dtype(), first.GetShape().With(axis, total));
  std::int64_t begin = 0;
  for (const Tensor& part : tensors) {
    const std::int64_t end = begin + part.Dim(axis);
    Tensor region = result.Slice(axis, begin, end);
    detail::CopyElements(part, region);
    begin = end;
  }
  return result;
}

void SliceUpdate(Tensor& dst, const Tensor& src, int axis, std::int64_t begin) {
  if (axis < 0 || axis >= dst.Rank()) {
    throw ShapeError(fmt::format("[SliceUpdate] axis {} outside [0, {}) for dst shape {}", axis,
                                 dst.Rank(), dst.GetShape()));
  }
  if (!dst.IsWritable()) {
    throw Error(fmt::format(
        "[SliceUpdate] dst {} is borrowed read-only (Borrow of a const pointer)", Summary(dst)));
  }
  CheckCompatible("SliceUpdate", "src", dst, src, axis);
  const std::int64_t size = dst.Dim(axis);
  const std::int64_t length = src.Dim(axis);
  if (begin < 0 || begin > size - length) {
    throw ShapeError(
        fmt::format("[SliceUpdate] begin {} + src dim {} of size {} exceeds dst dim {} of size {}",
                    begin, axis, length, axis, size));
  }

  Tensor region = dst.Slice(axis, begin, begin + length);
  // A source over the same bytes (a view of dst, or a borrow of the same buffer)
  // is copied out first.
  detail::CopyElementsSafely(src, region);
}

Tensor AsStored(const Tensor& x, DType storage) {
  if (!IsStorageDType(storage)) {
    throw Error(
        fmt::format("[AsStored] storage dtype {} is not one of f32, f16, bf16, int8, int4, int4h",
                    static_cast<int>(storage)));
  }
  if (!IsQuantized(storage)) return x.AsType(storage);
  if (x.Empty()) return Tensor();  // as AsType
  if (x.Rank() == 0) {
    throw ShapeError(fmt::format("[AsStored] x {} has no last axis to quantize as {} rows",
                                 Summary(x), storage));
  }
  const std::int64_t n = x.Dim(x.Rank() - 1);
  if (IsInt4(storage) && n % kI4Group != 0) {
    throw ShapeError(
        fmt::format("[AsStored] x {} has a last dim of {}, not a multiple of {} ({} groups)",
                    Summary(x), n, kI4Group, storage));
  }
  Tensor out = Tensor::Uninitialized(DType::kF32, x.GetShape());
  if (x.NumElements() == 0) return out;
  // Through stored rows and back, as a cache write and its attention would.
  const Tensor rows = x.Contiguous();
  const auto count = gsl::narrow<std::size_t>(x.NumElements() / n);
  const auto width = gsl::narrow<std::size_t>(n);
  const std::size_t row_bytes = RowBytes(storage, n);
  std::vector<std::byte> stored(count * row_bytes);
  const kernels::KernelTable& table = kernels::BestKernels();
  table.convert_rows(rows.Dtype(), rows.Data(), gsl::narrow<std::ptrdiff_t>(n), storage,
                     stored.data(), gsl::narrow<std::ptrdiff_t>(row_bytes), count, width);
  table.convert_rows(storage, stored.data(), gsl::narrow<std::ptrdiff_t>(row_bytes), DType::kF32,
                     out.MutableData(), gsl::narrow<std::ptrdiff_t>(n), count, width);
  return out;
}

}  // namespace ringkv
