// One decode step (Update of one token + SDPA over the history) at equal live
// length W: a RotatingKVCache(W) that has wrapped vs a KVCache holding W tokens.
// Hq 32, Hkv 8, D 128, f16 K/V, one thread. Target: the ring within 5 % of full.
#include <benchmark/benchmark.h>

#include <cmath>

#include "ringkv/attention.h"
#include "ringkv/kv_cache.h"
#include "ringkv/rotating_kv_cache.h"

namespace {

using ringkv::DType;
using ringkv::Tensor;

constexpr std::int64_t kHq = 32, kHkv = 8, kDim = 128;

Tensor Keys(std::int64_t t) {
  std::vector<float> x(static_cast<std::size_t>(kHkv * t * kDim));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.001f * static_cast<float>(i));
  return Tensor::FromVector(x, {1, kHkv, t, kDim}, DType::kF16);
}

void FullStep(benchmark::State& state) {
  const int w = static_cast<int>(state.range(0));
  ringkv::Context ctx(1);
  ringkv::KVCache cache;
  const Tensor kv = Keys(w - 1);
  cache.Update(kv, kv);
  const Tensor token = Keys(1);
  const Tensor q = Tensor::Zeros(DType::kF32, {1, kHq, 1, kDim});
  const float scale = 1.0f / std::sqrt(static_cast<float>(kDim));
  for (auto _ : state) {
    const ringkv::KVHistory history = cache.Update(token, token);
    Tensor out = ringkv::Attention(q, history, ringkv::AttentionMask::Causal(), scale, ctx);
    benchmark::DoNotOptimize(out.Data());
    (void)cache.Restore(nullptr, w - 1);  // live length stays W
  }
}

void RingStep(benchmark::State& state) {
  const int w = static_cast<int>(state.range(0));
  ringkv::Context ctx(1);
  ringkv::RotatingKVCache cache(w);
  const Tensor token = Keys(1);
  for (int p = 0; p < w + w / 2; ++p) cache.Update(token, token);  // wrapped
  const Tensor q = Tensor::Zeros(DType::kF32, {1, kHq, 1, kDim});
  const float scale = 1.0f / std::sqrt(static_cast<float>(kDim));
  for (auto _ : state) {
    const ringkv::KVHistory history = cache.Update(token, token);
    Tensor out = ringkv::Attention(q, history, ringkv::AttentionMask::Causal(), scale, ctx);
    benchmark::DoNotOptimize(out.Data());
  }
}

BENCHMARK(FullStep)->Arg(4096)->Arg(32768)->ArgName("W")->Unit(benchmark::kMicrosecond);
BENCHMARK(RingStep)->Arg(4096)->Arg(32768)->ArgName("W")->Unit(benchmark::kMicrosecond);

}  // namespace
