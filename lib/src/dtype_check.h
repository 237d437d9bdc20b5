#pragma once
// The check every public entry point applies to a DType it is given.
#include "ringkv/dtype.h"

namespace ringkv::detail {

// Throws ringkv::Error "[<function>] dtype <value> is not one of f32, f16, bf16"
// unless IsKnownDType(dtype).
void CheckDType(const char* function, DType dtype);

}  // namespace ringkv::detail
