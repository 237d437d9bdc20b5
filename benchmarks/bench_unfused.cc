// Decode attention fused against unfused, on the same K/V, dtype, threads and
// tier: what fusing saves. Shapes as bench_sdpa.cc: Hq 32, Hkv 8, D 128, L 1, K and
// V [1, Hkv, T, D] as BM_Decode / BM_DecodeCold store them.
//   fused:   kernels::Sdpa with kernels::BestKernels(): one pass over K and V with
//            an online softmax.
//   unfused: three passes, each parallel on the same pool, as separate operators
//            would run them: scores = scale q.K^T into a [Hq, T] f32 buffer; a
//            softmax over each row; out = P.V. K and V blocks of kBlock keys are
//            converted to f32 with the table's `convert` (f16, bf16), and the
//            arithmetic is unfused_passes.h built for the same tier.
// BM_UnfusedDecode keeps one layer (in cache when it fits), BM_UnfusedDecodeCold
// cycles through layers like BM_DecodeCold. Both steps alternate in one loop, each
// on a layer the other did not just read; the time is the unfused step, `fused_us`
// the fused one, and fraction = fused / unfused (below 1: fused is faster). The
// summary names the fused time as the limit. max_abs_diff: the two outputs on the
// same layer, once (checks that the unfused step computes the same attention).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attention_shape.h"
#include "bench_util.h"
#include "ringkv/kernels/kernel_table.h"
#include "ringkv/kernels/sdpa.h"
#include "ringkv/kernels/thread_pool.h"
#include "roofline.h"
#include "roofline_counters.h"
#include "stored_rows.h"
#include "unfused_passes.h"

namespace ringkv::bench {
namespace {

using kernels::KvSegment;

constexpr std::int64_t kGroup = kHq / kHkv;  // query heads per kv head
// Keys per converted block: 128 KiB of f32 K (or V) per worker, within a 512 KiB L2.
constexpr std::int64_t kBlock = 256;

class Fused {
 public:
  explicit Fused(const Buffer& q) : out_(static_cast<std::size_t>(kHq * kD) * sizeof(float)) {
    params_.q = ContiguousRows(q, DType::kF32, kHq, 1, kD);
    params_.out = Out();
    params_.out_strides = {kHq * kD, kD, kD, 1};
    params_.scale = 1.0f / std::sqrt(static_cast<float>(kD));
  }
  void Run(const KvLayer& layer, kernels::ThreadPool& pool) {
    params_.kv = std::span<const KvSegment>(&layer.segment, 1);
    kernels::Sdpa(
        params_, kernels::BestKernels(), pool,
        workspace_.AtLeast(kernels::SdpaWorkspaceBytes(kernels::ShapeOf(params_), pool.Size())));
    benchmark::DoNotOptimize(out_.Data());
    benchmark::ClobberMemory();
  }
  float* Out() const { return static_cast<float*>(out_.Data()); }  // [Hq, D]

 private:
  Buffer out_;
  GrowingWorkspace workspace_;
  kernels::SdpaParams params_;
};

class Unfused {
 public:
  Unfused(const Buffer& q, DType dtype, std::int64_t t, int threads)
      : q_(static_cast<const float*>(q.Data())),
        dtype_(dtype),
        t_(t),
        table_(kernels::BestKernels()),
        passes_(UnfusedPassesFor(table_.isa)),
        scores_(static_cast<std::size_t>(kHq * t) * sizeof(float)),
        blocks_(static_cast<std::size_t>(threads * kBlock * kD) * sizeof(float)),
        out_(static_cast<std::size_t>(kHq * kD) * sizeof(float)) {}

  void Run(const KvLayer& layer, kernels::ThreadPool& pool) {
    const auto block_count = static_cast<std::size_t>((t_ + kBlock - 1) / kBlock);
    const auto t = static_cast<std::size_t>(t_);
    const auto d = static_cast<std::size_t>(kD);
    const auto group = static_cast<std::size_t>(kGroup);
    const float scale = 1.0f / std::sqrt(static_cast<float>(kD));
    float* scores = Scores();
    // Pass 1, per (kv head, key block): scores[h * G + g, keys of the block].
    pool.Run(static_cast<std::size_t>(kHkv) * block_count, [&](std::size_t task, int worker) {
      const std::size_t h = task / block_count;
      const std::size_t first = task % block_count * static_cast<std::size_t>(kBlock);
      const std::size_t n = std::min(static_cast<std::size_t>(kBlock), t - first);
      const float* k = Rows(layer.k.bytes, h * t + first, n, worker);
      passes_.scores(q_ + h * group * d, group, k, n, d, scale, scores + h * group * t + first, t);
    });
    // Pass 2, per query head: softmax over its T scores.
    pool.Run(static_cast<std::size_t>(kHq),
             [&](std::size_t row, int) { passes_.softmax(scores + row * t, t); });
    // Pass 3, per kv head: its G output rows, accumulated block by block.
    std::memset(out_.Data(), 0, out_.Bytes());
    pool.Run(static_cast<std::size_t>(kHkv), [&](std::size_t h, int worker) {
      for (std::size_t first = 0; first < t; first += static_cast<std::size_t>(kBlock)) {
        const std::size_t n = std::min(static_cast<std::size_t>(kBlock), t - first);
        const float* v = Rows(layer.v.bytes, h * t + first, n, worker);
        passes_.weighted_sum(scores + h * group * t + first, t, group, v, n, d,
                             Out() + h * group * d);
      }
    });
    benchmark::DoNotOptimize(out_.Data());
    benchmark::ClobberMemory();
  }
  float* Out() const { return static_cast<float*>(out_.Data()); }  // [Hq, D]

 private:
  float* Scores() const { return static_cast<float*>(scores_.Data()); }  // [Hq, T]

  // Rows [first, first + n) of a [Hkv * T, D] array as f32: in place for f32,
  // else converted into the worker's block.
  const float* Rows(const Buffer& array, std::size_t first, std::size_t n, int worker) const {
    const auto d = static_cast<std::size_t>(kD);
    if (dtype_ == DType::kF32) return static_cast<const float*>(array.Data()) + first * d;
    float* block = static_cast<float*>(blocks_.Data()) +
                   static_cast<std::size_t>(worker) * static_cast<std::size_t>(kBlock) * d;
    const auto* src = static_cast<const std::byte*>(array.Data()) + first * d * SizeOf(dtype_);
    table_.convert(dtype_, src, DType::kF32, block, n * d);
    return block;
  }

  const float* q_;  // [Hq, D]
  DType dtype_;
  std::int64_t t_;
  const kernels::KernelTable& table_;
  UnfusedPasses passes_;
  Buffer scores_;  // [Hq, T] f32
  Buffer blocks_;  // [threads, kBlock, D] f32
  Buffer out_;     // [Hq, D] f32
};

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void RunComparison(benchmark::State& state, DType dtype, bool cold) {
  const std::int64_t t = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const std::size_t kv_bytes = 2 * static_cast<std::size_t>(kHkv * t * kD) * SizeOf(dtype);
  const std::size_t layer_count = !cold ? 1 : ColdLayerCount(kv_bytes);
  std::vector<KvLayer> layers;
  layers.reserve(layer_count);
  for (std::size_t i = 0; i < layer_count; ++i)
    layers.emplace_back(dtype, kHkv, t, kD, static_cast<std::uint32_t>(i + 1));
  const Buffer q = RandomBuffer(DType::kF32, static_cast<std::size_t>(kHq * kD), 99);
  kernels::ThreadPool pool(threads);
  Fused fused(q);
  Unfused unfused(q, dtype, t, threads);

  fused.Run(layers[0], pool);
  unfused.Run(layers[0], pool);
  float max_abs_diff = 0.0f;
  for (std::int64_t i = 0; i < kHq * kD; ++i)
    max_abs_diff = std::max(max_abs_diff, std::fabs(fused.Out()[i] - unfused.Out()[i]));

  using Clock = std::chrono::steady_clock;
  double fused_total = 0.0;
  double unfused_total = 0.0;
  std::size_t steps = 0;
  for (auto _ : state) {
    auto start = Clock::now();
    unfused.Run(layers[steps % layer_count], pool);
    const double unfused_seconds = Seconds(start);
    start = Clock::now();
    fused.Run(layers[(steps + layer_count / 2) % layer_count], pool);
    fused_total += Seconds(start);
    unfused_total += unfused_seconds;
    state.SetIterationTime(unfused_seconds);
    ++steps;
  }
  const double fused_us = steps > 0 ? fused_total / static_cast<double>(steps) * 1e6 : 0.0;
  const double unfused_us = steps > 0 ? unfused_total / static_cast<double>(steps) * 1e6 : 0.0;
  state.counters["T"] = static_cast<double>(t);
  state.counters["threads"] = threads;
  state.counters["layers"] = static_cast<double>(layer_count);
  state.counters["fused_us"] = fused_us;
  state.counters["unfused_us"] = unfused_us;
  state.counters["fraction"] = unfused_us > 0.0 ? fused_us / unfused_us : 0.0;
  state.counters["max_abs_diff"] = static_cast<double>(max_abs_diff);
  state.SetLabel(SummaryLabel(std::string(DTypeName(dtype)), LimitText("fused", fused_us, "us")));
}

void BM_UnfusedDecode(benchmark::State& state, DType dtype) { RunComparison(state, dtype, false); }
void BM_UnfusedDecodeCold(benchmark::State& state, DType dtype) {
  RunComparison(state, dtype, true);
}

void UnfusedArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"T", "threads"})
      ->ArgsProduct({{4096, 16384, 32768}, {1, 2}})
      ->Unit(benchmark::kMicrosecond)
      ->UseManualTime();
}

BENCHMARK_CAPTURE(BM_UnfusedDecode, f16, DType::kF16)->Apply(UnfusedArgs);
BENCHMARK_CAPTURE(BM_UnfusedDecode, f32, DType::kF32)->Apply(UnfusedArgs);
BENCHMARK_CAPTURE(BM_UnfusedDecodeCold, f16, DType::kF16)->Apply(UnfusedArgs);
BENCHMARK_CAPTURE(BM_UnfusedDecodeCold, f32, DType::kF32)->Apply(UnfusedArgs);

}  // namespace
}  // namespace ringkv::bench
