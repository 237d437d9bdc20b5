// BlockStore: paging, copy-on-write sharing and the phase-aligned append.
#include "block_store.h"

#include <gtest/gtest.h>

#include "cache_test_util.h"
#include "kv_access.h"

namespace ringkv::detail {
namespace {

using test::Range;
using test::Tokens;

KvLayout DefaultLayout() { return KvLayout{DType::kF32, DType::kF32, 2, 8, 4}; }

std::vector<int> Slots(const BlockStore& store, std::int64_t begin, std::int64_t end) {
  KvView view;
  detail::AddRange(view, &store, begin, end);
  return test::Positions(view);
}

BlockStore Filled(int count, std::int64_t block_tokens) {
  BlockStore store(block_tokens);
  store.SetLayout(DefaultLayout());
  for (int p = 0; p < count; ++p) {
    const auto [k, v] = Tokens(p, 1);
    store.Append(k, v);
  }
  return store;
}

TEST(BlockStore, AppendCrossesBlocksOneBlockAtATime) {
  BlockStore store(4);
  store.SetLayout(DefaultLayout());
  for (int p = 0; p < 9; ++p) {
    const auto [k, v] = Tokens(p, 1);
    store.Append(k, v);
    // ceil((p + 1) / 4) blocks: a new block every 4 tokens, never a copy.
    EXPECT_EQ(store.BlockCount(), static_cast<std::size_t>((p + 4) / 4));
  }
  EXPECT_EQ(Slots(store, 0, 9), Range(0, 9));
  EXPECT_EQ(store.AllocatedBytes(), 3u * 4u * (2u * (8u + 4u) * 4u));
}

TEST(BlockStore, PrefillSpanningSeveralBlocks) {
  BlockStore store(4);
  store.SetLayout(DefaultLayout());
  const auto [k, v] = Tokens(0, 3);
  store.Append(k, v);
  const auto [k2, v2] = Tokens(3, 7);
  store.Append(k2, v2);
  EXPECT_EQ(store.Length(), 10);
  EXPECT_EQ(store.BlockCount(), 3u);
  EXPECT_EQ(Slots(store, 0, 10), Range(0, 10));
  // Segments are split at block boundaries.
  KvView view;
  detail::AddRange(view, &store, 1, 10);
  const auto segments = view.KeySegments();
  ASSERT_EQ(segments.size(), 3u);
  EXPECT_EQ(segments[0].Dim(2), 3);
  EXPECT_EQ(segments[1].Dim(2), 4);
  EXPECT_EQ(segments[2].Dim(2), 2);
}

TEST(BlockStore, ShareIsCopyOnWrite) {
  BlockStore store = Filled(6, 4);
  const BlockStore shared = store.Share(0, 6);
  EXPECT_TRUE(store.SameBlock(0, shared, 0));
  EXPECT_TRUE(store.SameBlock(1, shared, 1));
  // Overwrite slot 1 with position 100: only block 0 is cloned.
  const auto [k, v] = Tokens(100, 1);
  store.Write(1, k, v);
  EXPECT_FALSE(store.SameBlock(0, shared, 0));
  EXPECT_TRUE(store.SameBlock(1, shared, 1));
  EXPECT_EQ(Slots(shared, 0, 6), Range(0, 6));
  EXPECT_EQ(Slots(store, 0, 6), (std::vector<int>{0, 100, 2, 3, 4, 5}));
}

TEST(BlockStore, WriteToUnsharedBlockIsInPlace) {
  BlockStore store = Filled(3, 4);
  KvView view;
  detail::AddRange(view, &store, 0, 3);
  const Tensor before = view.KeySegments()[0];
  const auto [k, v] = Tokens(50, 1);
  store.Write(2, k, v);
  // The old view shares the storage: the write is visible through it.
  EXPECT_EQ(before.Slice(2, 2, 3).ToVector()[0], test::KeyValue(50, 0, 0));
}

TEST(BlockStore, ShrinkReleasesBlocksAndGrowKeepsTheLiveRows) {
  BlockStore store = Filled(10, 4);
  store.Resize(5);
  EXPECT_EQ(store.BlockCount(), 2u);
  EXPECT_EQ(Slots(store, 0, 5), Range(0, 5));
  store.Resize(9);  // grows into a third block; grown slots are unspecified until written
  EXPECT_EQ(store.BlockCount(), 3u);
  EXPECT_EQ(Slots(store, 0, 5), Range(0, 5));
  store.Resize(0);
  EXPECT_EQ(store.BlockCount(), 0u);
  EXPECT_TRUE(store.HasLayout());
}

TEST(BlockStore, DropFrontMovesTheHead) {
  BlockStore store = Filled(10, 4);
  store.DropFront(5);
  EXPECT_EQ(store.Length(), 5);
  EXPECT_EQ(store.BlockCount(), 2u);  // rows 5..9 live in blocks 1 and 2
  EXPECT_EQ(Slots(store, 0, 5), Range(5, 10));
  const auto [k, v] = Tokens(10, 3);
  store.Append(k, v);
  EXPECT_EQ(Slots(store, 0, 8), Range(5, 13));
}

TEST(BlockStore, AlignedAppendSharesWholeBlocks) {
  const BlockStore source = Filled(12, 4);
  BlockStore store = source.Share(0, 3);
  store.AppendFrom(source, 3, 12);
  EXPECT_EQ(Slots(store, 0, 12), Range(0, 12));
  EXPECT_TRUE(store.SameBlock(0, source, 0));  // boundary block: same object, no copy needed
  EXPECT_TRUE(store.SameBlock(1, source, 1));
  EXPECT_TRUE(store.SameBlock(2, source, 2));
}

TEST(BlockStore, BoundaryBlockOfDifferentOriginIsCopiedOnce) {
  const BlockStore a = Filled(6, 4);
  BlockStore b = Filled(12, 4);
  BlockStore merged = a.Share(0, 5);
  merged.AppendFrom(b, 5, 12);
  EXPECT_EQ(Slots(merged, 0, 12), Range(0, 12));
  EXPECT_FALSE(merged.SameBlock(1, a, 1));  // cloned before the copy of rows 5..7
  EXPECT_TRUE(merged.SameBlock(2, b, 2));
  EXPECT_EQ(Slots(a, 0, 6), Range(0, 6));  // the source is untouched
}

TEST(BlockStore, MisalignedAppendCopies) {
  const BlockStore source = Filled(9, 4);
  BlockStore store = Filled(2, 4);
  store.AppendFrom(source, 5, 9);  // phase 2 vs 1
  EXPECT_EQ(Slots(store, 0, 6), (std::vector<int>{0, 1, 5, 6, 7, 8}));
  EXPECT_FALSE(store.SameBlock(1, source, 2));
}

TEST(BlockStore, EmptyStoreAdoptsThePhase) {
  const BlockStore source = Filled(9, 4);
  BlockStore store(4);
  store.AppendFrom(source, 6, 9);
  EXPECT_EQ(Slots(store, 0, 3), Range(6, 9));
  EXPECT_TRUE(store.SameBlock(0, source, 1));
}

// Where a block's bytes are: the store carves blocks out of chunks that hold as
// many blocks as it already has (1, 1, 2, 4, ...), up to a huge page's worth.
std::uintptr_t Address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(BlockStore, BlocksAreCarvedFromChunksThatGrowWithTheStore) {
  BlockStore store(4);
  store.SetLayout(DefaultLayout());
  store.Resize(8 * 4);
  ASSERT_EQ(store.BlockCount(), 8u);
  constexpr std::uintptr_t kBlock = 4 * 2 * (8 + 4) * 4;  // 384 B: K then V
  constexpr std::uintptr_t kKeys = 4 * 2 * 8 * 4;
  for (std::size_t b = 0; b < 8; ++b) {
    EXPECT_EQ(Address(store.ValueData(b)), Address(store.KeyData(b)) + kKeys) << b;
  }
  // Chunks {0}, {1}, {2, 3}, {4, 5, 6, 7}.
  EXPECT_EQ(Address(store.KeyData(3)), Address(store.KeyData(2)) + kBlock);
  for (std::size_t b = 5; b < 8; ++b) {
    EXPECT_EQ(Address(store.KeyData(b)), Address(store.KeyData(4)) + (b - 4) * kBlock) << b;
  }
  EXPECT_EQ(Slots(Filled(40, 4), 0, 40), Range(0, 40));  // rows written through the chunks
}

TEST(BlockStore, ACopyGetsNoRoomInTheChunkItCameFrom) {
  BlockStore store(4);
  store.SetLayout(DefaultLayout());
  store.Resize(3 * 4);  // blocks 0, 1, 2; the chunk of 2 and 3 has room for block 3
  BlockStore copy = store;
  copy.Resize(4 * 4);
  store.Resize(4 * 4);
  EXPECT_EQ(Address(store.KeyData(3)), Address(store.KeyData(2)) + 4 * 2 * (8 + 4) * 4);
  EXPECT_FALSE(store.SameBlock(3, copy, 3));
  EXPECT_NE(store.KeyData(3), copy.KeyData(3));
}

TEST(BlockStore, ChunksGrowToAHugePage) {
  // f16, Hkv 8, D 128, 256 tokens: 1 MiB blocks, two to a huge page.
  BlockStore store(256);
  store.SetLayout(KvLayout{DType::kF16, DType::kF16, 8, 128, 128});
  store.Resize(6 * 256);
  constexpr std::uintptr_t kMiB = std::uintptr_t{1} << 20;
  // Chunks {0}, {1}, {2, 3}, {4, 5}: the last two are 2 MiB, large storage (page-aligned).
  for (const std::size_t first : {std::size_t{2}, std::size_t{4}}) {
    EXPECT_EQ(Address(store.KeyData(first)) % 4096, 0u) << first;
    EXPECT_EQ(Address(store.KeyData(first + 1)), Address(store.KeyData(first)) + kMiB) << first;
  }
}

}  // namespace
}  // namespace ringkv::detail
