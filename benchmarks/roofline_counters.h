#pragma once
// How the attention benchmarks (bench_sdpa.cc, bench_ragged_sdpa.cc,
// bench_batched_decode.cc) time a step and hold it to the roofline limit of the
// same run: the counters and the label run_summary.sh reads.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <string>

#include "ringkv/dtype.h"

namespace ringkv::bench {

// "<what>=<value><unit>" with one decimal: the limit a label names.
std::string LimitText(const char* what, double value, const char* unit);

// "read(<n>MiB)": the read bandwidth of a working set of `bytes`, as labels name it.
std::string ReadName(std::size_t bytes);

// Times `iteration(i)` (i = 0, 1, ...) over the benchmark loop and returns seconds
// per iteration.
template <class Iteration>
double TimedLoop(benchmark::State& state, const Iteration& iteration) {
  using Clock = std::chrono::steady_clock;
  double seconds = 0.0;
  std::size_t i = 0;
  for (auto _ : state) {
    const auto start = Clock::now();
    iteration(i++);
    seconds += std::chrono::duration<double>(Clock::now() - start).count();
  }
  return i == 0 ? 0.0 : seconds / static_cast<double>(i);
}

// For a step of `seconds` that must read `kv_bytes` (at `bandwidth`, named
// `bandwidth_name` in the label) and do `flops` (at the FMA peak of the tier of
// kernels::BestKernels(), the table every caller runs): the counters T (= `keys`),
// threads, t_memory_us and t_compute_us (the two limits), t_limit_us (the larger),
// fraction = t_limit / seconds, kv_bytes and GB/s, and the label
// "<dtype> <the limit that binds>".
void SetRooflineCounters(benchmark::State& state, DType dtype, double keys, int threads,
                         double seconds, double kv_bytes, double flops, double bandwidth,
                         const std::string& bandwidth_name);

}  // namespace ringkv::bench
