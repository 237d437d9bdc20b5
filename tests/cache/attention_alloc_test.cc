// Attention into a caller's output allocates nothing once the context's arena
// has grown: counted with the replaced operator new of ringkv_alloc_tracker, on
// every thread (the pool's workers included).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "alloc_tracker.h"
#include "ringkv/attention.h"
#include "ringkv/kv_cache.h"

namespace ringkv {
namespace {

constexpr std::int64_t kHq = 8, kHkv = 2, kD = 32, kDv = 32;

Tensor Random(std::mt19937& rng, const Shape& shape, DType dtype) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(static_cast<std::size_t>(shape.NumElements()));
  for (float& x : values) x = dist(rng);
  return Tensor::FromVector(values, shape, dtype);
}

struct Case {
  int threads;
  std::int64_t keys;     // in the cache, over several blocks of 256
  std::int64_t queries;  // L
};

class AttentionAllocTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionAllocTest, ASteadyStateCallIntoACallersOutAllocatesNothing) {
  const Case c = GetParam();
  std::mt19937 rng(3);
  KVCache cache;  // 256-token blocks
  cache.Update(Random(rng, {1, kHkv, c.keys - c.queries, kD}, DType::kF16),
               Random(rng, {1, kHkv, c.keys - c.queries, kDv}, DType::kF16));
  const KVHistory history = cache.Update(Random(rng, {1, kHkv, c.queries, kD}, DType::kF16),
                                         Random(rng, {1, kHkv, c.queries, kDv}, DType::kF16));
  const Tensor q = Random(rng, {1, kHq, c.queries, kD}, DType::kF32);
  Tensor out = Tensor::Zeros(DType::kF32, {1, kHq, c.queries, kDv});
  Context ctx(c.threads);
  const AttentionMask causal = AttentionMask::Causal();

  const std::size_t cold = test::AllocationCount();
  Attention(q, history, causal, 0.125f, ctx, out);  // grows the arena
  EXPECT_GT(test::AllocationCount(), cold);         // the tracker sees the library's allocations
  const std::vector<float> first = out.ToVector();
  const std::size_t before = test::AllocationCount();
  Attention(q, history, causal, 0.125f, ctx, out);
  const std::size_t allocations = test::AllocationCount() - before;
  EXPECT_EQ(allocations, 0u);
  EXPECT_EQ(out.ToVector(), first);
}

// Decode and prefill, one and two threads; 1100 keys on two threads split the
// key axis into chunks (the flash-decoding partial states live in the arena too).
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionAllocTest,
                         ::testing::Values(Case{1, 600, 1}, Case{2, 1100, 1}, Case{1, 600, 7},
                                           Case{2, 600, 7}),
                         [](const ::testing::TestParamInfo<Case>& param_info) {
                           return "threads" + std::to_string(param_info.param.threads) + "_keys" +
                                  std::to_string(param_info.param.keys) + "_queries" +
                                  std::to_string(param_info.param.queries);
                         });

}  // namespace
}  // namespace ringkv
