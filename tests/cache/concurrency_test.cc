// Several threads decode at once, each on its own fork of one prefilled cache
// (the forks share blocks copy-on-write) with its own Context, all Contexts on
// one shared executor: the results equal a run of the same work on one thread.
// CI runs this under ThreadSanitizer (tools/test.sh --tsan).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "ringkv/attention.h"
#include "ringkv/kernels/thread_pool.h"
#include "ringkv/kv_cache.h"

namespace ringkv {
namespace {

constexpr std::int64_t kHq = 4, kHkv = 2, kD = 16, kDv = 16;
constexpr int kThreads = 4, kSteps = 12;

Tensor Random(std::mt19937& rng, const Shape& shape) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(static_cast<std::size_t>(shape.NumElements()));
  for (float& x : values) x = dist(rng);
  return Tensor::FromVector(values, shape, DType::kF16);
}

// One sequence's decode: kSteps tokens drawn from `seed`, each appended to
// `cache` and attended to; returns every step's output bits.
std::vector<std::uint32_t> Decode(KVCache& cache, unsigned seed, Context& ctx) {
  std::mt19937 rng(seed);
  std::vector<std::uint32_t> bits;
  Tensor out = Tensor::Zeros(DType::kF32, {1, kHq, 1, kDv});
  for (int step = 0; step < kSteps; ++step) {
    const Tensor k = Random(rng, {1, kHkv, 1, kD});
    const Tensor v = Random(rng, {1, kHkv, 1, kDv});
    const Tensor q = Random(rng, {1, kHq, 1, kD}).AsType(DType::kF32);
    const KVHistory history = cache.Update(k, v);
    Attention(q, history, AttentionMask::Causal(), 0.25f, ctx, out);
    const std::vector<float> values = out.ToVector();
    const std::size_t at = bits.size();
    bits.resize(at + values.size());
    std::memcpy(bits.data() + at, values.data(), values.size() * sizeof(float));
  }
  return bits;
}

KVCache Prefilled() {
  std::mt19937 rng(11);
  KVCache cache(/*block_tokens=*/8);  // 21 tokens: the last block is shared and partial
  cache.Update(Random(rng, {1, kHkv, 21, kD}), Random(rng, {1, kHkv, 21, kDv}));
  return cache;
}

TEST(ConcurrencyTest, ForksDecodingOnSeveralThreadsMatchOneThread) {
  kernels::ThreadPool pool(2);  // shared by every Context below

  std::vector<std::vector<std::uint32_t>> expected(kThreads);
  {
    const KVCache common = Prefilled();
    Context ctx(pool);
    for (int t = 0; t < kThreads; ++t) {
      KVCache fork = common.Fork();
      expected[static_cast<std::size_t>(t)] = Decode(fork, 100u + static_cast<unsigned>(t), ctx);
    }
  }

  // The common cache lives while the threads fork it and write into their forks.
  const KVCache common = Prefilled();
  std::vector<std::vector<std::uint32_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      KVCache fork = common.Fork();
      Context ctx(pool);
      got[static_cast<std::size_t>(t)] = Decode(fork, 100u + static_cast<unsigned>(t), ctx);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(got, expected);
}

TEST(ConcurrencyTest, ForksOutlivingTheirOriginDecodeOnSeveralThreads) {
  kernels::ThreadPool pool(2);
  std::vector<std::vector<std::uint32_t>> expected(kThreads);
  {
    const KVCache common = Prefilled();
    Context ctx(1);
    for (int t = 0; t < kThreads; ++t) {
      KVCache fork = common.Fork();
      expected[static_cast<std::size_t>(t)] = Decode(fork, 200u + static_cast<unsigned>(t), ctx);
    }
  }
  // The origin is gone: the forks alone share its blocks, and each one's first
  // write clones the shared last block while the others may still read it.
  std::vector<std::unique_ptr<KVCache>> forks;
  {
    const KVCache common = Prefilled();
    for (int t = 0; t < kThreads; ++t) forks.push_back(std::make_unique<KVCache>(common.Fork()));
  }
  std::vector<std::vector<std::uint32_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Context ctx(pool);
      got[static_cast<std::size_t>(t)] =
          Decode(*forks[static_cast<std::size_t>(t)], 200u + static_cast<unsigned>(t), ctx);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(got, expected);
}

}  // namespace
}  // namespace ringkv
