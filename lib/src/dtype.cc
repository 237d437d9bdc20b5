#include "ringkv/dtype.h"

namespace ringkv {

std::string_view DTypeName(DType dtype) noexcept {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
  }
  return "unknown";
}

}  // namespace ringkv
