// ringkv_sdpa_probe: the best time of kernels::Sdpa on one shape, for A/B runs
// of two builds (benchmarks/ab_alternate.sh alternates them). ringkv_bench holds
// each case to limits it measures; this probe only times, so that two
// libraries can be compared call for call in the same minutes, which is what
// this noisy kind of host needs (docs/benchmarks.md, "Reproduce").
//
//   ringkv_sdpa_probe --dtype f16 --kv-heads 8 --tokens 16384 --threads 1
//   ringkv_sdpa_probe --dtype f16 --tokens 32768 --layers 8   (calls cycle 8 layers)
//
// prints one line: the shape, the best time of one call over the rounds, and
// that time per key and kv head, as wall time and as thread time (wall time x
// threads: the cost of a key to the threads that share it).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.h"
#include "ringkv/dtype.h"
#include "ringkv/kernels/kernel_table.h"
#include "ringkv/kernels/sdpa.h"
#include "ringkv/kernels/thread_pool.h"
#include "stored_rows.h"

namespace {

using ringkv::DType;
using ringkv::bench::Buffer;
using ringkv::bench::GrowingWorkspace;
using ringkv::bench::RandomBuffer;
using ringkv::bench::RandomStoredRows;
using ringkv::bench::StoredRows;

struct Options {
  std::string dtype = "f16";
  std::int64_t q_per_kv = 4;
  std::int64_t kv_heads = 8;
  std::int64_t tokens = 16384;
  std::int64_t queries = 1;
  std::int64_t head_dim = 128;
  int threads = 1;
  int rounds = 40;
  int calls = 20;
  int layers = 1;
};

int Run(const Options& o) {
  const DType dtype = *ringkv::StorageDTypeNamed(o.dtype);
  const std::int64_t hq = o.q_per_kv * o.kv_heads;
  // Each layer's K and V at their own addresses, as in a model, where a step's
  // K/V come from DRAM: --layers large enough that they outgrow the L3.
  std::vector<StoredRows> ks;
  std::vector<StoredRows> vs;
  std::vector<ringkv::kernels::KvSegment> segments;
  for (int layer = 0; layer < o.layers; ++layer) {
    const auto seed = static_cast<std::uint32_t>(2 * layer + 2);
    ks.push_back(RandomStoredRows(dtype, o.kv_heads, o.tokens, o.head_dim, seed));
    vs.push_back(RandomStoredRows(dtype, o.kv_heads, o.tokens, o.head_dim, seed + 1));
    segments.push_back({ks.back().array, vs.back().array});  // the views survive the moves
  }
  const Buffer q =
      RandomBuffer(DType::kF32, static_cast<std::size_t>(hq * o.queries * o.head_dim), 1);
  std::vector<float> out(static_cast<std::size_t>(hq * o.queries * o.head_dim));

  ringkv::kernels::SdpaParams p;
  p.q = ringkv::bench::ContiguousRows(q, DType::kF32, hq, o.queries, o.head_dim);
  if (o.queries > 1) p.mask.kind = ringkv::kernels::MaskKind::kCausal;
  p.out = out.data();
  p.out_strides = p.q.strides;
  p.scale = 1.0f / std::sqrt(static_cast<float>(o.head_dim));
  p.kv = std::span<const ringkv::kernels::KvSegment>(segments.data(), 1);

  ringkv::kernels::ThreadPool pool(o.threads);
  GrowingWorkspace workspace;
  const auto ws = workspace.AtLeast(
      ringkv::kernels::SdpaWorkspaceBytes(ringkv::kernels::ShapeOf(p), pool.Size()));
  const ringkv::kernels::KernelTable& table = ringkv::kernels::BestKernels();
  double best = INFINITY;
  for (int round = 0; round < o.rounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < o.calls; ++i) {
      p.kv = std::span<const ringkv::kernels::KvSegment>(
          &segments[static_cast<std::size_t>(i % o.layers)], 1);
      ringkv::kernels::Sdpa(p, table, pool, ws);
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count() / o.calls);
  }
  const double per_key = best * 1e9 / static_cast<double>(o.kv_heads * o.tokens);
  std::printf(
      "%s Hq %lld Hkv %lld D %lld T %lld L %lld threads %d: best %.1f us of %d x %d calls, "
      "%.2f ns wall, %.2f ns thread time per key and kv head\n",
      o.dtype.c_str(), static_cast<long long>(hq), static_cast<long long>(o.kv_heads),
      static_cast<long long>(o.head_dim), static_cast<long long>(o.tokens),
      static_cast<long long>(o.queries), o.threads, best * 1e6, o.rounds, o.calls, per_key,
      per_key * o.threads);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Best time of kernels::Sdpa on one shape, for A/B runs of two builds.",
               "ringkv_sdpa_probe");
  app.add_option("--dtype", o.dtype, "K/V dtype")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "int8", "int4"}))
      ->capture_default_str();
  const auto ranged = [&app](const char* name, auto& value, const char* help, int lo, int hi) {
    app.add_option(name, value, help)->check(CLI::Range(lo, hi))->capture_default_str();
  };
  ranged("--q-per-kv", o.q_per_kv, "query heads per kv head", 1, 64);
  ranged("--kv-heads", o.kv_heads, "kv heads", 1, 256);
  ranged("--tokens", o.tokens, "keys (T)", 1, 1 << 22);
  ranged("--queries", o.queries, "query rows (L), the last positions; > 1 is causal", 1, 1 << 16);
  ranged("--head-dim", o.head_dim, "D (a multiple of 32 for int4)", 1, 1024);
  ranged("--threads", o.threads, "threads", 1, 256);
  ranged("--rounds", o.rounds, "timed rounds; the best one counts", 1, 100000);
  ranged("--calls", o.calls, "calls per round", 1, 100000);
  ranged("--layers", o.layers, "layers of K/V the calls cycle through", 1, 1024);
  CLI11_PARSE(app, argc, argv);
  if (o.queries > o.tokens) {
    std::fprintf(stderr, "[ringkv_sdpa_probe] --queries %lld must be at most --tokens %lld\n",
                 static_cast<long long>(o.queries), static_cast<long long>(o.tokens));
    return 2;
  }
  if (o.dtype == "int4" && o.head_dim % 32 != 0) {
    std::fprintf(stderr,
                 "[ringkv_sdpa_probe] --head-dim %lld must be a multiple of 32 for --dtype int4 "
                 "(its groups of 32)\n",
                 static_cast<long long>(o.head_dim));
    return 2;
  }
  try {
    return Run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[ringkv_sdpa_probe] %s\n", e.what());
    return 1;
  }
}
