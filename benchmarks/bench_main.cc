// The benchmark binary's main: Google Benchmark's usual console output, then a
// compact summary with one line per case: name, threads, dtype, T, time per
// iteration, the limit the case is held to, and the fraction of that limit.
//   ringkv_bench --benchmark_min_time=0.05            the whole suite, briefly
//   ringkv_bench --benchmark_filter=Decode            only its cases (and their limits)
//   ringkv_bench --list_tiers                         the tiers RINGKV_ISA may name here
// The kernel benchmarks run kernels::BestKernels(), so RINGKV_ISA=<tier> measures
// that tier; the summary's header names it.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ringkv/kernels/isa.h"
#include "ringkv/kernels/kernel_table.h"

namespace {

struct Line {
  std::string name;
  std::string threads;
  std::string dtype;
  std::string t;
  std::string time;
  std::string limit;
  std::string fraction;
};

std::string LabelField(const std::string& label, const std::string& key) {
  const std::string prefix = key + "=";
  const std::size_t at = label.find(prefix);
  if (at == std::string::npos) return "-";
  const std::size_t start = at + prefix.size();
  const std::size_t end = label.find(' ', start);
  return label.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

std::string Counter(const benchmark::BenchmarkReporter::Run& run, const char* name,
                    const char* format) {
  const auto it = run.counters.find(name);
  if (it == run.counters.end()) return "-";
  char text[32];
  std::snprintf(text, sizeof(text), format, it->second.value);
  return text;
}

// Collects every plain run (no aggregates, no errors) while the console prints.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred || run.run_type != Run::RT_Iteration) continue;
      char time[32];
      std::snprintf(time, sizeof(time), "%.1f %s", run.GetAdjustedRealTime(),
                    benchmark::GetTimeUnitString(run.time_unit));
      lines_.push_back(Line{run.benchmark_name(), Counter(run, "threads", "%.0f"),
                            LabelField(run.report_label, "dtype"), Counter(run, "T", "%.0f"), time,
                            LabelField(run.report_label, "limit"),
                            Counter(run, "fraction", "%.2f")});
    }
  }

  void PrintSummary() const {
    const std::string tier(ringkv::kernels::IsaKey(ringkv::kernels::BestKernels().isa));
    std::printf("\nringkv benchmark summary, tier %s (fraction = share of the limit reached)\n",
                tier.c_str());
    std::printf("%-52s %7s %-9s %6s %12s %-24s %8s\n", "name", "threads", "dtype", "T", "time",
                "limit", "fraction");
    for (const Line& l : lines_) {
      std::printf("%-52s %7s %-9s %6s %12s %-24s %8s\n", l.name.c_str(), l.threads.c_str(),
                  l.dtype.c_str(), l.t.c_str(), l.time.c_str(), l.limit.c_str(),
                  l.fraction.c_str());
    }
  }

 private:
  std::vector<Line> lines_;
};

// The RINGKV_ISA keys of every tier that is compiled in, runs here and is within
// the cap, lowest first, one per line (run_summary.sh runs the suite once per tier).
void ListTiers() {
  for (const ringkv::kernels::Isa isa : ringkv::kernels::AvailableIsas()) {
    std::printf("%s\n", std::string(ringkv::kernels::IsaKey(isa)).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--list_tiers") == 0) {
    ListTiers();
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // In the JSON output's context too, for plot_decode.py.
  benchmark::AddCustomContext(
      "ringkv_tier", std::string(ringkv::kernels::IsaKey(ringkv::kernels::BestKernels().isa)));
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintSummary();
  benchmark::Shutdown();
  return 0;
}
