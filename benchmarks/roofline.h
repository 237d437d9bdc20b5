#pragma once
// The machine's limits, measured in the benchmark process itself: read
// bandwidth for a given working-set size, memcpy bandwidth and the f32 FMA peak
// of a kernel tier, on a given number of threads. Each value is measured lazily
// on first use and memoised (key: bytes or tier, and threads), so a filtered run
// such as --benchmark_filter=Decode still holds its cases to limits of the same run.

#include <cstddef>

#include "ringkv/kernels/isa.h"

namespace ringkv::bench {

inline constexpr std::size_t kMiB = std::size_t{1} << 20;
inline constexpr std::size_t kGiB = std::size_t{1} << 30;
// Far beyond the 32 MiB L3 of the target machine: a pass streams from DRAM.
inline constexpr std::size_t kStreamBytes = kGiB;
// Fits in a 32 MiB L3 next to what else is running.
inline constexpr std::size_t kInCacheBytes = 16 * kMiB;

// One timed measurement each (no memo), in bytes or flops per second.
double MeasureReadBandwidth(std::size_t bytes, int threads);
double MeasureMemcpyBandwidth(std::size_t bytes, int threads);
// The f32 flops per second of `isa`'s widest multiply-add (fma_chains.h): a
// kernel of that tier can do no better. Expects KernelsFor(isa) != nullptr (the
// tier is compiled in, runs here and is within the tier cap).
double MeasureFmaPeak(kernels::Isa isa, int threads);
// The int16 multiply-adds per second of the AVX2 tier's vpmaddwd + vpaddd pair
// (MaddChainsAvx2), the integer decode's inner step. Expects KernelsFor(kAvx2).
double MeasureInt16MaddPeak(int threads);

// Memoised: the best of a few measurements, taken on first use.
double ReadBandwidth(std::size_t bytes, int threads);
double MemcpyBandwidth(std::size_t bytes, int threads);
// A kernel benchmark holds its kernel to the peak of the tier whose table it runs:
// FmaPeakFor(kernels::BestKernels().isa, threads) for BestKernels().
double FmaPeakFor(kernels::Isa isa, int threads);

}  // namespace ringkv::bench
