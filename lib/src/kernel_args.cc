#include "kernel_args.h"

#include <gsl/assert>

namespace ringkv {

kernels::ArrayRef ToArrayRef(const Tensor& tensor) {
  Expects(tensor.Rank() == 4);
  kernels::ArrayRef ref;
  ref.data = tensor.Data();
  ref.dtype = tensor.Dtype();
  for (int axis = 0; axis < 4; ++axis) {
    ref.shape[static_cast<std::size_t>(axis)] = tensor.Dim(axis);
    ref.strides[static_cast<std::size_t>(axis)] = tensor.Stride(axis);
  }
  return ref;
}

}  // namespace ringkv
