#include "causal_options.h"

#include <fmt/format.h>

#include <limits>
#include <utility>

#include "cache/stored_rows.h"
#include "ringkv/error.h"
#include "ringkv/format.h"

namespace ringkv::detail {
namespace {

constexpr const char* kFunction = "CausalCache::CausalCache";

void RequirePositive(const char* field, std::int64_t value) {
  if (value < 1)
    throw Error(fmt::format("[{}] options.{} is {}, expected >= 1", kFunction, field, value));
}

void RequireNonNegative(const char* field, std::int64_t value) {
  if (value < 0)
    throw Error(fmt::format("[{}] options.{} is {}, expected >= 0", kFunction, field, value));
}

// a * b, or an error naming what overflowed.
std::int64_t Times(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) {
    throw Error(fmt::format("[{}] {} overflows ({} x {})", kFunction, what, a, b));
  }
  return product;
}

// dtype and value_dtype: storage dtypes that the kernels can read together, and
// an int4 side whose head dim holds whole groups.
void CheckStorage(const CausalCacheOptions& options) {
  const DType k = options.dtype;
  const DType v = options.value_dtype.value_or(k);
  for (const auto& [field, dtype] : {std::pair{"dtype", k}, std::pair{"value_dtype", v}}) {
    if (!IsStorageDType(dtype)) {
      throw Error(fmt::format("[{}] options.{} is {}, not one of f32, f16, bf16, int8, int4, int4h",
                              kFunction, field, static_cast<int>(dtype)));
    }
  }
  if (IsQuantized(k) != IsQuantized(v) || (!IsQuantized(k) && k != v)) {
    throw Error(fmt::format(
        "[{}] options.dtype is {} and options.value_dtype {}: keys and values are either one float "
        "dtype or both quantized",
        kFunction, k, v));
  }
  const auto whole_groups = [](const char* field, DType dtype, const char* dim_field,
                               std::int64_t dim) {
    if (IsInt4(dtype) && dim % kI4Group != 0) {
      throw Error(
          fmt::format("[{}] options.{} is {}, which needs options.{} to be a multiple of {}, "
                      "but it is {}",
                      kFunction, field, dtype, dim_field, kI4Group, dim));
    }
  };
  whole_groups("dtype", k, "key_dim", options.key_dim);
  whole_groups(options.value_dtype.has_value() ? "value_dtype" : "dtype", v, "value_dim",
               options.value_dim);
}

}  // namespace

ResolvedCausalOptions ResolveCausalOptions(CausalCacheOptions options) {
  RequirePositive("layers", options.layers);
  RequirePositive("kv_heads", options.kv_heads);
  RequirePositive("key_dim", options.key_dim);
  RequirePositive("value_dim", options.value_dim);
  // Head dims this large are mistakes, and capping them keeps the row sizes below in range.
  for (const auto& [field, dim] :
       {std::pair{"key_dim", options.key_dim}, std::pair{"value_dim", options.value_dim}}) {
    if (dim > std::numeric_limits<std::int32_t>::max()) {
      throw Error(fmt::format("[{}] options.{} is {}, at most {}", kFunction, field, dim,
                              std::numeric_limits<std::int32_t>::max()));
    }
  }
  CheckStorage(options);
  RequirePositive("block_tokens", options.block_tokens);
  if (options.block_tokens > std::numeric_limits<std::int32_t>::max()) {
    throw Error(fmt::format("[{}] options.block_tokens is {}, at most {}", kFunction,
                            options.block_tokens, std::numeric_limits<std::int32_t>::max()));
  }
  RequirePositive("max_sequences", options.max_sequences);
  RequirePositive("max_batch", options.max_batch);
  RequireNonNegative("capacity_tokens", options.capacity_tokens);
  RequireNonNegative("window", options.window);
  RequireNonNegative("memory", options.memory);
  RequireNonNegative("chunk", options.chunk);
  if ((options.capacity_tokens > 0) == (options.capacity_bytes > 0)) {
    throw Error(fmt::format(
        "[{}] options.capacity_tokens is {} and options.capacity_bytes is {}: set exactly one",
        kFunction, options.capacity_tokens, options.capacity_bytes));
  }

  // The reference's sliding-window memory: at least the window, and one more
  // token with several sequences (a slot can step back over its stop token).
  if (options.window == 0 && options.memory > 0) {
    throw Error(fmt::format("[{}] options.memory is {} without a window (options.window is 0)",
                            kFunction, options.memory));
  }
  if (options.memory == 0) options.memory = options.window;
  if (options.memory < options.window) {
    throw Error(fmt::format("[{}] options.memory {} is smaller than options.window {}", kFunction,
                            options.memory, options.window));
  }
  if (options.window > 0 && options.max_sequences > 1 &&
      options.memory < std::numeric_limits<Position>::max()) {
    options.memory = std::max(options.memory, options.window + 1);
  }

  ResolvedCausalOptions resolved;
  resolved.layout = PoolLayoutOf(options);
  // Stored rows include their scales (stored_rows.h), so this is the pool's true price.
  const PoolLayout& layout = resolved.layout;
  const std::int64_t row_bytes =
      Times(options.kv_heads,
            static_cast<std::int64_t>(StoredRowBytes(layout.key_dtype, layout.key_dim)) +
                static_cast<std::int64_t>(StoredRowBytes(layout.value_dtype, layout.value_dim)),
            "bytes per token");
  const std::int64_t per_token = Times(row_bytes, options.layers, "bytes per token");
  const std::int64_t block_bytes = Times(per_token, options.block_tokens, "bytes per block");
  const std::int64_t blocks =
      options.capacity_tokens > 0
          ? options.capacity_tokens / options.block_tokens
          : static_cast<std::int64_t>(options.capacity_bytes /
                                      static_cast<std::size_t>(block_bytes));
  if (blocks < 1) {
    throw Error(fmt::format(
        "[{}] the capacity (options.capacity_tokens {}, options.capacity_bytes {}) is less than "
        "one block of {} tokens ({} bytes)",
        kFunction, options.capacity_tokens, options.capacity_bytes, options.block_tokens,
        block_bytes));
  }
  if (blocks > std::numeric_limits<std::int32_t>::max()) {
    throw Error(fmt::format("[{}] the capacity is {} blocks, at most {}", kFunction, blocks,
                            std::numeric_limits<std::int32_t>::max()));
  }
  resolved.capacity_blocks = blocks;
  resolved.options = std::move(options);
  return resolved;
}

PoolLayout PoolLayoutOf(const CausalCacheOptions& options) noexcept {
  return PoolLayout{options.dtype,       options.value_dtype.value_or(options.dtype),
                    options.layers,      options.kv_heads,
                    options.key_dim,     options.value_dim,
                    options.block_tokens};
}

}  // namespace ringkv::detail
