// Appending one token (Hkv 8, D 128, f16) to a cache that already holds T:
//   Concat/T    (a) concatenate the whole cache with each token (O(T) per token)
//   Step256/T   (b) the reference's growth: a 256-token block concatenated onto
//                   the whole buffer when full, in-place writes in between
//   KVCache/T   (c) ringkv's paged KVCache (a new block every 256 tokens, no copy)
// Each iteration appends one token at length T (the cache is put back to T
// periodically, so T stays fixed and the cost of (a) stays affordable).
// Time per iteration = ns per appended token.
#include <benchmark/benchmark.h>

#include "ringkv/kv_cache.h"
#include "ringkv/tensor_ops.h"

namespace {

using ringkv::DType;
using ringkv::Tensor;

constexpr std::int64_t kHeads = 8, kDim = 128, kStep = 256;

Tensor Token() { return Tensor::Zeros(DType::kF16, {1, kHeads, 1, kDim}); }
Tensor Filled(std::int64_t t) { return Tensor::Zeros(DType::kF16, {1, kHeads, t, kDim}); }

void Concat(benchmark::State& state) {
  const std::int64_t t = state.range(0);
  const Tensor keys = Filled(t), values = Filled(t);
  const Tensor k = Token(), v = Token();
  for (auto _ : state) {
    const Tensor kk[] = {keys, k};
    const Tensor vv[] = {values, v};
    Tensor new_keys = ringkv::Concatenate(kk, 2);
    Tensor new_values = ringkv::Concatenate(vv, 2);
    benchmark::DoNotOptimize(new_keys.Data());
    benchmark::DoNotOptimize(new_values.Data());
  }
  state.SetItemsProcessed(state.iterations());
}

void Step256(benchmark::State& state) {
  const std::int64_t t = state.range(0);  // a multiple of 256: the next append grows
  const Tensor base_k = Filled(t), base_v = Filled(t);
  Tensor keys = base_k, values = base_v;
  std::int64_t offset = t;
  const Tensor k = Token(), v = Token();
  for (auto _ : state) {
    if (offset == keys.Dim(2)) {
      // The reference grows by concatenating a zero block onto the whole buffer.
      const Tensor grow_k[] = {keys, Filled(kStep)};
      const Tensor grow_v[] = {values, Filled(kStep)};
      keys = ringkv::Concatenate(grow_k, 2);
      values = ringkv::Concatenate(grow_v, 2);
    }
    ringkv::SliceUpdate(keys, k, 2, offset);
    ringkv::SliceUpdate(values, v, 2, offset);
    ++offset;
    if (offset == t + kStep) {  // back to length T (a view: no copy)
      keys = keys.Slice(2, 0, t);
      values = values.Slice(2, 0, t);
      offset = t;
    }
  }
  state.SetItemsProcessed(state.iterations());
}

void Paged(benchmark::State& state) {
  const int t = static_cast<int>(state.range(0));
  ringkv::KVCache cache;
  cache.Update(Filled(t), Filled(t));
  const Tensor k = Token(), v = Token();
  for (auto _ : state) {
    const ringkv::KVHistory history = cache.Update(k, v);
    benchmark::DoNotOptimize(&history);
    if (cache.Offset() == t + kStep) (void)cache.Restore(nullptr, t);  // O(1) rewind
  }
  state.SetItemsProcessed(state.iterations());
}

void Lengths(benchmark::internal::Benchmark* b) {
  for (std::int64_t t : {1024, 4096, 16384, 32768, 131072}) b->Arg(t);
  b->ArgName("T")->Unit(benchmark::kNanosecond);
}

BENCHMARK(Concat)->Apply(Lengths)->MinTime(0.2);
// Whole growth cycles (256 appends) per run, so the amortised cost is exact.
BENCHMARK(Step256)->Apply(Lengths)->Iterations(256 * 8);
BENCHMARK(Paged)->Name("KVCache")->Apply(Lengths)->Iterations(256 * 64);

}  // namespace
