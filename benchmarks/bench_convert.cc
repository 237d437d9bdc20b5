// Bulk dtype conversion and quantization per tier (BENCHMARK_CAPTURE per ISA)
// against memcpy of the same working set, measured in the same run. Bytes processed count source
// plus destination, as memcpy's do.
#include <benchmark/benchmark.h>

#include <cstddef>
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

// The cache write's quantization (KernelTable::convert_rows, one pass): f16 rows
// of 128 values, a kv head's row at D 128, to int8 / int4 / int4h. Bytes count
// the f16 source plus the stored rows with their scales.
constexpr DType kQuantized[] = {DType::kI8, DType::kI4, DType::kI4H};

void BM_Quantize(benchmark::State& state, Isa isa) {
  const kernels::KernelTable* table = kernels::KernelsFor(isa);
  if (table == nullptr) {
    state.SkipWithError("tier not available on this CPU or build");
    return;
  }
  constexpr std::size_t kRow = 128;
  const DType to = kQuantized[state.range(0)];
  const auto n = static_cast<std::size_t>(state.range(1));
  const std::size_t rows = n / kRow;
  const std::size_t row_bytes = RowBytes(to, kRow);
  const Buffer src = RandomBuffer(DType::kF16, n, 3);
  Buffer dst(rows * row_bytes);
  std::memset(dst.Data(), 0, dst.Bytes());
  const std::size_t bytes = n * SizeOf(DType::kF16) + rows * row_bytes;
  MemcpyBandwidth(bytes, 1);
  for (auto _ : state) {
    table->convert_rows(DType::kF16, src.Data(), kRow, to, dst.Data(),
                        static_cast<std::ptrdiff_t>(row_bytes), rows, kRow);
    benchmark::DoNotOptimize(dst.Data());
    benchmark::ClobberMemory();
  }
  SetConvertCounters(state, bytes, "f16->" + std::string(DTypeName(to)));
}

void QuantizeArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"to", "n"})->ArgsProduct({{0, 1, 2}, {1 << 20, 1 << 25}});
}
BENCHMARK_CAPTURE(BM_Quantize, scalar, Isa::kScalar)->Apply(QuantizeArgs);
BENCHMARK_CAPTURE(BM_Quantize, sse42, Isa::kSse42)->Apply(QuantizeArgs);
BENCHMARK_CAPTURE(BM_Quantize, avx2, Isa::kAvx2)->Apply(QuantizeArgs);
BENCHMARK_CAPTURE(BM_Quantize, avx512, Isa::kAvx512)->Apply(QuantizeArgs);

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
