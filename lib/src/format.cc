#include "ringkv/format.h"

namespace ringkv {

std::string Summary(const Tensor& tensor) {
  if (tensor.Empty()) return "Tensor(empty)";
  std::string strides = "[";
  for (int axis = 0; axis < tensor.Rank(); ++axis) {
    if (axis > 0) strides += ", ";
    strides += std::to_string(tensor.Stride(axis));
  }
  strides += "]";
  std::string text =
      fmt::format("Tensor({}, {}, strides {}", tensor.Dtype(), tensor.GetShape(), strides);
  if (tensor.Offset() != 0) text += fmt::format(", offset {}", tensor.Offset());
  text += tensor.IsContiguous() ? ", contiguous)" : ", strided)";
  return text;
}

}  // namespace ringkv
