// ringkv::Context: which kernel table it picks under the process tier cap
// (RINGKV_ISA), and what it does when its threads cannot start. ctest runs this
// suite once per tier cap, and RefusesToStartUnderAnInvalidTierCap alone with an
// invalid RINGKV_ISA (tests/CMakeLists.txt), so the cap checks see every case.
#include "ringkv/context.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "lib_test_util.h"
#include "ringkv/attention.h"
#include "ringkv/error.h"
#include "ringkv/kernels/kernel_table.h"
#include "ringkv/kv_cache.h"
#include "thread_start.h"

namespace ringkv {
namespace {

using kernels::Isa;
using test::ExpectThrowWith;

constexpr Isa kAllTiers[] = {Isa::kScalar, Isa::kSse42, Isa::kAvx2, Isa::kAvx512, Isa::kNeon};

// RINGKV_ISA as the environment holds it, read independently of the library.
std::string EnvValue() {
  const char* value = std::getenv("RINGKV_ISA");
  return value == nullptr ? "" : value;
}

bool EnvIsValid() {
  const std::string value = EnvValue();
  return value.empty() || value == "scalar" || value == "sse42" || value == "avx2" ||
         value == "avx512" || value == "neon";
}

TEST(ContextTest, RefusesToStartUnderAnInvalidTierCap) {
  if (EnvIsValid()) {
    const Context ctx(1);
    EXPECT_EQ(ctx.Tier(), kernels::BestKernels().isa);
  } else {
    ExpectThrowWith<Error>([] { const Context ctx(1); },
                           {"[Context] RINGKV_ISA '" + EnvValue() + "'", "names no tier"});
    ExpectThrowWith<Error>([] { const Context ctx(1, Isa::kScalar); }, {"RINGKV_ISA"});
  }
}

TEST(ContextTest, ATierAboveTheCapIsRefusedNamingBoth) {
  const Isa cap = kernels::TierCap().cap;
  const kernels::CpuFeatures host = kernels::DetectCpu();
  for (Isa isa : kAllTiers) {
    const std::string key(kernels::IsaKey(isa));
    if (!kernels::IsaWithinCap(isa, cap)) {
      ExpectThrowWith<Error>(
          [isa] { const Context ctx(1, isa); },
          {"[Context] isa " + key, "above the tier cap " + std::string(kernels::IsaKey(cap)),
           "RINGKV_ISA=" + EnvValue()});
    } else if (kernels::IsaCompiled(isa) && kernels::IsaRunsOn(isa, host)) {
      const Context ctx(1, isa);
      EXPECT_EQ(ctx.Tier(), isa) << key;
    } else {
      ExpectThrowWith<Error>([isa] { const Context ctx(1, isa); },
                             {"[Context] isa " + key, "cannot run on this CPU"});
    }
  }
}

// A starter that fails at the second start, as a process limit would.
std::atomic<int> starts{0};
std::atomic<int> finished{0};

std::thread FailSecondStart(std::function<void()> body) {
  if (starts.fetch_add(1) == 1) {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                            "test thread limit");
  }
  return std::thread([body = std::move(body)] {
    body();
    finished.fetch_add(1);
  });
}

TEST(ContextTest, ThreadsThatCannotStartAreAnErrorNamingTheCount) {
  const kernels::internal::ScopedThreadStarter limit(FailSecondStart);
  ExpectThrowWith<Error>([] { const Context ctx(4); },
                         {"[Context] threads 4", "could not be started", "test thread limit"});
  EXPECT_EQ(starts.load(), 2);
  EXPECT_EQ(finished.load(), 1) << "the worker that did start was joined";
}

// Deterministic values in [-1, 1) that differ per `seed`.
Tensor Values(const Shape& shape, int seed, DType dtype = DType::kF32) {
  std::vector<float> values(static_cast<std::size_t>(shape.NumElements()));
  std::uint32_t state = 0x9E3779B9u * static_cast<std::uint32_t>(seed + 1);
  for (float& v : values) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) * 0x1p-23f - 1.0f;
  }
  return Tensor::FromVector(values, shape, dtype);
}

// Callers that share one Context (and so one pool) from several threads: each
// result equals the serial one bit for bit. Meant for ThreadSanitizer
// (tools/test.sh --tsan), which also sees the pool's hand-over.
TEST(ContextTest, ConcurrentAttentionOnOneContextAgreesWithSerialRuns) {
  constexpr int kCallers = 3;
  constexpr int kRounds = 8;
  Context ctx(2);
  KVCache cache(/*block_tokens=*/64);
  // 200 keys over 4 blocks, 2 kv heads, 4 query heads; decode (L 1) and prefill (L 5).
  const KVHistory history = cache.Update(Values({1, 2, 200, 32}, 100, DType::kF16),
                                         Values({1, 2, 200, 32}, 101, DType::kF16));
  std::vector<Tensor> queries;
  std::vector<std::vector<float>> serial;
  for (int c = 0; c < kCallers; ++c) {
    queries.push_back(Values({1, 4, c == 0 ? 5 : 1, 32}, c));
    serial.push_back(
        Attention(queries.back(), history, AttentionMask::Causal(), 0.125f, ctx).ToVector());
  }
  std::vector<int> mismatches(kCallers, 0);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      const auto i = static_cast<std::size_t>(c);
      for (int round = 0; round < kRounds; ++round) {
        const Tensor out = Attention(queries[i], history, AttentionMask::Causal(), 0.125f, ctx);
        if (out.ToVector() != serial[i]) ++mismatches[i];
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) EXPECT_EQ(mismatches[static_cast<std::size_t>(c)], 0) << c;
}

}  // namespace
}  // namespace ringkv
