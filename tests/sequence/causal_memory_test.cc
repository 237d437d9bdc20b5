// Memory bounds of CausalCache: with a sliding window the pool's used blocks
// stay bounded however long the sequences run.
#include <gtest/gtest.h>

#include <vector>

#include "ringkv/causal_cache.h"
#include "sequence/sequence_test_util.h"

namespace ringkv {
namespace {

TEST(CausalMemoryTest, SlidingWindowBoundsUsedBlocksOver100kDecodeSteps) {
  constexpr int kSequences = 8;
  constexpr Position kSteps = 100'000;
  CausalCacheOptions o;
  o.layers = 1;
  o.kv_heads = 1;
  o.key_dim = 2;
  o.value_dim = 2;
  o.dtype = DType::kF32;
  o.block_tokens = 8;
  o.window = 16;  // memory: 17 with several sequences
  o.max_sequences = kSequences;
  o.max_batch = kSequences;
  o.capacity_tokens = 1024;
  CausalCache cache(o);
  ASSERT_EQ(cache.Options().memory, 17);
  // Each sequence holds at most memory + 1 = 18 tokens: 3 blocks of 8, plus one
  // block whose last rows retention has not released yet.
  const std::int64_t bound = kSequences * 4;

  std::vector<Position> positions(kSequences);
  std::vector<SequenceId> sequences(kSequences);
  for (int s = 0; s < kSequences; ++s) sequences[static_cast<std::size_t>(s)] = s;
  Tensor keys = Tensor::Zeros(DType::kF32, {1, 1, kSequences, 2});
  Tensor values = Tensor::Zeros(DType::kF32, {1, 1, kSequences, 2});
  std::int64_t peak = 0;
  for (Position step = 0; step < kSteps; ++step) {
    // The sequences start at different offsets, so their blocks fill out of phase.
    for (int s = 0; s < kSequences; ++s) positions[static_cast<std::size_t>(s)] = step + 3 * s;
    // Blocks are assigned (and released) by StartForward; Update only copies
    // into them, so the last step alone stores K/V (the test stays fast under
    // the sanitizers).
    cache.StartForward({positions, sequences});
    peak = std::max(peak, cache.UsedBlocks());
  }
  EXPECT_LE(peak, bound);
  for (int s = 0; s < kSequences; ++s) {
    const Position last = kSteps - 1 + 3 * s;
    EXPECT_EQ(cache.SequencePositions(s), test::Iota(last - 17, last + 1)) << s;
    EXPECT_TRUE(cache.CanResume(s, last + 1));
  }
  const BatchHistory h = cache.Update(0, keys, values);
  for (std::int64_t r = 0; r < kSequences; ++r) EXPECT_EQ(h.VisibleKeys(r).Dim(2), 17);
}

}  // namespace
}  // namespace ringkv
