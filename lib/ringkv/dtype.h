#pragma once
// DType names; the enum, IsKnownDType and the scalar f16/bf16 conversions come from
// the kernels.

#include <optional>
#include <string_view>

#include "ringkv/kernels/dtype.h"

namespace ringkv {

// "f32", "f16", "bf16", "int8", "int4", "int4h".
std::string_view DTypeName(DType dtype) noexcept;

// The storage dtype (an element type or a quantized one) that DTypeName calls
// `name`, or nullopt.
std::optional<DType> StorageDTypeNamed(std::string_view name) noexcept;

}  // namespace ringkv
