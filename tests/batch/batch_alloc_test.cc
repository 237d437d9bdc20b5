// Batched attention into a caller's output allocates nothing once the context's
// arena has grown: counted with the replaced operator new of ringkv_alloc_tracker
// on every thread (the pool's workers included).
#include <gtest/gtest.h>

#include <array>
#include <random>
#include <vector>

#include "alloc_tracker.h"
#include "batch/hand_plan.h"
#include "ringkv/batch_attention.h"

namespace ringkv {
namespace {

constexpr std::int64_t kHq = 4;

class BatchAllocTest : public ::testing::TestWithParam<int> {};

TEST_P(BatchAllocTest, ASteadyStateHistoryCallAllocatesNothing) {
  const test::HandPlan plan(DType::kF16, 8);
  const BatchHistory history = plan.History(1);
  std::mt19937 rng(3);
  Context ctx(GetParam());
  // f32 q read in place, and bf16 q converted into the arena.
  for (const DType q_dtype : {DType::kF32, DType::kBF16}) {
    const Tensor q =
        test::RandomTensor(rng, {1, kHq, test::HandPlan::kRows, test::HandPlan::kD}, q_dtype);
    Tensor out = Tensor::Zeros(DType::kF32, {1, kHq, test::HandPlan::kRows, test::HandPlan::kDv});
    Attention(q, history, 0.25f, ctx, out);  // grows the arena
    const std::vector<float> first = out.ToVector();
    const std::size_t before = test::AllocationCount();
    Attention(q, history, 0.25f, ctx, out);
    EXPECT_EQ(test::AllocationCount() - before, 0u);
    EXPECT_EQ(out.ToVector(), first);
  }
}

TEST_P(BatchAllocTest, ASteadyStatePaddedCallAllocatesNothing) {
  constexpr std::int64_t kB = 3, kL = 5, kT = 300, kHkv = 2, kD = 16, kDv = 8;
  std::mt19937 rng(4);
  Context ctx(GetParam());
  const Tensor q = test::RandomTensor(rng, {kB, kHq, kL, kD});  // gathered into the arena
  const Tensor k = test::RandomTensor(rng, {kB, kHkv, kT, kD}, DType::kF16);
  const Tensor v = test::RandomTensor(rng, {kB, kHkv, kT, kDv}, DType::kF16);
  const std::array<std::int64_t, kB> q_len{5, 1, 0}, k_len{300, 17, 40};
  const PaddedBatch batch{q_len, k_len, {}, true, 64};
  Tensor out = Tensor::Zeros(DType::kF32, {kB, kHq, kL, kDv});  // staged in the arena
  ScaledDotProductAttention(q, k, v, batch, 0.25f, ctx, out);
  const std::vector<float> first = out.ToVector();
  const std::size_t before = test::AllocationCount();
  ScaledDotProductAttention(q, k, v, batch, 0.25f, ctx, out);
  EXPECT_EQ(test::AllocationCount() - before, 0u);
  EXPECT_EQ(out.ToVector(), first);
}

INSTANTIATE_TEST_SUITE_P(Threads, BatchAllocTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return "threads" + std::to_string(param_info.param);
                         });

}  // namespace
}  // namespace ringkv
