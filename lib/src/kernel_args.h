#pragma once
// Tensors as the kernels see them: raw pointer, dtype, dims and element strides.

#include "ringkv/kernels/sdpa.h"
#include "ringkv/tensor.h"

namespace ringkv {

// A rank-4 tensor as a kernel ArrayRef (a view: no copy, same lifetime rules).
kernels::ArrayRef ToArrayRef(const Tensor& tensor);

}  // namespace ringkv
