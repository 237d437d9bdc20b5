// Heap use of CausalCache, counted with the replaced operator new of
// tests/support/alloc_tracker.cc (linked into this binary only): CopyPrefix of
// a 32k-token prefix shares blocks and allocates no K/V bytes, and a warm
// decode step (StartForward, Update, Attention into a caller's out) allocates
// nothing at all.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <vector>

#include "alloc_tracker.h"
#include "ringkv/batch_attention.h"
#include "ringkv/causal_cache.h"
#include "ringkv/context.h"

namespace ringkv {
namespace {

TEST(CausalAllocTest, CopyPrefixOf32kTokensAllocatesNoKvBytes) {
  constexpr Position kPrefix = 32 * 1024;
  constexpr std::int64_t kChunk = 512;
  CausalCacheOptions o;
  o.layers = 1;
  o.kv_heads = 4;
  o.key_dim = 64;
  o.value_dim = 64;
  o.dtype = DType::kF16;
  o.block_tokens = 64;  // 64 KiB blocks: far above any metadata CopyPrefix makes
  o.capacity_tokens = kPrefix + 1024;
  o.max_sequences = 2;
  o.max_batch = kChunk;
  CausalCache cache(o);
  const Tensor keys = Tensor::Zeros(DType::kF16, {1, 4, kChunk, 64});
  const Tensor values = Tensor::Zeros(DType::kF16, {1, 4, kChunk, 64});
  std::vector<Position> positions(static_cast<std::size_t>(kChunk));
  const std::vector<SequenceId> sequences(static_cast<std::size_t>(kChunk), 0);
  for (Position first = 0; first < kPrefix; first += static_cast<Position>(kChunk)) {
    for (std::size_t i = 0; i < positions.size(); ++i) {
      positions[i] = first + static_cast<Position>(i);
    }
    cache.StartForward({positions, sequences});
    cache.Update(0, keys, values);
  }
  const std::int64_t used = cache.UsedBlocks();
  ASSERT_EQ(used, kPrefix / 64);

  const std::size_t live = test::ResetPeakAllocatedBytes();
  cache.CopyPrefix(0, 1, kPrefix);
  const std::size_t peak = test::PeakAllocatedBytes() - live;
  EXPECT_EQ(cache.UsedBlocks(), used);
  EXPECT_EQ(cache.SequencePositions(1).size(), static_cast<std::size_t>(kPrefix));
  // The destination's extent list (512 extents of 16 bytes) and a scratch copy: no block.
  EXPECT_LT(peak, cache.BytesPerBlock() / 2) << peak;
  std::printf("CopyPrefix of %d tokens: %zu bytes at peak (a block is %zu)\n", kPrefix, peak,
              cache.BytesPerBlock());
}

TEST(CausalAllocTest, WarmDecodeStepsAllocateNothing) {
  constexpr int kSequences = 8;
  CausalCacheOptions o;
  o.layers = 2;
  o.kv_heads = 2;
  o.key_dim = 16;
  o.value_dim = 16;
  o.dtype = DType::kF16;
  o.block_tokens = 16;
  o.window = 32;
  o.max_sequences = kSequences;
  o.max_batch = 64;
  o.capacity_tokens = 2048;
  CausalCache cache(o);
  Context ctx(1);
  const Tensor keys = Tensor::Zeros(DType::kF32, {1, 2, kSequences, 16});
  const Tensor values = Tensor::Zeros(DType::kF32, {1, 2, kSequences, 16});
  const Tensor q = Tensor::Zeros(DType::kF32, {1, 4, kSequences, 16});
  Tensor out = Tensor::Zeros(DType::kF32, {1, 4, kSequences, 16});
  std::vector<Position> positions(kSequences);
  std::vector<SequenceId> sequences(kSequences);
  for (int s = 0; s < kSequences; ++s) sequences[static_cast<std::size_t>(s)] = s;
  const auto step = [&](Position p) {
    for (int s = 0; s < kSequences; ++s) positions[static_cast<std::size_t>(s)] = p + 5 * s;
    cache.StartForward({positions, sequences});
    for (int layer = 0; layer < 2; ++layer) {
      const BatchHistory h = cache.Update(layer, keys, values);
      Attention(q, h, 0.25f, ctx, out);
    }
  };
  // Warm up past the window so retention and block recycling are in steady state.
  Position p = 0;
  for (; p < 200; ++p) step(p);
  const std::size_t before = test::AllocationCount();
  for (; p < 400; ++p) step(p);
  EXPECT_EQ(test::AllocationCount() - before, 0u);
}

}  // namespace
}  // namespace ringkv
