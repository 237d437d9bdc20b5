// Snapshot and Restore of a KVCache (Hkv 8, D 128, f16: 4 KiB of K and V per
// token) from 1k to 128k tokens. A snapshot shares the cache's storage blocks
// (256 tokens each) copy-on-write: its cost is O(blocks), a reference count and
// a pointer per block, never O(bytes), so the curve over T is what to read
// (docs/benchmarks.md). The `blocks` counter is the storage blocks shared (each
// holds 256 tokens of K and V).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>

#include "ringkv/kv_cache.h"

namespace {

using ringkv::DType;
using ringkv::Tensor;

constexpr std::int64_t kHeads = 8, kDim = 128;
constexpr std::int64_t kChunk = 4096;  // tokens per fill Update: keeps the source tensor small

ringkv::KVCache Filled(std::int64_t tokens) {
  ringkv::KVCache cache;
  for (std::int64_t done = 0; done < tokens; done += kChunk) {
    const Tensor kv =
        Tensor::Zeros(DType::kF16, {1, kHeads, std::min(kChunk, tokens - done), kDim});
    cache.Update(kv, kv);
  }
  return cache;
}

void SetCounters(benchmark::State& state, std::int64_t tokens) {
  const std::int64_t blocks =
      (tokens + ringkv::KVCache::kDefaultBlockTokens - 1) / ringkv::KVCache::kDefaultBlockTokens;
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["blocks"] = static_cast<double>(blocks);
}

void Snapshot(benchmark::State& state) {
  const std::int64_t tokens = state.range(0);
  const ringkv::KVCache cache = Filled(tokens);
  for (auto _ : state) {
    auto snapshot = cache.Snapshot(0);  // and its release at the end of the scope
    benchmark::DoNotOptimize(snapshot.get());
  }
  SetCounters(state, tokens);
}

// Rewind to 0, then restore every token from the snapshot.
void Restore(benchmark::State& state) {
  const std::int64_t tokens = state.range(0);
  ringkv::KVCache cache = Filled(tokens);
  const auto snapshot = cache.Snapshot(0);
  const int offset = static_cast<int>(tokens);
  for (auto _ : state) {
    (void)cache.Restore(nullptr, 0);
    (void)cache.Restore(snapshot.get(), offset);
  }
  SetCounters(state, tokens);
}

// The first decode write after a snapshot clones one block (copy-on-write),
// whatever the length.
void UpdateAfterSnapshot(benchmark::State& state) {
  const std::int64_t tokens = state.range(0);
  ringkv::KVCache cache = Filled(tokens);
  const int last = static_cast<int>(tokens) - 1;
  (void)cache.Restore(nullptr, last);  // the last block is partly used
  const Tensor token = Tensor::Zeros(DType::kF16, {1, kHeads, 1, kDim});
  for (auto _ : state) {
    auto snapshot = cache.Snapshot(0);
    cache.Update(token, token);
    (void)cache.Restore(nullptr, last);
    benchmark::DoNotOptimize(snapshot.get());
  }
  SetCounters(state, tokens);
}

void Lengths(benchmark::internal::Benchmark* b) {
  b->ArgName("T");
  for (const std::int64_t t : {1024, 4096, 16384, 32768, 65536, 131072}) b->Arg(t);
}

BENCHMARK(Snapshot)->Apply(Lengths)->Unit(benchmark::kMicrosecond);
BENCHMARK(Restore)->Apply(Lengths)->Unit(benchmark::kMicrosecond);
BENCHMARK(UpdateAfterSnapshot)->ArgName("T")->Arg(1024)->Arg(131072)->Unit(benchmark::kMicrosecond);

}  // namespace
