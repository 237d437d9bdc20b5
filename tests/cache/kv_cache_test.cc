// KVCache against the reference's rules, worked by hand.
#include "ringkv/kv_cache.h"

#include <gtest/gtest.h>

#include "cache_test_util.h"
#include "kv_access.h"
#include "ringkv/error.h"
#include "ringkv/rotating_kv_cache.h"

namespace ringkv {
namespace {

using test::Positions;
using test::Range;
using test::Tokens;

// Appends positions [first, first + count) as single-token updates.
void Decode(KVCache& cache, int first, int count) {
  for (int p = first; p < first + count; ++p) {
    const auto [k, v] = Tokens(p, 1);
    cache.Update(k, v);
  }
}

void Prefill(KVCache& cache, int first, int count) {
  const auto [k, v] = Tokens(first, count);
  cache.Update(k, v);
}

TEST(KVCache, GrowthAcrossBlockBoundariesIsInvisible) {
  KVCache cache(4);
  for (int p = 0; p < 11; ++p) {
    const auto [k, v] = Tokens(p, 1);
    const KVHistory history = cache.Update(k, v);
    EXPECT_EQ(cache.Offset(), p + 1);
    EXPECT_EQ(history.Kv().Length(), p + 1);
    EXPECT_EQ(detail::KvAccess::Applier(history).kind, detail::MaskApplier::Kind::kIdentity);
    EXPECT_EQ(Positions(history.Kv()), Range(0, p + 1));
  }
  // One KvSegment per block, no gather.
  EXPECT_EQ(detail::KvAccess::SegmentCount(cache.State()), 3);
  EXPECT_EQ(cache.AllocatedBytes(), 3u * 4u * 2u * (8u + 4u) * 4u);
}

TEST(KVCache, PrefillThenDecode) {
  KVCache cache(4);
  Prefill(cache, 0, 6);
  Decode(cache, 6, 3);
  Prefill(cache, 9, 5);
  EXPECT_EQ(cache.Offset(), 14);
  EXPECT_EQ(Positions(cache.State()), Range(0, 14));
  EXPECT_EQ(Positions(cache.View().Kv()), Range(0, 14));
}

TEST(KVCache, EmptyCache) {
  KVCache cache;
  EXPECT_EQ(cache.Offset(), 0);
  EXPECT_TRUE(cache.State().Empty());
  EXPECT_TRUE(cache.View().Kv().Empty());
  EXPECT_EQ(cache.Snapshot(0), nullptr);
  EXPECT_EQ(cache.Snapshot(-3), nullptr);
}

TEST(KVCache, LiveRewind) {
  KVCache cache(4);
  Decode(cache, 0, 10);
  EXPECT_FALSE(cache.Restore(nullptr, 11));  // beyond the offset
  EXPECT_EQ(cache.Offset(), 10);
  EXPECT_TRUE(cache.Restore(nullptr, 10));
  EXPECT_TRUE(cache.Restore(nullptr, 5));
  EXPECT_EQ(cache.Offset(), 5);
  EXPECT_EQ(cache.AllocatedBytes(), 2u * 4u * 2u * (8u + 4u) * 4u);  // blocks past 5 released
  Decode(cache, 100, 3);  // writes over the rewound range
  EXPECT_EQ(Positions(cache.State()), (std::vector<int>{0, 1, 2, 3, 4, 100, 101, 102}));
  EXPECT_TRUE(cache.Restore(nullptr, 0));
  EXPECT_EQ(cache.Offset(), 0);
  EXPECT_TRUE(cache.State().Empty());
}

TEST(KVCache, SnapshotCoversFromOffsetToOffset) {
  KVCache cache(4);
  Decode(cache, 0, 10);
  auto whole = cache.Snapshot(-5);  // clamped to 0
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(whole->FromOffset(), 0);
  EXPECT_EQ(whole->ToOffset(), 10);
  EXPECT_EQ(whole->Size(), 10u * 2u * (8u + 4u) * 4u);
  auto tail = cache.Snapshot(7);
  ASSERT_NE(tail, nullptr);
  EXPECT_EQ(tail->FromOffset(), 7);
  EXPECT_EQ(tail->Size(), 3u * 2u * (8u + 4u) * 4u);
  EXPECT_EQ(cache.Snapshot(10), nullptr);  // nothing to snapshot
}

TEST(KVCache, RestoreAfterFurtherWrites) {
  KVCache cache(4);
  Decode(cache, 0, 6);
  auto snap = cache.Snapshot(0);
  Decode(cache, 6, 4);
  ASSERT_TRUE(cache.Restore(nullptr, 3));
  Decode(cache, 50, 5);  // overwrites slots 3..7, which the snapshot shares
  EXPECT_EQ(Positions(cache.State()), (std::vector<int>{0, 1, 2, 50, 51, 52, 53, 54}));
  ASSERT_TRUE(cache.Restore(snap.get(), 6));
  EXPECT_EQ(cache.Offset(), 6);
  EXPECT_EQ(Positions(cache.State()), Range(0, 6));
  // Restoring to a target inside the snapshot clamps.
  ASSERT_TRUE(cache.Restore(snap.get(), 4));
  EXPECT_EQ(Positions(cache.State()), Range(0, 4));
  Decode(cache, 4, 3);
  EXPECT_EQ(Positions(cache.State()), Range(0, 7));
}

TEST(KVCache, RestoreRules) {
  KVCache cache(4);
  Decode(cache, 0, 8);
  auto tail = cache.Snapshot(5);               // [5, 8)
  EXPECT_FALSE(cache.Restore(tail.get(), 9));  // target beyond the snapshot's end
  ASSERT_TRUE(cache.Restore(nullptr, 4));
  EXPECT_FALSE(cache.Restore(tail.get(), 8));  // offset 4 < snapshot start 5
  EXPECT_EQ(cache.Offset(), 4);
  Decode(cache, 4, 1);  // offset 5 == start: reachable
  ASSERT_TRUE(cache.Restore(tail.get(), 8));
  EXPECT_EQ(Positions(cache.State()), Range(0, 8));
  // From a longer cache the snapshot replaces everything past its start.
  Decode(cache, 8, 4);
  ASSERT_TRUE(cache.Restore(tail.get(), 7));
  EXPECT_EQ(Positions(cache.State()), Range(0, 7));
}

TEST(KVCache, RestoreIntoAFreshCache) {
  KVCache source(4);
  Decode(source, 0, 9);
  auto snap = source.Snapshot(0);
  KVCache other(4);
  ASSERT_TRUE(other.Restore(snap.get(), 9));
  EXPECT_EQ(Positions(other.State()), Range(0, 9));
  Decode(other, 9, 2);  // copy-on-write: the source does not see it
  Decode(source, 90, 2);
  EXPECT_EQ(Positions(other.State()), Range(0, 11));
  EXPECT_EQ(Positions(source.State()), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 90, 91}));
}

TEST(KVCache, MergeConcatenates) {
  KVCache cache(4);
  Decode(cache, 0, 5);
  auto first = cache.Snapshot(0);  // [0, 5)
  Decode(cache, 5, 6);
  auto second = cache.Snapshot(5);  // [5, 11)
  auto merged = cache.Merge(std::move(first), std::move(second));
  ASSERT_NE(merged, nullptr);
  EXPECT_EQ(merged->FromOffset(), 0);
  EXPECT_EQ(merged->ToOffset(), 11);
  EXPECT_EQ(merged->Size(), 11u * 2u * (8u + 4u) * 4u);
  cache.Free();
  ASSERT_TRUE(cache.Restore(merged.get(), 11));
  EXPECT_EQ(Positions(cache.State()), Range(0, 11));
  EXPECT_EQ(cache.Merge(nullptr, cache.Snapshot(3)), nullptr);
  EXPECT_EQ(cache.Merge(cache.Snapshot(3), nullptr), nullptr);
}

TEST(KVCache, MergeOfNonAdjacentSnapshotsIsAnError) {
  KVCache cache(4);
  Decode(cache, 0, 8);
  EXPECT_THROW(cache.Merge(cache.Snapshot(6), cache.Snapshot(2)), SnapshotError);
}

TEST(KVCache, SplitSharesAndRoundTrips) {
  KVCache cache(4);
  Decode(cache, 0, 10);
  auto [a, b] = cache.Split(cache.Snapshot(2), 6);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->FromOffset(), 2);
  EXPECT_EQ(a->ToOffset(), 6);
  EXPECT_EQ(b->FromOffset(), 6);
  EXPECT_EQ(b->ToOffset(), 10);
  ASSERT_TRUE(cache.Restore(nullptr, 2));
  ASSERT_TRUE(cache.Restore(a.get(), 6));
  EXPECT_EQ(Positions(cache.State()), Range(0, 6));
  ASSERT_TRUE(cache.Restore(b.get(), 10));
  EXPECT_EQ(Positions(cache.State()), Range(0, 10));
  auto rejoined = cache.Merge(std::move(a), std::move(b));
  EXPECT_EQ(rejoined->FromOffset(), 2);
  EXPECT_EQ(rejoined->ToOffset(), 10);

  // At or before the start: everything goes to the child; at or past the end: to the parent.
  auto [p1, c1] = cache.Split(cache.Snapshot(4), 4);
  EXPECT_EQ(p1, nullptr);
  ASSERT_NE(c1, nullptr);
  EXPECT_EQ(c1->FromOffset(), 4);
  auto [p2, c2] = cache.Split(cache.Snapshot(4), 10);
  ASSERT_NE(p2, nullptr);
  EXPECT_EQ(c2, nullptr);
  auto [p3, c3] = cache.Split(nullptr, 3);
  EXPECT_EQ(p3, nullptr);
  EXPECT_EQ(c3, nullptr);
}

TEST(KVCache, FreeForgetsTheLayout) {
  KVCache cache(4);
  Decode(cache, 0, 3);
  cache.Free();
  EXPECT_EQ(cache.Offset(), 0);
  EXPECT_EQ(cache.AllocatedBytes(), 0u);
  const auto [k, v] = Tokens(0, 2, test::Dims{3, 16, 16, DType::kF16});
  cache.Update(k, v);
  EXPECT_EQ(cache.State().Heads(), 3);
  EXPECT_EQ(cache.State().Dtype(), DType::kF16);
}

TEST(KVCache, ForkSharesCopyOnWrite) {
  KVCache cache(4);
  Decode(cache, 0, 6);
  KVCache fork = cache.Fork();
  Decode(fork, 6, 2);
  Decode(cache, 60, 1);
  EXPECT_EQ(Positions(fork.State()), Range(0, 8));
  EXPECT_EQ(Positions(cache.State()), (std::vector<int>{0, 1, 2, 3, 4, 5, 60}));
}

TEST(KVCache, F16AndBF16StoreAsGiven) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    KVCache cache(4);
    const test::Dims dims{2, 8, 4, dtype};
    for (int p = 0; p < 6; ++p) {
      const auto [k, v] = Tokens(p, 1, dims);
      cache.Update(k, v);
    }
    EXPECT_EQ(cache.State().Dtype(), dtype);
    // bf16 holds 16 p + 4 h + d exactly only while it fits in 8 significant bits.
    EXPECT_EQ(Positions(cache.State()), Range(0, 6));
  }
}

}  // namespace
}  // namespace ringkv
