// Bulk dtype conversion per tier (BENCHMARK_CAPTURE per ISA) against memcpy of
// the same working set, measured in the same run. Bytes processed count source
// plus destination, as memcpy's do.
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>

#include "bench_util.h"
#include "ringkv/kernels/isa.h"
#include "ringkv/kernels/kernel_table.h"
#include "roofline.h"

namespace ringkv::bench {
namespace {

using kernels::Isa;

struct Direction {
  DType from;
  DType to;
};
constexpr Direction kDirections[] = {{DType::kF32, DType::kF16},
                                     {DType::kF16, DType::kF32},
                                     {DType::kF32, DType::kBF16},
                                     {DType::kBF16, DType::kF32}};

void SetConvertCounters(benchmark::State& state, std::size_t bytes, const std::string& dtype) {
  const double limit = MemcpyBandwidth(bytes, 1);
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) *
                          static_cast<std::int64_t>(state.iterations()));
  state.counters["threads"] = 1;
  state.counters["memcpy_GB/s"] = limit * 1e-9;
  // The achieved rate over the memcpy rate, as a per-iteration time ratio.
  state.counters["fraction"] = benchmark::Counter(static_cast<double>(bytes) / limit,
                                                  benchmark::Counter::kIsIterationInvariantRate);
  char text[48];
  std::snprintf(text, sizeof(text), "memcpy=%.1fGB/s", limit * 1e-9);
  state.SetLabel(SummaryLabel(dtype, text));
}

void BM_Convert(benchmark::State& state, Isa isa) {
  const kernels::KernelTable* table = kernels::KernelsFor(isa);
  if (table == nullptr) {
    state.SkipWithError("tier not available on this CPU or build");
    return;
  }
  const Direction dir = kDirections[state.range(0)];
  const auto n = static_cast<std::size_t>(state.range(1));
  const Buffer src = RandomBuffer(dir.from, n, 3);
  Buffer dst(n * SizeOf(dir.to));
  std::memset(dst.Data(), 0, dst.Bytes());  // fault the pages in before timing
  const std::size_t bytes = n * (SizeOf(dir.from) + SizeOf(dir.to));
  MemcpyBandwidth(bytes, 1);
  for (auto _ : state) {
    table->convert(dir.from, src.Data(), dir.to, dst.Data(), n);
    benchmark::DoNotOptimize(dst.Data());
    benchmark::ClobberMemory();
  }
  SetConvertCounters(state, bytes,
                     std::string(DTypeName(dir.from)) + "->" + std::string(DTypeName(dir.to)));
}

// The working sets: 1M elements stay in L3, 32M do not.
void ConvertArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dir", "n"})->ArgsProduct({{0, 1, 2, 3}, {1 << 20, 1 << 25}});
}
BENCHMARK_CAPTURE(BM_Convert, scalar, Isa::kScalar)->Apply(ConvertArgs);
BENCHMARK_CAPTURE(BM_Convert, sse42, Isa::kSse42)->Apply(ConvertArgs);
BENCHMARK_CAPTURE(BM_Convert, avx2, Isa::kAvx2)->Apply(ConvertArgs);
BENCHMARK_CAPTURE(BM_Convert, avx512, Isa::kAvx512)->Apply(ConvertArgs);

// memcpy of an f32 buffer: the baseline, 2 x n x 4 bytes processed.
void BM_Memcpy(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const Buffer src = RandomBuffer(DType::kF32, n, 5);
  Buffer dst(n * sizeof(float));
  std::memset(dst.Data(), 0, dst.Bytes());
  for (auto _ : state) {
    std::memcpy(dst.Data(), src.Data(), n * sizeof(float));
    benchmark::DoNotOptimize(dst.Data());
    benchmark::ClobberMemory();
  }
  SetConvertCounters(state, 2 * n * sizeof(float), "f32->f32");
}
BENCHMARK(BM_Memcpy)->ArgName("n")->Arg(1 << 20)->Arg(1 << 25);

}  // namespace
}  // namespace ringkv::bench
