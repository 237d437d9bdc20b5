// One layer's cache write + attention as an engine embeds it, at the demo
// model's shapes (Hq 8, Hkv 2, D 64, f16 K/V, one thread). The engine's
// projections are row-major [L, H, D] f32 buffers and its attention output goes
// to a row-major [L, Hq, D] buffer, as in tools/model.
//   Copying/L    the path before caller buffers were accepted: pack q, k, v into
//                fresh [1, H, L, D] tensors, AsType(f16) for k and v, Update,
//                Attention into a fresh tensor, unpack it into the engine's buffer
//   ZeroCopy/L   borrowed [1, H, L, D] views of the same buffers, a cache with an
//                f16 storage dtype (it converts in its one copy into the blocks),
//                Attention into a borrowed view of the engine's output buffer
// The cache holds kContext tokens before each step and is trimmed back after it,
// so every iteration attends over the same history. docs/benchmarks.md reports
// ZeroCopy's time as a fraction of Copying's, measured in the same run.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "ringkv/attention.h"
#include "ringkv/kv_cache.h"

namespace {

using ringkv::DType;
using ringkv::Tensor;

constexpr std::int64_t kHq = 8, kHkv = 2, kDim = 64, kContext = 1024;

struct EngineBuffers {
  explicit EngineBuffers(std::int64_t length)
      : len(length),
        q(Floats(length * kHq * kDim, 0.01f)),
        k(Floats(length * kHkv * kDim, 0.02f)),
        v(Floats(length * kHkv * kDim, 0.03f)),
        out(static_cast<std::size_t>(length * kHq * kDim)) {}

  static std::vector<float> Floats(std::int64_t n, float step) {
    std::vector<float> x(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(step * static_cast<float>(i));
    return x;
  }

  std::int64_t len;
  std::vector<float> q, k, v, out;  // [L, H, D] row-major
};

// [L, H, D] row-major -> a fresh [1, H, L, D] tensor.
Tensor Packed(const std::vector<float>& x, std::int64_t len, std::int64_t heads) {
  Tensor t = Tensor::Uninitialized(DType::kF32, {1, heads, len, kDim});
  auto* dst = static_cast<float*>(t.MutableData());
  for (std::int64_t l = 0; l < len; ++l) {
    for (std::int64_t h = 0; h < heads; ++h) {
      std::copy_n(x.data() + (l * heads + h) * kDim, kDim, dst + (h * len + l) * kDim);
    }
  }
  return t;
}

// A [1, H, L, D] f32 tensor -> [L, H, D] row-major.
void Unpacked(const Tensor& t, std::vector<float>& x) {
  const std::int64_t heads = t.Dim(1), len = t.Dim(2);
  const auto* src = static_cast<const float*>(t.Data());
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t l = 0; l < len; ++l) {
      std::copy_n(src + (h * len + l) * kDim, kDim, x.data() + (l * heads + h) * kDim);
    }
  }
}

// A [1, H, L, D] view of a row-major [L, H, D] buffer.
template <class T>
Tensor HeadsView(T* x, std::int64_t len, std::int64_t heads) {
  return Tensor::Borrow(x, DType::kF32, {len, heads, kDim}).Permute({1, 0, 2}).Unsqueeze(0);
}

ringkv::KVCache Filled(std::optional<DType> storage) {
  ringkv::KVCache cache(ringkv::KVCache::kDefaultBlockTokens, storage);
  const EngineBuffers history(kContext);
  cache.Update(HeadsView(history.k.data(), kContext, kHkv).AsType(DType::kF16),
               HeadsView(history.v.data(), kContext, kHkv).AsType(DType::kF16));
  return cache;
}

const float kScale = 1.0f / std::sqrt(static_cast<float>(kDim));

void Copying(benchmark::State& state) {
  const std::int64_t len = state.range(0);
  ringkv::Context ctx(1);
  ringkv::KVCache cache = Filled(std::nullopt);
  EngineBuffers x(len);
  for (auto _ : state) {
    const Tensor q = Packed(x.q, len, kHq);
    const ringkv::KVHistory history = cache.Update(Packed(x.k, len, kHkv).AsType(DType::kF16),
                                                   Packed(x.v, len, kHkv).AsType(DType::kF16));
    const Tensor out = ringkv::Attention(q, history, ringkv::AttentionMask::Causal(), kScale, ctx);
    Unpacked(out, x.out);
    benchmark::DoNotOptimize(x.out.data());
    (void)cache.Rewind(kContext);
  }
  state.SetItemsProcessed(state.iterations() * len);
}

void ZeroCopy(benchmark::State& state) {
  const std::int64_t len = state.range(0);
  ringkv::Context ctx(1);
  ringkv::KVCache cache = Filled(DType::kF16);
  EngineBuffers x(len);
  // An engine keeps its buffers, so it makes these views once.
  const Tensor q = HeadsView(static_cast<const float*>(x.q.data()), len, kHq);
  const Tensor k = HeadsView(static_cast<const float*>(x.k.data()), len, kHkv);
  const Tensor v = HeadsView(static_cast<const float*>(x.v.data()), len, kHkv);
  Tensor out = HeadsView(x.out.data(), len, kHq);
  for (auto _ : state) {
    const ringkv::KVHistory history = cache.Update(k, v);
    ringkv::Attention(q, history, ringkv::AttentionMask::Causal(), kScale, ctx, out);
    benchmark::DoNotOptimize(x.out.data());
    (void)cache.Rewind(kContext);
  }
  state.SetItemsProcessed(state.iterations() * len);
}

BENCHMARK(Copying)->Arg(1)->Arg(128)->ArgName("L")->Unit(benchmark::kMicrosecond);
BENCHMARK(ZeroCopy)->Arg(1)->Arg(128)->ArgName("L")->Unit(benchmark::kMicrosecond);

}  // namespace
