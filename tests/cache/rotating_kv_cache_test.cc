// RotatingKVCache: ring layouts worked by hand from the reference's rules.
#include "ringkv/rotating_kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "cache_test_util.h"
#include "kv_access.h"
#include "ringkv/error.h"

namespace ringkv {
namespace {

using test::Positions;
using test::Range;
using test::Tokens;

KVHistory Decode(RotatingKVCache& cache, int first, int count) {
  KVHistory last;
  for (int p = first; p < first + count; ++p) {
    const auto [k, v] = Tokens(p, 1);
    last = cache.Update(k, v);
  }
  return last;
}

KVHistory Prefill(RotatingKVCache& cache, int first, int count) {
  const auto [k, v] = Tokens(first, count);
  return cache.Update(k, v);
}

TEST(RotatingKVCache, SixDecodesIntoFourSlots) {
  RotatingKVCache cache(4, 2);
  const KVHistory history = Decode(cache, 0, 6);
  EXPECT_EQ(Positions(cache.State()), (std::vector<int>{4, 5, 2, 3}));
  EXPECT_EQ(cache.RingIndex(), 2);
  EXPECT_EQ(cache.Offset(), 6);
  EXPECT_EQ(cache.BufferLength(), 4);
  // The history is the ring in storage order with its cursor for the mask applier.
  EXPECT_EQ(Positions(history.Kv()), (std::vector<int>{4, 5, 2, 3}));
  EXPECT_EQ(detail::KvAccess::Applier(history).kind, detail::MaskApplier::Kind::kRotating);
  EXPECT_EQ(detail::KvAccess::Applier(history).query_len, 1);
  EXPECT_EQ(detail::KvAccess::Applier(history).key_len, 4);
  EXPECT_EQ(detail::KvAccess::Applier(history).ring_idx, 2);
  EXPECT_EQ(detail::KvAccess::Applier(history).window, 4);
  // View: the last max_size - 1 tokens, oldest first.
  EXPECT_EQ(Positions(cache.View().Kv()), (std::vector<int>{3, 4, 5}));
}

TEST(RotatingKVCache, DecodeBeforeWrapIsInOrder) {
  RotatingKVCache cache(8, 4);
  const KVHistory history = Decode(cache, 0, 5);
  EXPECT_EQ(Positions(history.Kv()), Range(0, 5));
  EXPECT_EQ(cache.BufferLength(), 8);  // grew by min(256, max_size - 0)
  EXPECT_EQ(Positions(cache.State()), Range(0, 5));
  EXPECT_EQ(Positions(cache.View().Kv()), Range(0, 5));
  EXPECT_EQ(cache.RingIndex(), 5);
}

TEST(RotatingKVCache, GrowsInStepsOf256BelowMaxSize) {
  RotatingKVCache cache(300);
  const test::Dims small{1, 1, 1, DType::kF32};
  for (int p = 0; p < 256; ++p) {
    const auto [k, v] = Tokens(p, 1, small);
    cache.Update(k, v);
  }
  EXPECT_EQ(cache.BufferLength(), 256);
  const auto [k, v] = Tokens(256, 1, small);
  cache.Update(k, v);
  EXPECT_EQ(cache.BufferLength(), 300);  // + min(256, 300 - 256)
  EXPECT_EQ(cache.RingIndex(), 257);
}

TEST(RotatingKVCache, PrefillLongerThanTheWindow) {
  RotatingKVCache cache(4, 2);
  const KVHistory history = Prefill(cache, 0, 6);
  EXPECT_EQ(Positions(history.Kv()), Range(0, 6));  // the whole prefill, masked by the window
  EXPECT_EQ(detail::KvAccess::Applier(history).query_len, 6);
  EXPECT_EQ(detail::KvAccess::Applier(history).key_len, 6);
  EXPECT_EQ(cache.BufferLength(), 6);
  EXPECT_EQ(Positions(cache.View().Kv()), Range(3, 6));
  // The next decode trims to max_size and wraps: [2..5] -> trim 2 -> slot 0 <- 6.
  const KVHistory next = Decode(cache, 6, 1);
  EXPECT_EQ(Positions(cache.State()), (std::vector<int>{6, 3, 4, 5}));
  EXPECT_EQ(cache.RingIndex(), 1);
  EXPECT_EQ(detail::KvAccess::Applier(next).key_len, 4);
}

TEST(RotatingKVCache, PrefillAfterWrapKeepsTheLastMaxSizeMinusOne) {
  RotatingKVCache cache(4, 2);
  Decode(cache, 0, 6);  // [4, 5, 2, 3], idx 2
  const KVHistory history = Prefill(cache, 6, 3);
  // Linearised [2, 3, 4, 5], keep [3, 4, 5], append [6, 7, 8].
  EXPECT_EQ(Positions(history.Kv()), (std::vector<int>{3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(cache.RingIndex(), 6);
  EXPECT_EQ(cache.Offset(), 9);
  Decode(cache, 9, 1);  // trim to [5, 6, 7, 8], wrap, slot 0 <- 9
  EXPECT_EQ(Positions(cache.State()), (std::vector<int>{9, 6, 7, 8}));
  EXPECT_EQ(Positions(cache.View().Kv()), (std::vector<int>{7, 8, 9}));
}

TEST(RotatingKVCache, PrefillBeforeWrapAppends) {
  RotatingKVCache cache(8, 3);
  Decode(cache, 0, 3);  // buffer of 8, idx 3: slots 3..7 are padding
  Prefill(cache, 3, 4);
  EXPECT_EQ(Positions(cache.State()), Range(0, 7));
  EXPECT_EQ(cache.BufferLength(), 7);
  Prefill(cache, 7, 4);  // idx 7: trim 7 - 8 + 1 = 0... keeps all 7, appends 4
  EXPECT_EQ(Positions(cache.State()), Range(0, 11));
  Prefill(cache, 11, 2);  // idx 11: trim 4 -> [4..10] + [11, 12]
  EXPECT_EQ(Positions(cache.State()), Range(4, 13));
}

TEST(RotatingKVCache, WindowOfOne) {
  RotatingKVCache cache(1, 1);
  Decode(cache, 0, 3);
  EXPECT_EQ(Positions(cache.State()), (std::vector<int>{2}));
  EXPECT_TRUE(cache.View().Kv().Empty());  // max_size - 1 == 0
  Prefill(cache, 3, 2);
  EXPECT_EQ(Positions(cache.State()), (std::vector<int>{3, 4}));
}

// For many (max_size, prefill, decodes): after the decodes the ring holds
// exactly the last min(offset, max_size) tokens, read oldest-first from the
// cursor; View is the last max_size - 1.
TEST(RotatingKVCache, WrapAroundCombinations) {
  for (int max_size : {1, 2, 3, 4, 5, 7, 8, 9}) {
    for (int block : {1, 3, 4, 256}) {
      for (int prefill : {0, 2, 3, 5, 8, 13}) {
        RotatingKVCache cache(max_size, block);
        if (prefill > 0) Prefill(cache, 0, prefill);
        for (int d = 0; d < 2 * max_size + 3; ++d) {
          const int pos = prefill + d;
          Decode(cache, pos, 1);
          const int offset = pos + 1;
          SCOPED_TRACE(testing::Message() << "max " << max_size << " block " << block << " prefill "
                                          << prefill << " offset " << offset);
          const std::vector<int> state = Positions(cache.State());
          const int live = std::min(offset, max_size);
          ASSERT_EQ(static_cast<int>(state.size()), live);
          std::vector<int> logical;
          for (int j = 0; j < live; ++j) {
            logical.push_back(state[static_cast<std::size_t>((cache.RingIndex() + j) % live)]);
          }
          EXPECT_EQ(logical, Range(offset - live, offset));
          const int keep = std::min(offset, max_size - 1);
          EXPECT_EQ(Positions(cache.View().Kv()), Range(offset - keep, offset));
        }
        // A prefill after the wrap keeps exactly the last max_size - 1 old tokens.
        const int before = cache.Offset();
        Prefill(cache, before, 3);
        const int kept = std::min(before, max_size - 1);
        EXPECT_EQ(Positions(cache.State()), Range(before - kept, before + 3));
      }
    }
  }
}

TEST(RotatingKVCache, LiveRewindOnlyBeforeTheWindowMoves) {
  RotatingKVCache cache(4, 2);
  Decode(cache, 0, 4);  // offset 4 == max_size
  EXPECT_FALSE(cache.Restore(nullptr, 5));
  EXPECT_TRUE(cache.Restore(nullptr, 4));
  EXPECT_TRUE(cache.Restore(nullptr, 2));
  EXPECT_EQ(cache.Offset(), 2);
  EXPECT_EQ(cache.RingIndex(), 2);
  EXPECT_EQ(Positions(cache.State()), Range(0, 2));
  Decode(cache, 20, 3);  // slots 2, 3, then wrap to 0
  EXPECT_EQ(Positions(cache.State()), (std::vector<int>{22, 1, 20, 21}));
  EXPECT_EQ(cache.Offset(), 5);
  EXPECT_FALSE(cache.Restore(nullptr, 3));  // offset 5 > max_size: refused
  EXPECT_TRUE(cache.Restore(nullptr, 5));   // target == offset is fine
  EXPECT_EQ(cache.Offset(), 5);
}

TEST(RotatingKVCache, SnapshotRestoreBringsBackTheRingIndex) {
  RotatingKVCache cache(4, 2);
  Decode(cache, 0, 6);
  auto snap = cache.Snapshot(0);
  ASSERT_NE(snap, nullptr);
  EXPECT_EQ(snap->FromOffset(), 0);
  EXPECT_EQ(snap->ToOffset(), 6);
  EXPECT_EQ(snap->Size(), 4u * 2u * (8u + 4u) * 4u);
  Decode(cache, 6, 3);  // copy-on-write: the snapshot keeps [4, 5, 2, 3]
  Prefill(cache, 9, 3);
  ASSERT_TRUE(cache.Restore(snap.get(), 6));
  EXPECT_EQ(Positions(cache.State()), (std::vector<int>{4, 5, 2, 3}));
  EXPECT_EQ(cache.RingIndex(), 2);
  EXPECT_EQ(cache.Offset(), 6);
  Decode(cache, 6, 1);
  EXPECT_EQ(Positions(cache.State()), (std::vector<int>{4, 5, 6, 3}));
  // Restoring below the end of a snapshot whose window moved is refused.
  EXPECT_FALSE(cache.Restore(snap.get(), 5));
  EXPECT_FALSE(cache.Restore(snap.get(), 7));
  EXPECT_EQ(Positions(cache.State()), (std::vector<int>{4, 5, 6, 3}));
}

TEST(RotatingKVCache, RestoreBelowASnapshotThatFitsTheWindow) {
  RotatingKVCache cache(8, 3);
  Decode(cache, 0, 6);
  auto snap = cache.Snapshot(2);
  Decode(cache, 6, 5);  // wraps
  ASSERT_TRUE(cache.Restore(snap.get(), 4));
  EXPECT_EQ(cache.Offset(), 4);
  EXPECT_EQ(cache.RingIndex(), 4);
  EXPECT_EQ(Positions(cache.State()), Range(0, 4));
  Decode(cache, 4, 2);
  EXPECT_EQ(Positions(cache.State()), Range(0, 6));
  EXPECT_EQ(cache.Snapshot(6), nullptr);
}

TEST(RotatingKVCache, RestoreIntoAnotherCacheAndFree) {
  RotatingKVCache cache(4, 2);
  Decode(cache, 0, 6);
  auto snap = cache.Snapshot(3);
  RotatingKVCache other(4, 2);
  ASSERT_TRUE(other.Restore(snap.get(), 6));
  Decode(other, 6, 1);
  EXPECT_EQ(Positions(other.State()), (std::vector<int>{4, 5, 6, 3}));
  EXPECT_EQ(Positions(cache.State()), (std::vector<int>{4, 5, 2, 3}));
  cache.Free();
  EXPECT_EQ(cache.Offset(), 0);
  EXPECT_EQ(cache.RingIndex(), 0);
  EXPECT_TRUE(cache.State().Empty());
  EXPECT_EQ(cache.Snapshot(0), nullptr);
}

TEST(RotatingKVCache, MergeKeepsTheChildAndSplitCannotSplit) {
  RotatingKVCache cache(4, 2);
  Decode(cache, 0, 3);
  auto parent = cache.Snapshot(0);
  Decode(cache, 3, 3);
  auto child = cache.Snapshot(3);
  const Snapshot* child_ptr = child.get();
  auto merged = cache.Merge(std::move(parent), std::move(child));
  EXPECT_EQ(merged.get(), child_ptr);
  EXPECT_EQ(cache.Merge(cache.Snapshot(0), nullptr), nullptr);
  auto [first, second] = cache.Split(std::move(merged), 4);
  EXPECT_EQ(first, nullptr);
  EXPECT_EQ(second.get(), child_ptr);
}

TEST(RotatingKVCache, MemoryStaysBounded) {
  RotatingKVCache cache(64, 16);
  const test::Dims dims{1, 4, 4, DType::kF32};
  for (int p = 0; p < 1000; ++p) {
    const auto [k, v] = Tokens(p, 1, dims);
    cache.Update(k, v);
    // At most max_size slots, plus a partial block at each end of the ring.
    EXPECT_LE(cache.AllocatedBytes(), (64u + 2u * 16u) * 2u * 4u * 4u);
  }
  const auto [k, v] = Tokens(1000, 40, dims);
  cache.Update(k, v);
  // max_size - 1 kept + one prefill, plus partial blocks.
  EXPECT_LE(cache.AllocatedBytes(), (63u + 40u + 2u * 16u) * 2u * 4u * 4u);
}

// A million decode steps: memory stays flat and the window stays right (the
// view generation is a counter, nothing accumulates per step).
TEST(RotatingKVCache, FlatOverAMillionDecodeSteps) {
  RotatingKVCache cache(64, 16);
  const test::Dims dims{1, 4, 4, DType::kF32};
  const auto [k, v] = Tokens(7, 1, dims);
  const std::size_t bound = (64u + 2u * 16u) * 2u * 4u * 4u;
  std::size_t most = 0;
  for (int step = 0; step < 1'000'000; ++step) {
    cache.Update(k, v);
    most = std::max(most, cache.AllocatedBytes());
  }
  EXPECT_LE(most, bound);
  EXPECT_EQ(cache.Offset(), 1'000'000);
  EXPECT_EQ(cache.RingIndex(), 1'000'000 % 64 == 0 ? 64 : 1'000'000 % 64);
  const auto [last_k, last_v] = Tokens(1'000'000, 1, dims);
  const KVHistory history = cache.Update(last_k, last_v);
  EXPECT_EQ(history.Kv().Length(), 64);
  EXPECT_EQ(Positions(cache.View().Kv()).back(), 1'000'000);
}

}  // namespace
}  // namespace ringkv
