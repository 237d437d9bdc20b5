// The chat workload with a budget of half its working set: prefill skipped, hit
// rate, lookup time, and the restore rate (bytes of K/V the caches hold after a
// lookup that did not have to be recomputed, per second of Lookup). Restoring
// shares blocks rather than copying bytes, so no memcpy ratio is given.
#include <benchmark/benchmark.h>

#include "chat_workload.h"

namespace ringkv::bench {
namespace {

void BM_ChatWorkload(benchmark::State& state) {
  const ChatShape shape;
  const double budget_fraction = static_cast<double>(state.range(0)) / 100.0;
  // The working set: the same workload with no budget pressure.
  std::size_t working_set = 0;
  {
    LayerCaches caches = LayerCaches::Interleaved(shape.layers, shape.global_every, shape.window);
    PromptCache cache(caches, ChatOptions(std::size_t{1} << 40));
    working_set = RunChat(shape, cache, caches).peak_bytes;
  }
  const auto budget = static_cast<std::size_t>(static_cast<double>(working_set) * budget_fraction);
  ChatResult r;
  for (auto _ : state) {
    LayerCaches caches = LayerCaches::Interleaved(shape.layers, shape.global_every, shape.window);
    PromptCache cache(caches, ChatOptions(budget));
    r = RunChat(shape, cache, caches);
    benchmark::DoNotOptimize(r);
  }
  const double restored_bytes =
      static_cast<double>(r.reused_tokens) * static_cast<double>(shape.TokenBytes()) * shape.layers;
  const double restore_rate = restored_bytes / r.lookup_seconds;
  state.counters["working_set_MiB"] = static_cast<double>(working_set) / (1 << 20);
  state.counters["budget_MiB"] = static_cast<double>(budget) / (1 << 20);
  state.counters["prefill_skipped"] =
      static_cast<double>(r.reused_tokens) / static_cast<double>(r.prompt_tokens);
  state.counters["hit_rate"] = static_cast<double>(r.hits) / static_cast<double>(r.lookups);
  state.counters["lookup_us"] = 1e6 * r.lookup_seconds / static_cast<double>(r.lookups);
  state.counters["evictions"] = static_cast<double>(r.evictions);
  state.counters["restore_GBps"] = restore_rate / 1e9;
}
BENCHMARK(BM_ChatWorkload)
    ->ArgName("budget_pct")
    ->Arg(50)
    ->Arg(100)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ringkv::bench
