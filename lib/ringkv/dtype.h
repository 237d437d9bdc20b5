#pragma once
// DType names; the enum, IsKnownDType and the scalar f16/bf16 conversions come from
// the kernels.

#include <string_view>

#include "ringkv/kernels/dtype.h"

namespace ringkv {

std::string_view DTypeName(DType dtype) noexcept;  // "f32", "f16", "bf16", "int8", "int4"

}  // namespace ringkv
