#include "ringkv/tensor.h"

#include <fmt/format.h>

#include <cstddef>
#include <gsl/assert>
#include <gsl/narrow>
#include <limits>
#include <memory>
#include <new>
#include <string>

#include "dtype_check.h"
#include "ringkv/error.h"
#include "ringkv/format.h"
#include "ringkv/kernels/kernel_table.h"
#include "strided_copy.h"

namespace ringkv {
namespace {

// Row-major strides of a contiguous tensor of `shape`, in elements.
std::array<std::int64_t, Shape::kMaxRank> ContiguousStrides(const Shape& shape) {
  std::array<std::int64_t, Shape::kMaxRank> strides{};
  std::int64_t step = 1;
  for (int axis = shape.Rank() - 1; axis >= 0; --axis) {
    strides[static_cast<std::size_t>(axis)] = step;
    step *= shape.Dims()[static_cast<std::size_t>(axis)];
  }
  return strides;
}

void CheckAxis(const char* function, const Tensor& tensor, int axis) {
  if (axis < 0 || axis >= tensor.Rank()) {
    throw ShapeError(fmt::format("[{}] axis {} outside [0, {}) for shape {}", function, axis,
                                 tensor.Rank(), tensor.GetShape()));
  }
}

}  // namespace

Tensor Tensor::Zeros(DType dtype, const Shape& shape) {
  return Allocate("Tensor::Zeros", dtype, shape, Storage::Init::kZero);
}

Tensor Tensor::Uninitialized(DType dtype, const Shape& shape) {
  return Allocate("Tensor::Uninitialized", dtype, shape, Storage::Init::kUninitialized);
}

Tensor Tensor::Allocate(const char* function, DType dtype, const Shape& shape, Storage::Init init) {
  detail::CheckDType(function, dtype);
  // The element count fits int64 (Shape checks it); the byte count may not fit
  // size_t, and no object may exceed PTRDIFF_MAX bytes (the kernels take
  // pointer differences).
  const auto elements = static_cast<std::size_t>(shape.NumElements());
  constexpr auto kMaxBytes = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(elements, SizeOf(dtype), &bytes) || bytes > kMaxBytes) {
    const std::string total = bytes > kMaxBytes ? fmt::format(" are {} bytes,", bytes) : " are";
    throw Error(
        fmt::format("[{}] shape {} of {}: {} elements of {} bytes{} more than 2^63 - 1 bytes",
                    function, shape, dtype, elements, SizeOf(dtype), total));
  }
  const auto cannot_allocate = [&] {
    return Error(fmt::format("[{}] shape {} of {}: cannot allocate {} bytes", function, shape,
                             dtype, bytes));
  };
  Tensor tensor;
  try {
    tensor.storage_ = std::make_shared<Storage>(bytes, init);
  } catch (const std::bad_alloc&) {  // the shared_ptr's control block
    throw cannot_allocate();
  } catch (const Error&) {  // the bytes (Storage)
    throw cannot_allocate();
  }
  tensor.dtype_ = dtype;
  tensor.shape_ = shape;
  tensor.strides_ = ContiguousStrides(shape);
  tensor.offset_ = 0;
  return tensor;
}

Tensor Tensor::FromVector(std::span<const float> values, const Shape& shape, DType dtype) {
  detail::CheckDType("Tensor::FromVector", dtype);
  if (gsl::narrow<std::int64_t>(values.size()) != shape.NumElements()) {
    throw ShapeError(fmt::format("[Tensor::FromVector] values.size() {} != {} elements of shape {}",
                                 values.size(), shape.NumElements(), shape));
  }
  Tensor tensor = Allocate("Tensor::FromVector", dtype, shape, Storage::Init::kUninitialized);
  kernels::BestKernels().convert(DType::kF32, values.data(), dtype, tensor.MutableData(),
                                 values.size());
  return tensor;
}

std::int64_t Tensor::Stride(int axis) const {
  CheckAxis("Tensor::Stride", *this, axis);
  return strides_[static_cast<std::size_t>(axis)];
}

std::size_t Tensor::NumBytes() const noexcept {
  return static_cast<std::size_t>(NumElements()) * SizeOf(dtype_);
}

bool Tensor::IsContiguous() const noexcept {
  if (NumElements() == 0) return true;
  std::int64_t step = 1;
  for (int axis = Rank() - 1; axis >= 0; --axis) {
    const auto a = static_cast<std::size_t>(axis);
    // A size-1 axis is never stepped over, so its stride does not matter.
    if (shape_.Dims()[a] == 1) continue;
    if (strides_[a] != step) return false;
    step *= shape_.Dims()[a];
  }
  return true;
}

const void* Tensor::Data() const noexcept {
  if (storage_ == nullptr) return nullptr;
  return storage_->Data() + static_cast<std::size_t>(offset_) * SizeOf(dtype_);
}

void* Tensor::MutableData() noexcept {
  if (storage_ == nullptr) return nullptr;
  return storage_->Data() + static_cast<std::size_t>(offset_) * SizeOf(dtype_);
}

Tensor Tensor::Slice(int axis, std::int64_t begin, std::int64_t end) const {
  CheckAxis("Tensor::Slice", *this, axis);
  const std::int64_t size = Dim(axis);
  if (begin < 0) {
    throw ShapeError(
        fmt::format("[Tensor::Slice] begin {} is negative (dim {} of size {})", begin, axis, size));
  }
  if (end > size) {
    throw ShapeError(
        fmt::format("[Tensor::Slice] end {} exceeds dim {} of size {}", end, axis, size));
  }
  if (begin > end) {
    throw ShapeError(fmt::format("[Tensor::Slice] begin {} > end {} on dim {} of size {}", begin,
                                 end, axis, size));
  }
  Tensor view = *this;
  view.shape_ = shape_.With(axis, end - begin);
  // An empty slice keeps the offset in bounds: it is never dereferenced.
  if (end > begin) view.offset_ += begin * strides_[static_cast<std::size_t>(axis)];
  return view;
}

Tensor Tensor::Reshape(const Shape& shape) const {
  if (!IsContiguous()) {
    throw ShapeError(fmt::format("[Tensor::Reshape] tensor {} is not contiguous (to shape {})",
                                 Summary(*this), shape));
  }
  if (shape.NumElements() != NumElements()) {
    throw ShapeError(fmt::format("[Tensor::Reshape] shape {} has {} elements, tensor {} has {}",
                                 shape, shape.NumElements(), shape_, NumElements()));
  }
  if (Empty()) return Tensor();
  Tensor view = *this;
  view.shape_ = shape;
  view.strides_ = ContiguousStrides(shape);
  return view;
}

Tensor Tensor::Contiguous() const { return IsContiguous() ? *this : Clone(); }

Tensor Tensor::Clone() const { return AsType(dtype_); }

Tensor Tensor::AsType(DType dtype) const {
  detail::CheckDType("Tensor::AsType", dtype);
  if (Empty()) return Tensor();
  Tensor result = Allocate("Tensor::AsType", dtype, shape_, Storage::Init::kUninitialized);
  detail::CopyElements(*this, result);
  return result;
}

std::vector<float> Tensor::ToVector() const {
  if (Empty()) return {};
  const Tensor floats = dtype_ == DType::kF32 ? Contiguous() : AsType(DType::kF32);
  const auto* data = static_cast<const float*>(floats.Data());
  return std::vector<float>(data, data + floats.NumElements());
}

}  // namespace ringkv
