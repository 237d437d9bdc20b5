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
    case DType::kI4H:
      return "int4h";
  }
  return "unknown";
}

std::optional<DType> StorageDTypeNamed(std::string_view name) noexcept {
  for (const DType dtype :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kI8, DType::kI4, DType::kI4H}) {
    if (DTypeName(dtype) == name) return dtype;
  }
  return std::nullopt;
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
