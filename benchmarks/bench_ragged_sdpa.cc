// RaggedSdpa (kernels/ringkv/kernels/ragged_sdpa.h) against the machine's limits
// measured in the same run (roofline.h). Hq 32, Hkv 8, D 128, f16; K/V in blocks of
// 256 keys laid out [Hkv, 256, D] like the paged block store, one run per block;
// one query row per group, seeing all of its keys.
//   BM_RaggedDecode: `groups` groups of 4096 keys each. fraction = t_limit / t,
//     t_limit = max(K+V bytes / read bandwidth for a working set of K+V's size,
//                   4 Hq keys D flops / FMA peak on the same threads).
//   BM_RaggedSharedPrefix: 16 groups sharing a 4096-key prefix plus 256 own keys
//     each. vs_one_group = its time / the time of one group of 4096 + 256 keys
//     (measured in the same run): reading the prefix once per group would be ~16.
//     fraction as above over the bytes that must be read once (prefix + 16 x own).
//     vs_separate = its time / the time of the same groups each listing the
//     prefix's blocks among its own runs (no cascade: the prefix read 16 times).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "attention_shape.h"
#include "bench_util.h"
#include "ringkv/kernels/kernel_table.h"
#include "ringkv/kernels/ragged_sdpa.h"
#include "ringkv/kernels/thread_pool.h"
#include "roofline.h"
#include "roofline_counters.h"

namespace ringkv::bench {
namespace {

using kernels::RaggedGroup;
using kernels::RaggedPrefix;
using kernels::RaggedRun;

constexpr std::int64_t kBlock = 256;  // keys per block (the block store's default)
constexpr DType kDtype = DType::kF16;

// `blocks` blocks of K and of V, [blocks, Hkv, 256, D] each.
struct Pool {
  explicit Pool(std::int64_t block_count)
      : blocks(block_count),
        k(RandomBuffer(kDtype, static_cast<std::size_t>(block_count * kHkv * kBlock * kD), 1)),
        v(RandomBuffer(kDtype, static_cast<std::size_t>(block_count * kHkv * kBlock * kD), 2)) {}
  RaggedRun Run(std::int64_t block) const {
    const std::int64_t offset = block * kHkv * kBlock * kD * 2;  // bytes
    RaggedRun run;
    run.k = static_cast<const std::byte*>(k.Data()) + offset;
    run.v = static_cast<const std::byte*>(v.Data()) + offset;
    run.count = kBlock;
    run.k_head_stride = kBlock * kD;
    run.k_row_stride = kD;
    run.v_head_stride = kBlock * kD;
    run.v_row_stride = kD;
    return run;
  }
  std::int64_t blocks;
  Buffer k;
  Buffer v;
};

// One call's arrays: one row per group, each seeing its whole key list.
struct Batch {
  explicit Batch(std::int64_t n)
      : q(RandomBuffer(DType::kF32, static_cast<std::size_t>(kHq * n * kD), 99)),
        out(static_cast<std::size_t>(kHq * n * kD) * sizeof(float)) {
    params.q.data = q.Data();
    params.q.dtype = DType::kF32;
    params.q.shape = {1, kHq, n, kD};
    params.q.strides = {kHq * n * kD, n * kD, kD, 1};
    params.k_dtype = kDtype;
    params.v_dtype = kDtype;
    params.kv_heads = kHkv;
    params.value_dim = kD;
    params.out = static_cast<float*>(out.Data());
    params.out_strides = {kHq * n * kD, n * kD, kD, 1};
    params.scale = 1.0f / std::sqrt(static_cast<float>(kD));
  }
  // Points params at the vectors (after they are filled).
  void Bind() {
    params.runs = runs;
    params.prefixes = prefixes;
    params.groups = groups;
    params.rows = rows;
    params.row_lo = row_lo;
    params.row_hi = row_hi;
  }
  void Call(kernels::ThreadPool& pool) {
    kernels::RaggedSdpa(params, kernels::BestKernels(), pool,
                        workspace.AtLeast(kernels::RaggedSdpaWorkspaceBytes(
                            kernels::ShapeOf(params), pool.Concurrency())));
    benchmark::DoNotOptimize(out.Data());
    benchmark::ClobberMemory();
  }
  Buffer q;
  Buffer out;
  GrowingWorkspace workspace;
  std::vector<RaggedRun> runs;
  std::vector<RaggedPrefix> prefixes;
  std::vector<RaggedGroup> groups;
  std::vector<std::int64_t> rows, row_lo, row_hi;
  kernels::RaggedSdpaParams params;
};

// Group g: row g, its prefix (or none) and `own` blocks starting at `first_block`.
void AddGroup(Batch& b, const Pool& pool, std::int64_t prefix, std::int64_t prefix_keys,
              std::int64_t first_block, std::int64_t own) {
  const auto g = static_cast<std::int64_t>(b.groups.size());
  RaggedGroup group;
  group.first_row = g;
  group.row_count = 1;
  group.prefix = prefix;
  group.first_run = static_cast<std::int64_t>(b.runs.size());
  group.run_count = own;
  for (std::int64_t i = 0; i < own; ++i) b.runs.push_back(pool.Run(first_block + i));
  b.groups.push_back(group);
  b.rows.push_back(g);
  b.row_lo.push_back(0);
  b.row_hi.push_back(prefix_keys + own * kBlock);
}

// fraction = max(bytes / bandwidth, flops / peak) / seconds.
void SetCounters(benchmark::State& state, double kv_bytes, double keys, int threads,
                 double seconds) {
  const double bandwidth = ReadBandwidth(static_cast<std::size_t>(kv_bytes), threads);
  const double flops = 4.0 * static_cast<double>(kHq * kD) * keys;
  SetRooflineCounters(state, kDtype, keys, threads, seconds, kv_bytes, flops, bandwidth,
                      ReadName(static_cast<std::size_t>(kv_bytes)));
  state.SetBytesProcessed(static_cast<std::int64_t>(kv_bytes) * state.iterations());
}

double KvBytes(std::int64_t keys) { return 2.0 * static_cast<double>(kHkv * keys * kD * 2); }

void BM_RaggedDecode(benchmark::State& state) {
  const std::int64_t groups = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  constexpr std::int64_t kBlocksPerGroup = 4096 / kBlock;
  const std::int64_t keys = groups * kBlocksPerGroup * kBlock;
  // The limits first: measuring them evicts whatever was in cache.
  ReadBandwidth(static_cast<std::size_t>(KvBytes(keys)), threads);
  FmaPeakFor(kernels::BestKernels().isa, threads);
  kernels::ThreadPool pool(threads);
  const Pool kv(groups * kBlocksPerGroup);
  Batch batch(groups);
  for (std::int64_t g = 0; g < groups; ++g)
    AddGroup(batch, kv, -1, 0, g * kBlocksPerGroup, kBlocksPerGroup);
  batch.Bind();
  batch.Call(pool);
  const double seconds = TimedLoop(state, [&](std::size_t) { batch.Call(pool); });
  state.counters["groups"] = static_cast<double>(groups);
  SetCounters(state, KvBytes(keys), static_cast<double>(keys), threads, seconds);
}
BENCHMARK(BM_RaggedDecode)
    ->ArgNames({"groups", "threads"})
    ->ArgsProduct({{8, 32}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_RaggedSharedPrefix(benchmark::State& state) {
  constexpr std::int64_t kGroups = 16;
  constexpr std::int64_t kPrefixBlocks = 4096 / kBlock;
  const int threads = static_cast<int>(state.range(0));
  const std::int64_t keys = (kPrefixBlocks + kGroups) * kBlock;  // read once
  ReadBandwidth(static_cast<std::size_t>(KvBytes(keys)), threads);
  FmaPeakFor(kernels::BestKernels().isa, threads);
  kernels::ThreadPool pool(threads);
  const Pool kv(kPrefixBlocks + kGroups);

  Batch shared(kGroups);
  for (std::int64_t i = 0; i < kPrefixBlocks; ++i) shared.runs.push_back(kv.Run(i));
  shared.prefixes.push_back({0, kPrefixBlocks});
  for (std::int64_t g = 0; g < kGroups; ++g) {
    AddGroup(shared, kv, 0, kPrefixBlocks * kBlock, kPrefixBlocks + g, 1);
  }
  shared.Bind();
  // The same keys as one group of 4096 + 256, no prefix.
  Batch one(1);
  AddGroup(one, kv, -1, 0, 0, kPrefixBlocks + 1);
  one.Bind();
  // The same 16 groups with the prefix's blocks listed in each group's own runs:
  // every group reads them itself.
  Batch separate(kGroups);
  for (std::int64_t g = 0; g < kGroups; ++g) {
    const auto first = static_cast<std::int64_t>(separate.runs.size());
    for (std::int64_t i = 0; i < kPrefixBlocks; ++i) separate.runs.push_back(kv.Run(i));
    separate.runs.push_back(kv.Run(kPrefixBlocks + g));
    separate.groups.push_back({g, 1, -1, first, kPrefixBlocks + 1});
    separate.rows.push_back(g);
    separate.row_lo.push_back(0);
    separate.row_hi.push_back((kPrefixBlocks + 1) * kBlock);
  }
  separate.Bind();

  shared.Call(pool);
  const double seconds = TimedLoop(state, [&](std::size_t) { shared.Call(pool); });
  // The comparisons, as many calls each as the timed loop made.
  const auto time_of = [&](Batch& b) {
    using Clock = std::chrono::steady_clock;
    b.Call(pool);
    const auto start = Clock::now();
    for (std::int64_t i = 0; i < state.iterations(); ++i) b.Call(pool);
    return std::chrono::duration<double>(Clock::now() - start).count() /
           static_cast<double>(state.iterations());
  };
  const double one_seconds = time_of(one);
  const double separate_seconds = time_of(separate);
  state.counters["groups"] = kGroups;
  state.counters["one_group_us"] = one_seconds * 1e6;
  state.counters["vs_one_group"] = one_seconds > 0.0 ? seconds / one_seconds : 0.0;
  state.counters["separate_us"] = separate_seconds * 1e6;
  state.counters["vs_separate"] = separate_seconds > 0.0 ? seconds / separate_seconds : 0.0;
  // Every group's row reads the prefix and its own keys: flops over 16 x 4352 keys.
  SetCounters(state, KvBytes(keys), static_cast<double>(kGroups * (kPrefixBlocks + 1) * kBlock),
              threads, seconds);
  state.counters["T"] = static_cast<double>((kPrefixBlocks + 1) * kBlock);
}
BENCHMARK(BM_RaggedSharedPrefix)
    ->ArgNames({"threads"})
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace ringkv::bench
