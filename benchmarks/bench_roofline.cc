// The machine's limits as benchmarks of their own, so that every run states
// them: streaming (DRAM) read bandwidth, in-L3 read bandwidth, memcpy bandwidth
// and the f32 FMA peak of every tier that runs here, on 1 and 2 threads. The SDPA
// and convert cases are held to the same measurements (roofline.h memoises them).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>

#include "bench_util.h"
#include "ringkv/kernels/kernel_table.h"
#include "roofline.h"

namespace ringkv::bench {
namespace {

std::string Gbs(double bytes_per_second) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1fGB/s", bytes_per_second * 1e-9);
  return text;
}

void BM_ReadBandwidth(benchmark::State& state, std::size_t bytes) {
  const int threads = static_cast<int>(state.range(0));
  double best = 0.0;
  for (auto _ : state) {
    const double bw = MeasureReadBandwidth(bytes, threads);
    best = bw > best ? bw : best;
  }
  state.counters["threads"] = threads;
  state.counters["GB/s"] = best * 1e-9;
  state.counters["MiB"] = static_cast<double>(bytes) / static_cast<double>(kMiB);
  state.SetLabel(SummaryLabel("f32", "read=" + Gbs(best)));
}
BENCHMARK_CAPTURE(BM_ReadBandwidth, dram_1GiB, kStreamBytes)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_ReadBandwidth, l3_16MiB, kInCacheBytes)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_MemcpyBandwidth(benchmark::State& state, std::size_t bytes) {
  const int threads = static_cast<int>(state.range(0));
  double best = 0.0;
  for (auto _ : state) {
    const double bw = MeasureMemcpyBandwidth(bytes, threads);
    best = bw > best ? bw : best;
  }
  state.counters["threads"] = threads;
  state.counters["GB/s"] = best * 1e-9;  // bytes read + bytes written
  state.SetLabel(SummaryLabel("f32", "memcpy=" + Gbs(best)));
}
BENCHMARK_CAPTURE(BM_MemcpyBandwidth, dram_1GiB, kStreamBytes)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The best of measure(threads) over the iterations, in giga-units per second:
// counter `unit` and the summary label "<name>=<value><unit>" (run_summary.sh).
template <class Measure>
void ReportPeak(benchmark::State& state, kernels::Isa isa, const char* dtype, const char* name,
                const char* unit, const Measure& measure) {
  if (kernels::KernelsFor(isa) == nullptr) {
    state.SkipWithError("tier not available on this CPU or build, or above RINGKV_ISA");
    return;
  }
  const int threads = static_cast<int>(state.range(0));
  double best = 0.0;
  for (auto _ : state) {
    const double rate = measure(threads);
    best = rate > best ? rate : best;
  }
  state.counters["threads"] = threads;
  state.counters[unit] = best * 1e-9;
  char text[48];
  std::snprintf(text, sizeof(text), "%s=%.1f%s", name, best * 1e-9, unit);
  state.SetLabel(SummaryLabel(dtype, text));
}

// The f32 peak of each tier's widest multiply-add, one row per tier that runs here
// within the tier cap: each kernel benchmark is held to its own tier's row.
void BM_FmaPeak(benchmark::State& state, kernels::Isa isa) {
  ReportPeak(state, isa, "f32", "fma", "GFLOP/s",
             [&](int threads) { return MeasureFmaPeak(isa, threads); });
}
void FmaPeakArgs(benchmark::internal::Benchmark* b) {
  b->ArgName("threads")
      ->Arg(1)
      ->Arg(2)
      ->Iterations(3)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}
BENCHMARK_CAPTURE(BM_FmaPeak, scalar, kernels::Isa::kScalar)->Apply(FmaPeakArgs);
BENCHMARK_CAPTURE(BM_FmaPeak, sse42, kernels::Isa::kSse42)->Apply(FmaPeakArgs);
BENCHMARK_CAPTURE(BM_FmaPeak, avx2, kernels::Isa::kAvx2)->Apply(FmaPeakArgs);
BENCHMARK_CAPTURE(BM_FmaPeak, avx512, kernels::Isa::kAvx512)->Apply(FmaPeakArgs);

// The AVX2 tier's int16 multiply-adds per second (vpmaddwd + vpaddd), beside its
// FMA row: the integer decode of quantized K/V is held by this rate. GMAC/s
// compares with GFLOP/s / 2 of BM_FmaPeak/avx2 (an FMA lane is one multiply-add).
void BM_Int16MaddPeak(benchmark::State& state) {
  ReportPeak(state, kernels::Isa::kAvx2, "i16", "madd", "GMAC/s", MeasureInt16MaddPeak);
}
BENCHMARK(BM_Int16MaddPeak)->Name("BM_Int16MaddPeak/avx2")->Apply(FmaPeakArgs);

}  // namespace
}  // namespace ringkv::bench
