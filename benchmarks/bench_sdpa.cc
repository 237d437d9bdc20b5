// SDPA decode and prefill against the machine's limits measured in the same run
// (roofline.h). Shapes: Hq 32, Hkv 8, D 128, B 1.
//   Decode (L 1): roofline fraction = t_limit / t_measured, with
//     t_limit = max(K+V bytes / read bandwidth for a working set of K+V's size,
//                   4 Hq T D flops / FMA peak on the same thread count).
//   DecodeCold: the same, cycling through enough layers that K+V are never in
//     cache, held to the streaming (DRAM) bandwidth.
//   Prefill (L 512, causal): useful GFLOP/s over the unmasked query-key pairs
//     (4 Hq D flops each) and its fraction of the FMA peak.
// int8 / int4 K/V are stored rows with their scales (dtype.h): their bytes, and
// so their bandwidth limits, count RowBytes per row.
#include <benchmark/benchmark.h>

#include <cmath>
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

namespace ringkv::bench {
namespace {

using kernels::KvSegment;
using kernels::SdpaParams;

// Bytes of K or V of one layer, [1, Hkv, T, D].
std::size_t KvSideBytes(DType dtype, std::int64_t t) {
  return static_cast<std::size_t>(kHkv * t) * RowBytes(dtype, kD);
}

struct Attention {
  Attention(std::int64_t l, std::int64_t t, kernels::MaskKind mask)
      : q(RandomBuffer(DType::kF32, static_cast<std::size_t>(kHq * l * kD), 99)),
        out(static_cast<std::size_t>(kHq * l * kD) * sizeof(float)) {
    params.q = ContiguousRows(q, DType::kF32, kHq, l, kD);
    params.out = static_cast<float*>(out.Data());
    params.out_strides = {kHq * l * kD, l * kD, kD, 1};
    params.scale = 1.0f / std::sqrt(static_cast<float>(kD));
    params.mask.kind = mask;
    static_cast<void>(t);
  }
  void Run(const KvSegment& segment, kernels::ThreadPool& pool) {
    params.kv = std::span<const KvSegment>(&segment, 1);
    kernels::Sdpa(
        params, kernels::BestKernels(), pool,
        workspace.AtLeast(kernels::SdpaWorkspaceBytes(kernels::ShapeOf(params), pool.Size())));
    benchmark::DoNotOptimize(out.Data());
    benchmark::ClobberMemory();
  }
  Buffer q;
  Buffer out;
  GrowingWorkspace workspace;
  SdpaParams params;
};

void SetDecodeCounters(benchmark::State& state, DType dtype, std::int64_t t, int threads,
                       double seconds, double bandwidth, const std::string& bandwidth_name) {
  const double kv_bytes = 2.0 * static_cast<double>(KvSideBytes(dtype, t));
  const double flops = 4.0 * static_cast<double>(kHq * t * kD);
  SetRooflineCounters(state, dtype, static_cast<double>(t), threads, seconds, kv_bytes, flops,
                      bandwidth, bandwidth_name);
  state.SetBytesProcessed(static_cast<std::int64_t>(kv_bytes) *
                          static_cast<std::int64_t>(state.iterations()));
}

void BM_Decode(benchmark::State& state, DType dtype) {
  const std::int64_t t = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const std::size_t kv_bytes = 2 * KvSideBytes(dtype, t);
  // The limits first: measuring them evicts whatever was in cache.
  const double bandwidth = ReadBandwidth(kv_bytes, threads);
  FmaPeakFor(kernels::BestKernels().isa, threads);
  kernels::ThreadPool pool(threads);
  KvLayer layer(dtype, kHkv, t, kD, 1);
  Attention attention(1, t, kernels::MaskKind::kNone);
  attention.Run(layer.segment, pool);  // warm: K+V in cache when they fit
  const double seconds = TimedLoop(state, [&](std::size_t) { attention.Run(layer.segment, pool); });
  SetDecodeCounters(state, dtype, t, threads, seconds, bandwidth, ReadName(kv_bytes));
}

void BM_DecodeCold(benchmark::State& state, DType dtype) {
  const std::int64_t t = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const std::size_t kv_bytes = 2 * KvSideBytes(dtype, t);
  const double bandwidth = ReadBandwidth(kStreamBytes, threads);
  FmaPeakFor(kernels::BestKernels().isa, threads);
  kernels::ThreadPool pool(threads);
  const std::size_t layer_count = ColdLayerCount(kv_bytes);
  std::vector<KvLayer> layers;
  layers.reserve(layer_count);
  for (std::size_t i = 0; i < layer_count; ++i)
    layers.emplace_back(dtype, kHkv, t, kD, static_cast<std::uint32_t>(i + 1));
  Attention attention(1, t, kernels::MaskKind::kNone);
  const double seconds = TimedLoop(
      state, [&](std::size_t i) { attention.Run(layers[i % layer_count].segment, pool); });
  state.counters["layers"] = static_cast<double>(layer_count);
  SetDecodeCounters(state, dtype, t, threads, seconds, bandwidth, "dram");
}

void DecodeArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"T", "threads"})
      ->ArgsProduct({{256, 1024, 4096, 16384, 32768}, {1, 2}})
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
}

BENCHMARK_CAPTURE(BM_Decode, f16, DType::kF16)->Apply(DecodeArgs);
BENCHMARK_CAPTURE(BM_Decode, bf16, DType::kBF16)->Apply(DecodeArgs);
BENCHMARK_CAPTURE(BM_Decode, f32, DType::kF32)->Apply(DecodeArgs);
BENCHMARK_CAPTURE(BM_DecodeCold, f16, DType::kF16)->Apply(DecodeArgs);
BENCHMARK_CAPTURE(BM_DecodeCold, bf16, DType::kBF16)->Apply(DecodeArgs);
BENCHMARK_CAPTURE(BM_DecodeCold, f32, DType::kF32)->Apply(DecodeArgs);
BENCHMARK_CAPTURE(BM_Decode, int8, DType::kI8)->Apply(DecodeArgs);
BENCHMARK_CAPTURE(BM_Decode, int4, DType::kI4)->Apply(DecodeArgs);
BENCHMARK_CAPTURE(BM_DecodeCold, int8, DType::kI8)->Apply(DecodeArgs);
BENCHMARK_CAPTURE(BM_DecodeCold, int4, DType::kI4)->Apply(DecodeArgs);
BENCHMARK_CAPTURE(BM_Decode, int4h, DType::kI4H)->Apply(DecodeArgs);
BENCHMARK_CAPTURE(BM_DecodeCold, int4h, DType::kI4H)->Apply(DecodeArgs);

void BM_Prefill(benchmark::State& state, DType dtype) {
  constexpr std::int64_t kL = 512;
  const std::int64_t t = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const double peak = FmaPeakFor(kernels::BestKernels().isa, threads);
  kernels::ThreadPool pool(threads);
  KvLayer layer(dtype, kHkv, t, kD, 7);
  Attention attention(kL, t, kernels::MaskKind::kCausal);
  const double seconds = TimedLoop(state, [&](std::size_t) { attention.Run(layer.segment, pool); });
  // Query i sits at position T - L + i and sees keys 0..T - L + i.
  const double pairs = static_cast<double>(kL * (t - kL) + kL * (kL + 1) / 2);
  const double flops = 4.0 * static_cast<double>(kHq * kD) * pairs;
  const double gflops = seconds > 0.0 ? flops / seconds * 1e-9 : 0.0;
  state.counters["T"] = static_cast<double>(t);
  state.counters["threads"] = threads;
  state.counters["GFLOP/s"] = gflops;
  state.counters["fraction"] = gflops / (peak * 1e-9);
  state.SetLabel(
      SummaryLabel(std::string(DTypeName(dtype)), LimitText("fma", peak * 1e-9, "GFLOP/s")));
}
void PrefillArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"T", "threads"})
      ->ArgsProduct({{512, 4096}, {1, 2}})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}
BENCHMARK_CAPTURE(BM_Prefill, f16, DType::kF16)->Apply(PrefillArgs);
BENCHMARK_CAPTURE(BM_Prefill, int8, DType::kI8)->Apply(PrefillArgs);

}  // namespace
}  // namespace ringkv::bench
