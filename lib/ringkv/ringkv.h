#pragma once
// Umbrella header: the public tensor API of ringkv.

#include "ringkv/dtype.h"       // IWYU pragma: export
#include "ringkv/error.h"       // IWYU pragma: export
#include "ringkv/format.h"      // IWYU pragma: export
#include "ringkv/shape.h"       // IWYU pragma: export
#include "ringkv/tensor.h"      // IWYU pragma: export
#include "ringkv/tensor_ops.h"  // IWYU pragma: export
