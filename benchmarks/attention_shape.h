#pragma once
// The attention layer every decode benchmark of ringkv_bench measures
// (bench_sdpa.cc, bench_ragged_sdpa.cc, bench_batched_decode.cc), so their
// results compare on the same bytes (docs/benchmarks.md): 32 query heads
// grouped over 8 kv heads of dim 128.
#include <cstdint>

namespace ringkv::bench {

inline constexpr std::int64_t kHq = 32;
inline constexpr std::int64_t kHkv = 8;
inline constexpr std::int64_t kD = 128;

}  // namespace ringkv::bench
