#include "ringkv/shape.h"

#include <fmt/format.h>

#include <span>

#include "ringkv/error.h"

namespace ringkv {
namespace {

template <class Dims>
std::string JoinDims(const Dims& dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

// NumElements() multiplies without checks, so a shape whose product overflows
// int64 is rejected when it is built.
template <class Dims>
void CheckCount(const char* function, const Dims& dims) {
  std::int64_t count = 1;
  for (const std::int64_t dim : dims) {
    if (__builtin_mul_overflow(count, dim, &count)) {
      throw ShapeError(
          fmt::format("[{}] dims {} have more than 2^63 - 1 elements", function, JoinDims(dims)));
    }
  }
}

}  // namespace

Shape::Shape(std::initializer_list<std::int64_t> dims) {
  if (dims.size() > static_cast<std::size_t>(kMaxRank)) {
    throw ShapeError(
        fmt::format("[Shape] rank {} exceeds {} (dims {})", dims.size(), kMaxRank, JoinDims(dims)));
  }
  int axis = 0;
  for (const std::int64_t dim : dims) {
    if (dim < 0) {
      throw ShapeError(
          fmt::format("[Shape] dim {} is negative: {} (dims {})", axis, dim, JoinDims(dims)));
    }
    dims_[static_cast<std::size_t>(axis)] = dim;
    ++axis;
  }
  CheckCount("Shape", dims);
  rank_ = axis;
}

std::int64_t Shape::Dim(int axis) const {
  if (axis < 0 || axis >= rank_) {
    throw ShapeError(fmt::format("[Shape::Dim] axis {} outside [0, {}) for shape {}", axis, rank_,
                                 ToString(*this)));
  }
  return dims_[static_cast<std::size_t>(axis)];
}

// Rank 0 is a scalar: the empty product, one element.
std::int64_t Shape::NumElements() const noexcept {
  std::int64_t count = 1;
  for (int axis = 0; axis < rank_; ++axis) count *= dims_[static_cast<std::size_t>(axis)];
  return count;
}

Shape Shape::With(int axis, std::int64_t size) const {
  if (axis < 0 || axis >= rank_) {
    throw ShapeError(fmt::format("[Shape::With] axis {} outside [0, {}) for shape {}", axis, rank_,
                                 ToString(*this)));
  }
  if (size < 0) {
    throw ShapeError(fmt::format("[Shape::With] size {} for axis {} is negative", size, axis));
  }
  Shape result = *this;
  result.dims_[static_cast<std::size_t>(axis)] = size;
  CheckCount("Shape::With", std::span(result.dims_.data(), static_cast<std::size_t>(result.rank_)));
  return result;
}

std::string ToString(const Shape& shape) {
  std::string text = "[";
  for (int axis = 0; axis < shape.Rank(); ++axis) {
    if (axis > 0) text += ", ";
    text += std::to_string(shape.Dims()[static_cast<std::size_t>(axis)]);
  }
  text += "]";
  return text;
}

}  // namespace ringkv
