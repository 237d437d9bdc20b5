#include "roofline_counters.h"

#include <cstdio>

#include "bench_util.h"
#include "ringkv/kernels/kernel_table.h"
#include "roofline.h"

namespace ringkv::bench {

std::string LimitText(const char* what, double value, const char* unit) {
  char text[64];
  std::snprintf(text, sizeof(text), "%s=%.1f%s", what, value, unit);
  return text;
}

std::string ReadName(std::size_t bytes) {
  char name[32];
  std::snprintf(name, sizeof(name), "read(%zuMiB)", bytes / kMiB);
  return name;
}

void SetRooflineCounters(benchmark::State& state, DType dtype, double keys, int threads,
                         double seconds, double kv_bytes, double flops, double bandwidth,
                         const std::string& bandwidth_name) {
  const double peak = FmaPeakFor(kernels::BestKernels().isa, threads);
  const double t_memory = kv_bytes / bandwidth;
  const double t_compute = flops / peak;
  const bool memory_bound = t_memory >= t_compute;
  const double t_limit = memory_bound ? t_memory : t_compute;
  state.counters["T"] = keys;
  state.counters["threads"] = threads;
  state.counters["t_limit_us"] = t_limit * 1e6;
  // Each limit on its own, for plots of time against both (plot_decode.py).
  state.counters["t_memory_us"] = t_memory * 1e6;
  state.counters["t_compute_us"] = t_compute * 1e6;
  state.counters["kv_bytes"] = kv_bytes;
  state.counters["fraction"] = seconds > 0.0 ? t_limit / seconds : 0.0;
  state.counters["GB/s"] = seconds > 0.0 ? kv_bytes / seconds * 1e-9 : 0.0;
  state.SetLabel(SummaryLabel(std::string(DTypeName(dtype)),
                              memory_bound
                                  ? LimitText(bandwidth_name.c_str(), bandwidth * 1e-9, "GB/s")
                                  : LimitText("fma", peak * 1e-9, "GFLOP/s")));
}

}  // namespace ringkv::bench
