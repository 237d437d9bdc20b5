#pragma once
// CausalCacheOptions checked and resolved: the effective window memory (the
// reference's rules) and the pool it asks for.

#include <cstdint>

#include "block_pool.h"
#include "ringkv/causal_cache.h"

namespace ringkv::detail {

struct ResolvedCausalOptions {
  CausalCacheOptions options;  // memory resolved
  PoolLayout layout;
  std::int64_t capacity_blocks = 0;
};

// Throws ringkv::Error naming the field and its value for inconsistent options.
ResolvedCausalOptions ResolveCausalOptions(CausalCacheOptions options);

// The block layout of a pool with (checked) `options`.
PoolLayout PoolLayoutOf(const CausalCacheOptions& options) noexcept;

}  // namespace ringkv::detail
