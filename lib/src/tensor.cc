#include "ringkv/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>
#include <gsl/assert>
#include <gsl/narrow>
#include <limits>
#include <memory>
#include <new>
#include <optional>
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

// A shape from up to Shape::kMaxRank dims (Shape takes only an initializer list).
Shape ShapeOf(std::span<const std::int64_t> dims) {
  switch (dims.size()) {
    case 0:
      return Shape{};
    case 1:
      return Shape{dims[0]};
    case 2:
      return Shape{dims[0], dims[1]};
    case 3:
      return Shape{dims[0], dims[1], dims[2]};
    default:
      Expects(dims.size() == 4);
      return Shape{dims[0], dims[1], dims[2], dims[3]};
  }
}

std::string Join(std::span<const std::int64_t> values) {
  return fmt::format("[{}]", fmt::join(values, ", "));
}

// The largest element offset of a view, or nullopt when it overflows int64.
// Every stride is >= 0 and shape has elements.
std::optional<std::int64_t> LastOffset(const Shape& shape, std::span<const std::int64_t> strides) {
  std::int64_t last = 0;
  for (std::size_t axis = 0; axis < strides.size(); ++axis) {
    std::int64_t step = 0;
    if (__builtin_mul_overflow(shape.Dims()[axis] - 1, strides[axis], &step) ||
        __builtin_add_overflow(last, step, &last)) {
      return std::nullopt;
    }
  }
  return last;
}

// Throws unless every element of a view with these (non-negative, overflow-free)
// strides has its own address. Sufficient test: taking the axes by increasing
// stride, each stride passes the last offset the axes inside it reach.
void CheckNoOverlap(const Shape& shape, std::span<const std::int64_t> strides) {
  std::array<int, Shape::kMaxRank> order{};
  std::size_t count = 0;
  for (std::size_t axis = 0; axis < strides.size(); ++axis) {
    if (shape.Dims()[axis] > 1) order[count++] = static_cast<int>(axis);
  }
  const auto begin = order.begin();
  const auto end = order.begin() + static_cast<std::ptrdiff_t>(count);
  std::stable_sort(begin, end, [&](int a, int b) {
    return strides[static_cast<std::size_t>(a)] < strides[static_cast<std::size_t>(b)];
  });
  std::int64_t inner_last = 0;  // the last offset the axes taken so far reach
  for (auto it = begin; it != end; ++it) {
    const auto axis = static_cast<std::size_t>(*it);
    if (strides[axis] <= inner_last) {
      throw ShapeError(fmt::format(
          "[Tensor::Borrow] strides {} for shape {} give elements one address (dim {} of size {} "
          "has stride {}, within the {} elements the smaller strides span): a writable tensor "
          "needs one address per element; borrow through a const pointer to broadcast",
          Join(strides), shape, axis, shape.Dims()[axis], strides[axis], inner_last + 1));
    }
    inner_last += (shape.Dims()[axis] - 1) * strides[axis];
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

Tensor Tensor::Borrow(void* data, DType dtype, const Shape& shape,
                      std::span<const std::int64_t> strides) {
  return BorrowBytes(static_cast<std::byte*>(data), true, dtype, shape, strides);
}

Tensor Tensor::Borrow(const void* data, DType dtype, const Shape& shape,
                      std::span<const std::int64_t> strides) {
  // The storage never writes through a read-only borrow (MutableData and
  // SliceUpdate check Writable()), so dropping const here is never acted upon.
  return BorrowBytes(static_cast<std::byte*>(const_cast<void*>(data)), false, dtype, shape,
                     strides);
}

Tensor Tensor::BorrowBytes(std::byte* data, bool writable, DType dtype, const Shape& shape,
                           std::span<const std::int64_t> strides) {
  detail::CheckDType("Tensor::Borrow", dtype);
  const auto rank = static_cast<std::size_t>(shape.Rank());
  if (!strides.empty() && strides.size() != rank) {
    throw ShapeError(fmt::format("[Tensor::Borrow] strides {} has {} entries, shape {} has rank {}",
                                 Join(strides), strides.size(), shape, rank));
  }
  const std::array<std::int64_t, Shape::kMaxRank> contiguous = ContiguousStrides(shape);
  if (strides.empty()) strides = std::span<const std::int64_t>(contiguous.data(), rank);
  for (std::size_t axis = 0; axis < rank; ++axis) {
    if (strides[axis] < 0) {
      throw ShapeError(
          fmt::format("[Tensor::Borrow] strides {} for shape {}: strides[{}] is {}, "
                      "negative strides are not supported",
                      Join(strides), shape, axis, strides[axis]));
    }
  }
  const std::int64_t elements = shape.NumElements();
  if (data == nullptr && elements > 0) {
    throw Error(
        fmt::format("[Tensor::Borrow] data is null for shape {} ({} elements)", shape, elements));
  }
  const std::size_t element_bytes = SizeOf(dtype);
  const auto address = reinterpret_cast<std::uintptr_t>(data);
  if (address % element_bytes != 0) {
    throw Error(fmt::format("[Tensor::Borrow] data {:#x} is not aligned to the {} bytes of a {}",
                            address, element_bytes, dtype));
  }
  std::size_t bytes = 0;
  if (elements > 0) {
    const std::optional<std::int64_t> last = LastOffset(shape, strides);
    constexpr auto kMaxBytes =
        static_cast<std::uint64_t>(std::numeric_limits<std::ptrdiff_t>::max());
    std::uint64_t span = 0;
    if (!last.has_value() ||
        __builtin_mul_overflow(static_cast<std::uint64_t>(*last) + 1, element_bytes, &span) ||
        span > kMaxBytes) {
      throw Error(fmt::format(
          "[Tensor::Borrow] shape {} with strides {} of {} spans more than 2^63 - 1 bytes", shape,
          Join(strides), dtype));
    }
    std::uintptr_t end = 0;
    if (__builtin_add_overflow(address, span, &end)) {
      throw Error(fmt::format(
          "[Tensor::Borrow] data {:#x} + {} bytes (shape {}, strides {}) passes the end of the "
          "address space",
          address, span, shape, Join(strides)));
    }
    if (writable) CheckNoOverlap(shape, strides);
    bytes = static_cast<std::size_t>(span);
  }
  Tensor tensor;
  try {
    tensor.storage_ = std::shared_ptr<Storage>(new Storage(data, bytes, writable));
  } catch (const std::bad_alloc&) {
    throw Error(fmt::format("[Tensor::Borrow] cannot allocate the view of shape {}", shape));
  }
  tensor.dtype_ = dtype;
  tensor.shape_ = shape;
  std::copy(strides.begin(), strides.end(), tensor.strides_.begin());
  tensor.offset_ = 0;
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

void* Tensor::MutableData() {
  if (storage_ == nullptr) return nullptr;
  if (!storage_->Writable()) {
    throw Error(fmt::format(
        "[Tensor::MutableData] tensor {} is borrowed read-only (Borrow of a const pointer)",
        Summary(*this)));
  }
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

Tensor Tensor::Permute(std::initializer_list<int> axes) const {
  return Permute(std::span<const int>(axes.begin(), axes.size()));
}

Tensor Tensor::Permute(std::span<const int> axes) const {
  const auto axes_text = [&] { return fmt::format("({})", fmt::join(axes, ", ")); };
  if (axes.size() != static_cast<std::size_t>(Rank())) {
    throw ShapeError(fmt::format("[Tensor::Permute] axes {} has {} entries, shape {} has rank {}",
                                 axes_text(), axes.size(), shape_, Rank()));
  }
  std::array<bool, Shape::kMaxRank> seen{};
  for (const int axis : axes) {
    if (axis < 0 || axis >= Rank()) {
      throw ShapeError(
          fmt::format("[Tensor::Permute] axes {}: axis {} outside [0, {}) for shape {}",
                      axes_text(), axis, Rank(), shape_));
    }
    if (seen[static_cast<std::size_t>(axis)]) {
      throw ShapeError(fmt::format("[Tensor::Permute] axes {}: axis {} appears twice (shape {})",
                                   axes_text(), axis, shape_));
    }
    seen[static_cast<std::size_t>(axis)] = true;
  }
  Tensor view = *this;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const auto from = static_cast<std::size_t>(axes[i]);
    view.shape_ = view.shape_.With(static_cast<int>(i), shape_.Dims()[from]);
    view.strides_[i] = strides_[from];
  }
  return view;
}

Tensor Tensor::Transpose(int a, int b) const {
  CheckAxis("Tensor::Transpose", *this, a);
  CheckAxis("Tensor::Transpose", *this, b);
  std::array<int, Shape::kMaxRank> axes{};
  for (int i = 0; i < Rank(); ++i) axes[static_cast<std::size_t>(i)] = i;
  std::swap(axes[static_cast<std::size_t>(a)], axes[static_cast<std::size_t>(b)]);
  return Permute(std::span<const int>(axes.data(), static_cast<std::size_t>(Rank())));
}

Tensor Tensor::Unsqueeze(int axis) const {
  if (axis < 0 || axis > Rank()) {
    throw ShapeError(fmt::format("[Tensor::Unsqueeze] axis {} outside [0, {}] for shape {}", axis,
                                 Rank(), shape_));
  }
  if (Rank() == Shape::kMaxRank) {
    throw ShapeError(fmt::format("[Tensor::Unsqueeze] shape {} already has the maximum rank {}",
                                 shape_, Shape::kMaxRank));
  }
  if (Empty()) return Tensor();
  const auto at = static_cast<std::size_t>(axis);
  const auto rank = static_cast<std::size_t>(Rank());
  std::array<std::int64_t, Shape::kMaxRank> dims{};
  std::array<std::int64_t, Shape::kMaxRank> strides{};
  for (std::size_t i = 0, from = 0; i <= rank; ++i) {
    if (i == at) {
      dims[i] = 1;
      // Never stepped over (size 1), so any stride is right; take the one a
      // row-major layout would have, or 0 if that overflows.
      std::int64_t stride = 1;
      if (at < rank && __builtin_mul_overflow(strides_[at], shape_.Dims()[at], &stride)) stride = 0;
      strides[i] = stride;
    } else {
      dims[i] = shape_.Dims()[from];
      strides[i] = strides_[from];
      ++from;
    }
  }
  Tensor view = *this;
  view.shape_ = ShapeOf(std::span<const std::int64_t>(dims.data(), rank + 1));
  view.strides_ = strides;
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
