#include "kv_input.h"

#include <fmt/format.h>

#include <gsl/assert>
#include <limits>

#include "dtype_check.h"
#include "ringkv/error.h"
#include "ringkv/format.h"

namespace ringkv::detail {
namespace {

void CheckRank(const char* function, const char* name, const Tensor& t) {
  if (t.Rank() != 4) {
    throw ShapeError(fmt::format("[{}] {} has rank {} (shape {}), expected 4 [B, H, L, D]",
                                 function, name, t.Rank(), t.GetShape()));
  }
}

}  // namespace

KvLayout CheckKvInput(const char* function, const Tensor& keys, const Tensor& values,
                      const KvLayout* established, std::optional<DType> storage_dtype) {
  CheckRank(function, "keys", keys);
  CheckRank(function, "values", values);
  if (keys.Dim(0) != 1 || values.Dim(0) != 1) {
    throw ShapeError(fmt::format(
        "[{}] keys dim 0 (batch) is {} and values dim 0 is {}, but only B = 1 is supported",
        function, keys.Dim(0), values.Dim(0)));
  }
  if (!storage_dtype.has_value() && keys.Dtype() != values.Dtype()) {
    throw ShapeError(fmt::format("[{}] keys dtype {} != values dtype {}", function, keys.Dtype(),
                                 values.Dtype()));
  }
  if (keys.Dim(1) != values.Dim(1)) {
    throw ShapeError(fmt::format("[{}] keys dim 1 (heads) is {}, but values dim 1 is {}", function,
                                 keys.Dim(1), values.Dim(1)));
  }
  if (keys.Dim(2) != values.Dim(2)) {
    throw ShapeError(fmt::format("[{}] keys dim 2 (length) is {}, but values dim 2 is {}", function,
                                 keys.Dim(2), values.Dim(2)));
  }
  if (keys.Dim(2) < 1) {
    throw ShapeError(
        fmt::format("[{}] keys dim 2 (length) is {}, expected >= 1", function, keys.Dim(2)));
  }
  if (keys.Dim(1) < 1 || keys.Dim(3) < 1 || values.Dim(3) < 1) {
    throw ShapeError(fmt::format("[{}] keys shape {} / values shape {} has an empty axis", function,
                                 keys.GetShape(), values.GetShape()));
  }
  const KvLayout layout{storage_dtype.value_or(keys.Dtype()), keys.Dim(1), keys.Dim(3),
                        values.Dim(3)};
  if (established != nullptr) {
    if (layout.dtype != established->dtype) {
      // Only without a storage dtype: a cache with one restores only snapshots of it.
      throw ShapeError(fmt::format("[{}] keys dtype is {}, but the cache holds {}", function,
                                   layout.dtype, established->dtype));
    }
    if (layout.heads != established->heads) {
      throw ShapeError(fmt::format("[{}] keys dim 1 (heads) is {}, but the cache holds {}",
                                   function, layout.heads, established->heads));
    }
    if (layout.k_dim != established->k_dim) {
      throw ShapeError(fmt::format("[{}] keys dim 3 (head dim) is {}, but the cache holds {}",
                                   function, layout.k_dim, established->k_dim));
    }
    if (layout.v_dim != established->v_dim) {
      throw ShapeError(fmt::format("[{}] values dim 3 (head dim) is {}, but the cache holds {}",
                                   function, layout.v_dim, established->v_dim));
    }
  }
  return layout;
}

void CheckSnapshotDtype(const char* function, const BlockStore& snapshot,
                        std::optional<DType> storage_dtype) {
  if (!storage_dtype.has_value() || !snapshot.HasLayout() ||
      snapshot.Layout().dtype == *storage_dtype) {
    return;
  }
  throw SnapshotError(fmt::format("[{}] the snapshot holds {}, the cache's storage dtype is {}",
                                  function, snapshot.Layout().dtype, *storage_dtype));
}

std::optional<DType> CheckStorageDtype(const char* function, std::optional<DType> storage_dtype) {
  if (storage_dtype.has_value()) CheckDType(function, *storage_dtype);
  return storage_dtype;
}

void CheckTarget(const char* function, int target) {
  if (target < 0) throw Error(fmt::format("[{}] target {} is negative", function, target));
}

int AdvancedOffset(const char* function, int offset, std::int64_t length) {
  Expects(length >= 0);
  constexpr int kMax = std::numeric_limits<int>::max();
  if (length > kMax - offset) {
    throw Error(fmt::format("[{}] offset {} + {} new tokens would exceed {}", function, offset,
                            length, kMax));
  }
  return offset + static_cast<int>(length);
}

}  // namespace ringkv::detail
