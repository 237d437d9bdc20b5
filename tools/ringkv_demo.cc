// The main job until the decode-loop demo lands: shows which kernel tier this CPU
// gets, then runs grouped-query decode attention over K/V caches of growing length
// and reports how close each call comes to the machine's memory bandwidth,
// measured here in the same run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ringkv/dtype.h"
#include "ringkv/kernels/isa.h"
#include "ringkv/kernels/kernel_table.h"
#include "ringkv/kernels/sdpa.h"
#include "ringkv/kernels/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace rk = ringkv::kernels;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Streaming read bandwidth over `bytes` on every pool thread (bytes/s).
double ReadBandwidth(rk::ThreadPool& pool, std::size_t bytes) {
  std::vector<float> buffer(bytes / sizeof(float), 1.0f);
  std::vector<double> sums(static_cast<std::size_t>(pool.Size()), 0.0);
  const std::size_t parts = static_cast<std::size_t>(pool.Size());
  const std::size_t per_part = buffer.size() / parts;
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = Clock::now();
    pool.Run(parts, [&](std::size_t part, int) {
      const float* p = buffer.data() + part * per_part;
      float acc[16] = {};
      for (std::size_t i = 0; i + 16 <= per_part; i += 16)
        for (int j = 0; j < 16; ++j) acc[j] += p[i + static_cast<std::size_t>(j)];
      float total = 0;
      for (float a : acc) total += a;
      sums[part] += static_cast<double>(total);
    });
    best = std::max(best, static_cast<double>(bytes) / Seconds(start, Clock::now()));
  }
  return sums[0] > 0 ? best : best;  // keep the sums alive
}

struct Options {
  int threads = 0;
  bool help = false;
};

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      o.help = true;
    } else if (arg.rfind("--threads=", 0) == 0) {
      o.threads = std::atoi(arg.c_str() + 10);
    } else {
      std::fprintf(stderr, "unknown argument %s (try --help)\n", arg.c_str());
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = Parse(argc, argv);
  if (options.help) {
    std::printf("usage: ringkv_demo [--threads=N]\n"
                "Runs GQA decode attention (Hq 32, Hkv 8, D 128, f16 K/V) over growing\n"
                "caches and reports the fraction of the measured memory bandwidth reached.\n");
    return 0;
  }
  const rk::KernelTable& table = rk::BestKernels();
  rk::ThreadPool pool(options.threads);
  std::printf("ringkv kernel demo: tier %s, %d threads\n",
              std::string(rk::IsaName(table.isa)).c_str(), pool.Size());
  const double dram = ReadBandwidth(pool, std::size_t{512} << 20);
  std::printf("streaming read bandwidth (512 MiB, measured now): %.1f GB/s\n\n", dram / 1e9);

  constexpr std::int64_t kHq = 32, kHkv = 8, kD = 128;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> q(static_cast<std::size_t>(kHq * kD));
  for (float& x : q) x = dist(rng);
  std::vector<float> out(q.size());

  std::printf("%8s %12s %12s %10s %10s\n", "T", "K+V MiB", "us/call", "GB/s", "of DRAM");
  for (std::int64_t t : {1024, 4096, 16384, 65536}) {
    const std::size_t n = static_cast<std::size_t>(kHkv * t * kD);
    std::vector<std::uint16_t> k(n), v(n);
    for (std::size_t i = 0; i < n; ++i) {
      k[i] = ringkv::F32ToF16(dist(rng));
      v[i] = ringkv::F32ToF16(dist(rng));
    }
    rk::SdpaParams p;
    p.q = {q.data(), ringkv::DType::kF32, {1, kHq, 1, kD}, {kHq * kD, kD, kD, 1}};
    const rk::KvSegment segment{{k.data(), ringkv::DType::kF16, {1, kHkv, t, kD}, {kHkv * t * kD, t * kD, kD, 1}},
                                {v.data(), ringkv::DType::kF16, {1, kHkv, t, kD}, {kHkv * t * kD, t * kD, kD, 1}}};
    p.kv = {&segment, 1};
    p.out = out.data();
    p.out_strides = {kHq * kD, kD, kD, 1};
    p.scale = 1.0f / std::sqrt(static_cast<float>(kD));
    rk::Sdpa(p, table, pool);  // warm-up
    const int reps = static_cast<int>(std::max<std::int64_t>(3, 400000 / t));
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      const auto start = Clock::now();
      rk::Sdpa(p, table, pool);
      best = std::min(best, Seconds(start, Clock::now()));
    }
    const double bytes = 2.0 * static_cast<double>(n) * 2.0;
    std::printf("%8lld %12.1f %12.1f %10.1f %9.0f%%\n", static_cast<long long>(t),
                bytes / (1 << 20), best * 1e6, bytes / best / 1e9, 100.0 * bytes / best / dram);
  }
  std::printf("\n(caches that fit in L3 can beat the DRAM figure; see benchmarks/ for the roofline)\n");
  return 0;
}
