// A decode-step Update from borrowed, permuted f32 buffers into a cache with a
// half-precision storage dtype allocates nothing: the conversion happens in the
// copy into the block, with no temporary tensor. Counted with the replaced
// operator new of tests/support/alloc_tracker.cc, linked into this binary only.

#include <gtest/gtest.h>

#include <cstddef>
#include <random>
#include <vector>

#include "alloc_tracker.h"
#include "model_buffers.h"
#include "ringkv/kv_cache.h"
#include "ringkv/rotating_kv_cache.h"

namespace ringkv {
namespace {

using test::AllocationCount;
using test::Projection;
using test::RandomProjection;

constexpr std::int64_t kHeads = 2;
constexpr std::int64_t kKDim = 8;
constexpr std::int64_t kVDim = 4;

struct Step {
  Projection k, v;
  Tensor keys, values;  // the views, made before counting (a Borrow allocates its handle)
};

std::vector<Step> DecodeSteps(int count) {
  std::mt19937 rng(7);
  std::vector<Step> steps(static_cast<std::size_t>(count));
  for (Step& s : steps) {
    s.k = RandomProjection(rng, 1, kHeads, kKDim);
    s.v = RandomProjection(rng, 1, kHeads, kVDim);
    s.keys = s.k.View();
    s.values = s.v.View();
  }
  return steps;
}

// Allocations made by cache.Update(keys, values), the history included.
template <class Cache>
std::size_t AllocationsOfUpdate(Cache& cache, const Tensor& keys, const Tensor& values) {
  const std::size_t before = AllocationCount();
  { const KVHistory history = cache.Update(keys, values); }
  return AllocationCount() - before;
}

class ZeroCopyAllocTest : public testing::TestWithParam<DType> {};

TEST_P(ZeroCopyAllocTest, KVCacheDecodeStepAllocatesNothing) {
  KVCache cache(16, GetParam());
  std::mt19937 rng(3);
  const Projection k = RandomProjection(rng, 3, kHeads, kKDim);
  const Projection v = RandomProjection(rng, 3, kHeads, kVDim);
  cache.Update(k.View(), v.View());  // opens the first block
  // Four tokens at once: a strided [1, H, 4, D] view (L > 1 is not contiguous).
  const Projection k4 = RandomProjection(rng, 4, kHeads, kKDim);
  const Projection v4 = RandomProjection(rng, 4, kHeads, kVDim);
  const Tensor keys4 = k4.View(), values4 = v4.View();
  ASSERT_FALSE(keys4.IsContiguous());
  EXPECT_EQ(AllocationsOfUpdate(cache, keys4, values4), 0u);  // slots 3 .. 6
  const std::vector<Step> steps = DecodeSteps(10);
  for (std::size_t i = 0; i < 9; ++i) {  // slots 7 .. 15: still in the first block
    EXPECT_EQ(AllocationsOfUpdate(cache, steps[i].keys, steps[i].values), 0u) << "step " << i;
  }
  // The counter sees allocations: opening the next block makes some, and so
  // does the old path's AsType.
  EXPECT_GT(AllocationsOfUpdate(cache, steps[9].keys, steps[9].values), 0u);
  const std::size_t before = AllocationCount();
  const Tensor converted = steps[0].keys.AsType(GetParam());
  EXPECT_GT(AllocationCount() - before, 0u);
}

TEST_P(ZeroCopyAllocTest, RotatingKVCacheDecodeStepsAllocateNothingThroughTheWrap) {
  RotatingKVCache cache(6, 16, GetParam());
  std::mt19937 rng(5);
  const Projection k = RandomProjection(rng, 3, kHeads, kKDim);
  const Projection v = RandomProjection(rng, 3, kHeads, kVDim);
  cache.Update(k.View(), v.View());
  const std::vector<Step> steps = DecodeSteps(10);
  for (std::size_t i = 0; i < steps.size(); ++i) {  // offsets 3 .. 12: wraps at 6 and 12
    EXPECT_EQ(AllocationsOfUpdate(cache, steps[i].keys, steps[i].values), 0u) << "step " << i;
  }
  EXPECT_EQ(cache.Offset(), 13);
  EXPECT_EQ(cache.RingIndex(), 1);
}

INSTANTIATE_TEST_SUITE_P(HalfStorage, ZeroCopyAllocTest, testing::Values(DType::kF16, DType::kBF16),
                         [](const testing::TestParamInfo<DType>& param) {
                           return std::string(DTypeName(param.param));
                         });

}  // namespace
}  // namespace ringkv
