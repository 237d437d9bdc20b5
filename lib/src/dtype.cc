#include "ringkv/dtype.h"

#include <fmt/format.h>

#include "dtype_check.h"
#include "ringkv/error.h"

namespace ringkv {

std::string_view DTypeName(DType dtype) noexcept {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI8:
      return "int8";
    case DType::kI4:
      return "int4";
  }
  return "unknown";
}

namespace detail {

void CheckDType(const char* function, DType dtype) {
  if (!IsKnownDType(dtype)) {
    throw Error(fmt::format("[{}] dtype {} is not one of f32, f16, bf16", function,
                            static_cast<int>(dtype)));
  }
}

}  // namespace detail
}  // namespace ringkv
