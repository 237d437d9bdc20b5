// Decode steps of many sequences in one batch on a CausalCache (one layer: every
// layer of a model repeats the same step), Hq 32, Hkv 8, D 128, each sequence
// with a 4096-token context; BatchedDecode per pool dtype (f16, int8, int4: the
// bytes of a quantized row include its scales). One step = StartForward (one token per
// sequence) + Update + Attention(q, history); the step's token is removed again
// (untimed) so every iteration reads the same context.
//   BatchedDecode: fraction = t_limit / t_step, t_limit = max(all sequences' K+V
//     bytes / read bandwidth for a working set of that size, 4 Hq T D flops per
//     sequence / FMA peak), both measured in the same run (roofline.h).
//   SharedPrefixDecode: 16 sequences sharing a 4096-token prefix (CopyPrefix) plus
//     256 own tokens each; vs_one_sequence = its step time / the step time of one
//     sequence of 4096 + 256 tokens, the two measured interleaved in one loop.
//     fraction: the same limit, the shared prefix's bytes counted once;
//     vs_one_limit: the ratio of the two steps' limits, the best vs_one_sequence
//     the machine allows (16 sequences do 16 times the flops of one: once the
//     shared step is compute-bound, the ratio cannot go below flops ratio x the
//     one sequence's compute share of its limit).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "attention_shape.h"
#include "bench_util.h"
#include "ringkv/batch_attention.h"
#include "ringkv/causal_cache.h"
#include "ringkv/context.h"
#include "ringkv/kernels/kernel_table.h"
#include "roofline.h"
#include "roofline_counters.h"

namespace ringkv::bench {
namespace {

constexpr Position kContext = 4096;
// The pool's default block size (CausalCacheOptions::block_tokens).
const std::int64_t kBlockTokens = CausalCacheOptions{}.block_tokens;
constexpr std::int64_t kMaxBatch = 4096;
constexpr DType kDtype = DType::kF16;  // SharedPrefixDecode's

// K + V of one token of one layer, as a pool of `dtype` stores them.
double TokenBytes(DType dtype) {
  const std::size_t row =
      IsQuantized(dtype) ? (RowBytes(dtype, kD) + 3) / 4 * 4 : RowBytes(dtype, kD);
  return 2.0 * kHkv * static_cast<double>(row);
}

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Tensor RandomTensor(DType dtype, std::int64_t heads, std::int64_t rows, std::uint32_t seed) {
  const Buffer b = RandomBuffer(DType::kF32, static_cast<std::size_t>(heads * rows * kD), seed);
  const std::span<const float> values(static_cast<const float*>(b.Data()),
                                      static_cast<std::size_t>(heads * rows * kD));
  return Tensor::FromVector(values, {1, heads, rows, kD}, dtype);
}

CausalCache MakeCache(int sequences, std::int64_t tokens_per_sequence, DType dtype = kDtype) {
  CausalCacheOptions o;
  o.layers = 1;
  o.kv_heads = kHkv;
  o.key_dim = kD;
  o.value_dim = kD;
  o.dtype = dtype;
  // Every sequence's tokens, the step's token, and a spare block each.
  o.capacity_tokens = sequences * (tokens_per_sequence + 2 * kBlockTokens);
  o.block_tokens = kBlockTokens;
  o.max_sequences = sequences;
  o.max_batch = kMaxBatch;
  return CausalCache(std::move(o));
}

// Stores `count` tokens of sequence `seq` at positions [from, from + count), in
// passes of at most kMaxBatch tokens; K/V values are `kv`'s first rows.
void Prefill(CausalCache& cache, const Tensor& k, const Tensor& v, SequenceId seq, Position from,
             Position count) {
  for (Position done = 0; done < count;) {
    const Position n = std::min<Position>(count - done, static_cast<Position>(kMaxBatch));
    std::vector<Position> positions(static_cast<std::size_t>(n));
    for (Position i = 0; i < n; ++i) positions[static_cast<std::size_t>(i)] = from + done + i;
    const std::vector<SequenceId> ids(static_cast<std::size_t>(n), seq);
    cache.StartForward(Batch{positions, ids});
    cache.Update(0, k.Slice(2, 0, n), v.Slice(2, 0, n));
    done += n;
  }
}

// One decode step for `sequences` sequences (ids 0..sequences - 1), each at
// position `position`.
class Step {
 public:
  Step(int sequences, Position position)
      : positions_(static_cast<std::size_t>(sequences), position),
        ids_(static_cast<std::size_t>(sequences)),
        q_(RandomTensor(DType::kF32, kHq, sequences, 11)),
        k_(RandomTensor(DType::kF32, kHkv, sequences, 12)),
        v_(RandomTensor(DType::kF32, kHkv, sequences, 13)),
        out_(Tensor::Zeros(DType::kF32, {1, kHq, sequences, kD})),
        scale_(1.0f / std::sqrt(static_cast<float>(kD))) {
    for (std::size_t i = 0; i < ids_.size(); ++i) ids_[i] = static_cast<SequenceId>(i);
  }

  // The step's time in seconds; the cache is back as it was afterwards.
  double Run(CausalCache& cache, Context& ctx) {
    const auto start = Clock::now();
    cache.StartForward(Batch{positions_, ids_});
    const BatchHistory history = cache.Update(0, k_, v_);
    Attention(q_, history, scale_, ctx, out_);
    const double seconds = Since(start);
    benchmark::DoNotOptimize(out_.Data());
    for (const SequenceId id : ids_) cache.Remove(id, positions_.front(), kEndOfSequence);
    return seconds;
  }

 private:
  std::vector<Position> positions_;
  std::vector<SequenceId> ids_;
  Tensor q_, k_, v_, out_;
  float scale_;
};

// The least time a step that must read `kv_bytes` and do `flops` can take.
double LimitSeconds(double kv_bytes, double flops, int threads) {
  return std::max(kv_bytes / ReadBandwidth(static_cast<std::size_t>(kv_bytes), threads),
                  flops / FmaPeakFor(kernels::BestKernels().isa, threads));
}

// Sets fraction and the label for a step that must read `kv_bytes` and do `flops`.
void SetLimitCounters(benchmark::State& state, DType dtype, double seconds, double kv_bytes,
                      double flops, int threads) {
  const double bandwidth = ReadBandwidth(static_cast<std::size_t>(kv_bytes), threads);
  SetRooflineCounters(state, dtype, static_cast<double>(kContext), threads, seconds, kv_bytes,
                      flops, bandwidth, ReadName(static_cast<std::size_t>(kv_bytes)));
  state.counters["step_us"] = seconds * 1e6;
}

void BM_BatchedDecode(benchmark::State& state, DType dtype) {
  const int sequences = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const double kv_bytes = sequences * (kContext + 1) * TokenBytes(dtype);
  // The limits first: measuring them evicts whatever was in cache.
  ReadBandwidth(static_cast<std::size_t>(kv_bytes), threads);
  FmaPeakFor(kernels::BestKernels().isa, threads);
  Context ctx(threads);
  CausalCache cache = MakeCache(sequences, kContext, dtype);
  // The model's K/V as f16 (f32 for a float pool of f32); Update quantizes.
  const DType input = dtype == DType::kF32 ? DType::kF32 : DType::kF16;
  const Tensor k = RandomTensor(input, kHkv, kContext, 1);
  const Tensor v = RandomTensor(input, kHkv, kContext, 2);
  for (SequenceId seq = 0; seq < sequences; ++seq) Prefill(cache, k, v, seq, 0, kContext);
  Step step(sequences, kContext);
  step.Run(cache, ctx);  // warm: the context's arena, the pool's free list
  double total = 0;
  std::int64_t steps = 0;
  for (auto _ : state) {
    const double seconds = step.Run(cache, ctx);
    state.SetIterationTime(seconds);
    total += seconds;
    ++steps;
  }
  const double flops = 4.0 * kHq * (kContext + 1) * kD * sequences;
  SetLimitCounters(state, dtype, steps > 0 ? total / static_cast<double>(steps) : 0.0, kv_bytes,
                   flops, threads);
  state.counters["sequences"] = sequences;
}
void BatchedArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"sequences", "threads"})
      ->ArgsProduct({{8, 32}, {1, 2}})
      ->Unit(benchmark::kMicrosecond)
      ->UseManualTime();
}
BENCHMARK_CAPTURE(BM_BatchedDecode, f16, DType::kF16)->Apply(BatchedArgs);
BENCHMARK_CAPTURE(BM_BatchedDecode, int8, DType::kI8)->Apply(BatchedArgs);
BENCHMARK_CAPTURE(BM_BatchedDecode, int4, DType::kI4)->Apply(BatchedArgs);

void BM_SharedPrefixDecode(benchmark::State& state) {
  constexpr int kSequences = 16;
  constexpr Position kOwn = 256;
  const int threads = static_cast<int>(state.range(0));
  // The prefix read once, then every sequence's own tokens and its step token.
  const double kv_bytes = (kContext + kSequences * (kOwn + 1)) * TokenBytes(kDtype);
  ReadBandwidth(static_cast<std::size_t>(kv_bytes), threads);
  FmaPeakFor(kernels::BestKernels().isa, threads);
  Context ctx(threads);
  const Tensor k = RandomTensor(kDtype, kHkv, kContext, 3);
  const Tensor v = RandomTensor(kDtype, kHkv, kContext, 4);

  CausalCache shared = MakeCache(kSequences, kContext + kOwn);
  Prefill(shared, k, v, 0, 0, kContext);
  for (SequenceId seq = 1; seq < kSequences; ++seq) shared.CopyPrefix(0, seq, kContext);
  for (SequenceId seq = 0; seq < kSequences; ++seq) {
    Prefill(shared, k.Slice(2, seq * kOwn, (seq + 1) * kOwn),
            v.Slice(2, seq * kOwn, (seq + 1) * kOwn), seq, kContext, kOwn);
  }
  CausalCache one = MakeCache(1, kContext + kOwn);
  Prefill(one, k, v, 0, 0, kContext);
  Prefill(one, k, v, 0, kContext, kOwn);

  Step step_shared(kSequences, kContext + kOwn);
  Step step_one(1, kContext + kOwn);
  step_shared.Run(shared, ctx);
  step_one.Run(one, ctx);
  double total_shared = 0, total_one = 0;
  std::int64_t steps = 0;
  for (auto _ : state) {
    const double seconds = step_shared.Run(shared, ctx);
    total_one += step_one.Run(one, ctx);
    state.SetIterationTime(seconds);
    total_shared += seconds;
    ++steps;
  }
  const double flops = 4.0 * kHq * (kContext + kOwn + 1) * kD * kSequences;
  SetLimitCounters(state, kDtype, steps > 0 ? total_shared / static_cast<double>(steps) : 0.0,
                   kv_bytes, flops, threads);
  state.counters["sequences"] = kSequences;
  state.counters["one_sequence_us"] = steps > 0 ? total_one / static_cast<double>(steps) * 1e6 : 0;
  state.counters["vs_one_sequence"] = total_one > 0 ? total_shared / total_one : 0.0;
  const Position one_tokens = kContext + kOwn + 1;
  state.counters["vs_one_limit"] =
      LimitSeconds(kv_bytes, flops, threads) /
      LimitSeconds(one_tokens * TokenBytes(kDtype), 4.0 * kHq * one_tokens * kD, threads);
}
BENCHMARK(BM_SharedPrefixDecode)
    ->ArgNames({"threads"})
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();

}  // namespace
}  // namespace ringkv::bench
