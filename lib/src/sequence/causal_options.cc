#include "causal_options.h"

#include <fmt/format.h>

#include <limits>

#include "dtype_check.h"
#include "ringkv/error.h"

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

}  // namespace

ResolvedCausalOptions ResolveCausalOptions(CausalCacheOptions options) {
  RequirePositive("layers", options.layers);
  RequirePositive("kv_heads", options.kv_heads);
  RequirePositive("key_dim", options.key_dim);
  RequirePositive("value_dim", options.value_dim);
  if (IsQuantized(options.dtype)) {
    // The pool's batched attention reads float blocks only (docs/caches.md).
    throw Error(
        fmt::format("[{}] options.dtype is {}: quantized K/V storage is supported by KVCache and "
                    "RotatingKVCache, not by CausalCache (use f32, f16 or bf16)",
                    kFunction, DTypeName(options.dtype)));
  }
  CheckDType(kFunction, options.dtype);
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
  resolved.layout = PoolLayout{options.dtype,   options.layers,    options.kv_heads,
                               options.key_dim, options.value_dim, options.block_tokens};
  const std::int64_t per_token = Times(
      Times(options.kv_heads, options.key_dim + options.value_dim, "bytes per token"),
      Times(options.layers, static_cast<std::int64_t>(SizeOf(options.dtype)), "bytes per token"),
      "bytes per token");
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

}  // namespace ringkv::detail
