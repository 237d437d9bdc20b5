// Snapshot and Restore of a 32k-token KVCache (Hkv 8, D 128, f16, 128 MiB of
// K and V) against memcpy of the same bytes in the same run. Snapshots share
// the cache's blocks (copy-on-write), so their cost is O(blocks), not O(bytes):
// bytes_per_second is the equivalent copy rate.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "ringkv/kv_cache.h"

namespace {

using ringkv::DType;
using ringkv::Tensor;

constexpr int kTokens = 32768;
constexpr std::int64_t kHeads = 8, kDim = 128;

ringkv::KVCache Filled() {
  ringkv::KVCache cache;
  const Tensor kv = Tensor::Zeros(DType::kF16, {1, kHeads, kTokens, kDim});
  cache.Update(kv, kv);
  return cache;
}

std::int64_t StateBytes() { return std::int64_t{kTokens} * kHeads * kDim * 2 * 2; }

void Memcpy(benchmark::State& state) {
  std::vector<char> src(static_cast<std::size_t>(StateBytes()), 1), dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * StateBytes());
}

void Snapshot(benchmark::State& state) {
  const ringkv::KVCache cache = Filled();
  for (auto _ : state) {
    auto snapshot = cache.Snapshot(0);  // and its release at the end of the scope
    benchmark::DoNotOptimize(snapshot.get());
  }
  state.SetBytesProcessed(state.iterations() * StateBytes());
}

void Restore(benchmark::State& state) {
  ringkv::KVCache cache = Filled();
  const auto snapshot = cache.Snapshot(0);
  for (auto _ : state) {
    (void)cache.Restore(nullptr, 0);
    (void)cache.Restore(snapshot.get(), kTokens);
  }
  state.SetBytesProcessed(state.iterations() * StateBytes());
}

// The first decode write after a snapshot clones one block (copy-on-write).
void UpdateAfterSnapshot(benchmark::State& state) {
  ringkv::KVCache cache = Filled();
  (void)cache.Restore(nullptr, kTokens - 1);  // the last block is partly used
  const Tensor token = Tensor::Zeros(DType::kF16, {1, kHeads, 1, kDim});
  for (auto _ : state) {
    auto snapshot = cache.Snapshot(0);
    cache.Update(token, token);
    (void)cache.Restore(nullptr, kTokens - 1);
    benchmark::DoNotOptimize(snapshot.get());
  }
}

BENCHMARK(Memcpy)->Unit(benchmark::kMicrosecond)->MinTime(0.3);
BENCHMARK(Snapshot)->Unit(benchmark::kMicrosecond);
BENCHMARK(Restore)->Unit(benchmark::kMicrosecond);
BENCHMARK(UpdateAfterSnapshot)->Unit(benchmark::kMicrosecond);

}  // namespace
