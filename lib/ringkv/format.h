#pragma once
// fmt formatters: fmt::format("{}", dtype) -> "f16", shape -> "[1, 8, 16, 64]",
// tensor -> "Tensor(f16, [1, 8, 16, 64], strides [8192, 1024, 64, 1], contiguous)".

#include <fmt/format.h>

#include "ringkv/dtype.h"
#include "ringkv/shape.h"
#include "ringkv/tensor.h"

template <>
struct fmt::formatter<ringkv::DType> : fmt::formatter<std::string_view> {
  auto format(ringkv::DType dtype, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(ringkv::DTypeName(dtype), ctx);
  }
};

template <>
struct fmt::formatter<ringkv::Shape> : fmt::formatter<std::string_view> {
  auto format(const ringkv::Shape& shape, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(ringkv::ToString(shape), ctx);
  }
};

namespace ringkv {
std::string Summary(const Tensor& tensor);
}  // namespace ringkv

template <>
struct fmt::formatter<ringkv::Tensor> : fmt::formatter<std::string_view> {
  auto format(const ringkv::Tensor& tensor, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(ringkv::Summary(tensor), ctx);
  }
};
