#include "ringkv/shape.h"

#include <fmt/format.h>

#include "ringkv/error.h"

namespace ringkv {
namespace {

std::string JoinDims(std::initializer_list<std::int64_t> dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
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
