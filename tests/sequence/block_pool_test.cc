// Where a BlockPool's blocks live: blocks smaller than a huge page are carved in
// order out of shared chunks of at least Storage::kHugePageBytes (so that the
// Storage rule gives them huge pages), larger blocks are a chunk each,
// and the last chunk holds only the blocks the capacity leaves. Hand-worked
// offsets for a 768 KiB block (three to a chunk) and a 2.25 MiB one.
#include "block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ringkv::detail {
namespace {

constexpr std::size_t kKiB = 1024;

std::uintptr_t Address(const std::byte* p) { return reinterpret_cast<std::uintptr_t>(p); }

// f16, Hkv 6, D 128, 256 tokens: K and V 384 KiB each, a layer 768 KiB.
PoolLayout Layout(int layers) {
  PoolLayout l;
  l.key_dtype = DType::kF16;
  l.value_dtype = DType::kF16;
  l.layers = layers;
  l.heads = 6;
  l.key_dim = 128;
  l.value_dim = 128;
  l.block_tokens = 256;
  return l;
}

// Takes every block (in the pool's order: 0, 1, ...) and fills each with its
// index, so that overlapping blocks or a chunk shorter than its blocks show.
std::vector<BlockId> TakeAndFill(BlockPool& pool) {
  std::vector<BlockId> taken;
  while (pool.Free() > 0) {
    const BlockId b = pool.Take();
    std::fill_n(pool.Data(b), pool.Layout().BlockBytes(), static_cast<std::byte>(b));
    taken.push_back(b);
  }
  return taken;
}

void ExpectFilled(const BlockPool& pool, const std::vector<BlockId>& blocks) {
  for (const BlockId b : blocks) {
    const std::byte* data = pool.Data(b);
    const std::size_t bytes = pool.Layout().BlockBytes();
    EXPECT_TRUE(std::all_of(data, data + bytes, [&](std::byte x) { return x == std::byte(b); }))
        << "block " << b;
  }
}

TEST(BlockPoolTest, BlocksBelowAHugePageShareChunksThatStartOnHugePages) {
  BlockPool pool(Layout(1), 7);
  ASSERT_EQ(pool.Layout().BlockBytes(), 768 * kKiB);
  EXPECT_EQ(pool.BlocksPerChunk(), 3);  // 2.25 MiB: the fewest blocks that fill 2 MiB
  const std::vector<BlockId> taken = TakeAndFill(pool);
  ASSERT_EQ(taken, (std::vector<BlockId>{0, 1, 2, 3, 4, 5, 6}));
  ExpectFilled(pool, taken);
  // Chunks {0, 1, 2} and {3, 4, 5}: large storage (page-aligned), blocks back to back.
  for (const BlockId first : {0, 3}) {
    EXPECT_EQ(Address(pool.Data(first)) % 4096, 0u) << first;
    EXPECT_EQ(pool.Data(first + 1), pool.Data(first) + 768 * kKiB) << first;
    EXPECT_EQ(pool.Data(first + 2), pool.Data(first) + 1536 * kKiB) << first;
  }
  // Block 6 is alone in the last chunk (768 KiB), in storage of its own.
  EXPECT_NE(pool.Data(6), pool.Data(5) + 768 * kKiB);
}

TEST(BlockPoolTest, BlocksOfAHugePageOrMoreAreAChunkEach) {
  BlockPool pool(Layout(3), 3);
  ASSERT_EQ(pool.Layout().BlockBytes(), 2304 * kKiB);
  EXPECT_EQ(pool.BlocksPerChunk(), 1);
  const std::vector<BlockId> taken = TakeAndFill(pool);
  ExpectFilled(pool, taken);
  for (const BlockId b : taken) EXPECT_EQ(Address(pool.Data(b)) % 4096, 0u) << b;
}

TEST(BlockPoolTest, TinyBlocksFillOneChunkOfTheWholeCapacity) {
  PoolLayout l;
  l.key_dtype = DType::kF32;
  l.value_dtype = DType::kF32;
  l.heads = 1;
  l.key_dim = 2;
  l.value_dim = 2;
  l.block_tokens = 8;  // 128 B a block
  BlockPool pool(l, 10);
  EXPECT_EQ(pool.BlocksPerChunk(), 16384);
  const std::vector<BlockId> taken = TakeAndFill(pool);
  ExpectFilled(pool, taken);
  for (const BlockId b : taken) EXPECT_EQ(pool.Data(b), pool.Data(0) + 128 * b) << b;
  // A released block comes back with its memory where it was.
  const std::byte* data = pool.Data(4);
  pool.Retain(4);
  pool.Release(4);
  EXPECT_EQ(pool.Take(), 4);
  EXPECT_EQ(pool.Data(4), data);
}

}  // namespace
}  // namespace ringkv::detail
