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

}  // namespace
}  // namespace ringkv::detail
