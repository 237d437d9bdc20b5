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

void CheckI4Dim(const char* function, const char* name, DType dtype, std::int64_t dim) {
  if (IsInt4(dtype) && dim % kI4Group != 0) {
    throw ShapeError(
        fmt::format("[{}] {} dim 3 (head dim) is {}, but {} storage needs a multiple of {}",
                    function, name, dim, dtype, kI4Group));
  }
}

}  // namespace

KvLayout CheckKvInput(const char* function, const Tensor& keys, const Tensor& values,
                      const KvLayout* established, std::optional<KvStorage> storage) {
  CheckRank(function, "keys", keys);
  CheckRank(function, "values", values);
  if (keys.Dim(0) != 1 || values.Dim(0) != 1) {
    throw ShapeError(fmt::format(
        "[{}] keys dim 0 (batch) is {} and values dim 0 is {}, but only B = 1 is supported",
        function, keys.Dim(0), values.Dim(0)));
  }
  if (!storage.has_value() && keys.Dtype() != values.Dtype()) {
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
  const KvStorage dtypes = storage.value_or(KvStorage::Same(keys.Dtype()));
  const KvLayout layout{dtypes.keys, dtypes.values, keys.Dim(1), keys.Dim(3), values.Dim(3)};
  CheckI4Dim(function, "keys", layout.key_dtype, layout.k_dim);
  CheckI4Dim(function, "values", layout.value_dtype, layout.v_dim);
  if (established != nullptr) {
    if (layout.key_dtype != established->key_dtype ||
        layout.value_dtype != established->value_dtype) {
      // Only without storage dtypes: a cache with them restores only snapshots of them.
      throw ShapeError(fmt::format("[{}] keys dtype is {}, but the cache holds {}", function,
                                   DtypesName(layout.key_dtype, layout.value_dtype),
                                   DtypesName(established->key_dtype, established->value_dtype)));
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
                        std::optional<KvStorage> storage) {
  if (!storage.has_value() || !snapshot.HasLayout()) return;
  const KvLayout& layout = snapshot.Layout();
  if (layout.key_dtype == storage->keys && layout.value_dtype == storage->values) return;
  throw SnapshotError(fmt::format("[{}] the snapshot holds {}, the cache's storage dtype is {}",
                                  function, DtypesName(layout.key_dtype, layout.value_dtype),
                                  DtypesName(storage->keys, storage->values)));
}

std::optional<KvStorage> CheckKvStorage(const char* function, std::optional<KvStorage> storage) {
  if (!storage.has_value()) return storage;
  const DType k = storage->keys, v = storage->values;
  for (const DType dtype : {k, v}) {
    if (!IsStorageDType(dtype)) {
      throw Error(
          fmt::format("[{}] dtype {} is not one of f32, f16, bf16, int8, int4, int4h (storage {})",
                      function, static_cast<int>(dtype), dtype == k ? "keys" : "values"));
    }
  }
  if (IsQuantized(k) != IsQuantized(v)) {
    throw Error(fmt::format(
        "[{}] storage dtypes keys {} / values {}: a float side with a quantized one is not "
        "supported (quantize both, or store both as one float dtype)",
        function, k, v));
  }
  if (!IsQuantized(k) && k != v) {
    throw Error(fmt::format(
        "[{}] storage dtypes keys {} / values {}: float keys and values must share one dtype",
        function, k, v));
  }
  return storage;
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
