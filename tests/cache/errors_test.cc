// Bad input: an Error naming the values, and the cache exactly as before.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <climits>
#include <functional>

#include "cache_test_util.h"
#include "ringkv/error.h"
#include "ringkv/kv_cache.h"
#include "ringkv/rotating_kv_cache.h"
#include "ringkv/snapshot_data.h"
#include "ringkv/speculation.h"

namespace ringkv {
namespace {

using test::Tokens;
using ::testing::HasSubstr;

// Everything observable about a cache.
template <class C>
struct Observed {
  int offset;
  std::vector<int> positions;
  std::size_t bytes;
  explicit Observed(const C& cache)
      : offset(cache.Offset()),
        positions(test::Positions(cache.State())),
        bytes(cache.AllocatedBytes()) {}
  bool operator==(const Observed&) const = default;
};

template <class C>
void ExpectThrowsUnchanged(C& cache, const std::function<void()>& call, const char* message) {
  const Observed<C> before(cache);
  try {
    call();
    ADD_FAILURE() << "no exception; expected: " << message;
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(message));
  }
  EXPECT_TRUE(Observed<C>(cache) == before);
}

template <class C>
void BadInputSuite(C& cache, const std::string& name) {
  for (int p = 0; p < 7; ++p) {
    const auto [k, v] = Tokens(p, 1);
    cache.Update(k, v);
  }
  const auto [k, v] = Tokens(7, 1);
  const auto [k2, v2] = Tokens(7, 2);
  const auto bad_head_dim = Tokens(7, 1, test::Dims{2, 16, 4, DType::kF32});
  const auto bad_heads = Tokens(7, 1, test::Dims{3, 8, 4, DType::kF32});
  const auto bad_dtype = Tokens(7, 1, test::Dims{2, 8, 4, DType::kF16});
  const auto bad_value_dim = Tokens(7, 1, test::Dims{2, 8, 6, DType::kF32});
  ExpectThrowsUnchanged(
      cache, [&] { cache.Update(bad_head_dim.first, bad_head_dim.second); },
      ("[" + name + "::Update] keys dim 3 (head dim) is 16, but the cache holds 8").c_str());
  ExpectThrowsUnchanged(
      cache, [&] { cache.Update(bad_heads.first, bad_heads.second); },
      "keys dim 1 (heads) is 3, but the cache holds 2");
  ExpectThrowsUnchanged(
      cache, [&] { cache.Update(bad_dtype.first, bad_dtype.second); },
      "keys dtype is f16, but the cache holds f32");
  ExpectThrowsUnchanged(
      cache, [&] { cache.Update(bad_value_dim.first, bad_value_dim.second); },
      "values dim 3 (head dim) is 6, but the cache holds 4");
  ExpectThrowsUnchanged(
      cache, [&] { cache.Update(k, v2); }, "keys dim 2 (length) is 1, but values dim 2 is 2");
  ExpectThrowsUnchanged(
      cache, [&] { cache.Update(k2.Slice(1, 0, 1), v2); },
      "keys dim 1 (heads) is 1, but values dim 1 is 2");
  ExpectThrowsUnchanged(
      cache,
      [&] {
        cache.Update(k.Reshape({2, 8}), v);
      },
      "keys has rank 2 (shape [2, 8]), expected 4");
  ExpectThrowsUnchanged(
      cache, [&] { cache.Update(Tensor(), v); }, "keys has rank 0");
  const Tensor batch2 = Tensor::Zeros(DType::kF32, {2, 2, 1, 8});
  const Tensor batch2v = Tensor::Zeros(DType::kF32, {2, 2, 1, 4});
  ExpectThrowsUnchanged(
      cache, [&] { cache.Update(batch2, batch2v); },
      "keys dim 0 (batch) is 2 and values dim 0 is 2, but only B = 1");
  ExpectThrowsUnchanged(
      cache, [&] { cache.Update(k.AsType(DType::kF16), v); }, "keys dtype f16 != values dtype f32");
  ExpectThrowsUnchanged(
      cache, [&] { cache.Update(k2.Slice(2, 0, 0), v2.Slice(2, 0, 0)); },
      "keys dim 2 (length) is 0, expected >= 1");
  ExpectThrowsUnchanged(
      cache, [&] { (void)cache.Restore(nullptr, -1); },
      ("[" + name + "::Restore] target -1 is negative").c_str());
  ExpectThrowsUnchanged(
      cache, [&] { (void)cache.Snapshot(8); },
      ("[" + name + "::Snapshot] from_offset 8 is beyond the offset 7").c_str());
}

TEST(CacheErrors, KVCache) {
  KVCache cache(4);
  BadInputSuite(cache, "KVCache");
}

TEST(CacheErrors, RotatingKVCache) {
  RotatingKVCache cache(4, 2);
  BadInputSuite(cache, "RotatingKVCache");
}

TEST(CacheErrors, SnapshotOfAnotherKind) {
  KVCache plain(4);
  RotatingKVCache ring(4, 2);
  for (int p = 0; p < 6; ++p) {
    const auto [k, v] = Tokens(p, 1);
    plain.Update(k, v);
    ring.Update(k, v);
  }
  const auto plain_snap = plain.Snapshot(0);
  const auto ring_snap = ring.Snapshot(0);
  ExpectThrowsUnchanged(
      plain, [&] { (void)plain.Restore(ring_snap.get(), 3); },
      "[KVCache::Restore] the snapshot was made by another cache kind");
  ExpectThrowsUnchanged(
      ring, [&] { (void)ring.Restore(plain_snap.get(), 3); },
      "[RotatingKVCache::Restore] the snapshot was made by another cache kind");
  EXPECT_THROW(plain.Merge(ring.Snapshot(0), plain.Snapshot(3)), SnapshotError);
  EXPECT_THROW(ring.Merge(ring.Snapshot(0), plain.Snapshot(3)), SnapshotError);
  EXPECT_THROW(plain.Split(ring.Snapshot(0), 2), SnapshotError);
  EXPECT_THROW(ring.Split(plain.Snapshot(0), 2), SnapshotError);
}

TEST(CacheErrors, Construction) {
  EXPECT_THROW(KVCache(0), Error);
  EXPECT_THROW(RotatingKVCache(0), Error);
  EXPECT_THROW(RotatingKVCache(4, -1), Error);
}

template <class C>
void Decode(C& cache, int first, int count, const test::Dims& dims = {}) {
  for (int p = first; p < first + count; ++p) {
    const auto [k, v] = Tokens(p, 1, dims);
    cache.Update(k, v);
  }
}

// A ring's snapshot fits only a ring of the same window and K/V layout.
TEST(CacheErrors, RingRestoreRefusesAnotherWindowOrLayout) {
  RotatingKVCache small(4, 2), large(16, 2);
  Decode(small, 0, 6);
  Decode(large, 0, 6);
  const auto small_snap = small.Snapshot(0);
  const auto large_snap = large.Snapshot(0);
  ExpectThrowsUnchanged(
      large, [&] { (void)large.Restore(small_snap.get(), 6); },
      "[RotatingKVCache::Restore] the snapshot holds a window of 4, the cache 16");
  EXPECT_EQ(large.RingIndex(), 6);
  ExpectThrowsUnchanged(
      small, [&] { (void)small.Restore(large_snap.get(), 6); },
      "[RotatingKVCache::Restore] the snapshot holds a window of 16, the cache 4");
  EXPECT_EQ(small.RingIndex(), 2);
  // Both still decode normally.
  Decode(large, 6, 1);
  Decode(small, 6, 1);
  EXPECT_EQ(test::Positions(small.State()), (std::vector<int>{4, 5, 6, 3}));
  EXPECT_EQ(test::Positions(large.State()), test::Range(0, 7));

  struct Case {
    test::Dims dims;
    const char* message;
  };
  const Case cases[] = {
      {{3, 8, 4, DType::kF32},
       "the snapshot holds heads 3 head dims 8/4 f32, the cache heads 2 "
       "head dims 8/4 f32"},
      {{2, 16, 4, DType::kF32}, "the snapshot holds heads 2 head dims 16/4 f32"},
      {{2, 8, 6, DType::kF32}, "the snapshot holds heads 2 head dims 8/6 f32"},
      {{2, 8, 4, DType::kF16}, "the snapshot holds heads 2 head dims 8/4 f16"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    RotatingKVCache other(4, 2);
    Decode(other, 0, 6, c.dims);
    const auto snap = other.Snapshot(0);
    ExpectThrowsUnchanged(
        small, [&] { (void)small.Restore(snap.get(), 6); }, c.message);
    // A fresh ring takes any layout (as a fresh KVCache does), but never another window.
    RotatingKVCache fresh(4, 2);
    ASSERT_TRUE(fresh.Restore(snap.get(), 6));
    Decode(fresh, 6, 1, c.dims);
    EXPECT_EQ(test::Positions(fresh.State()), (std::vector<int>{4, 5, 6, 3}));
  }
  RotatingKVCache fresh(16, 2);
  ExpectThrowsUnchanged(
      fresh, [&] { (void)fresh.Restore(small_snap.get(), 6); },
      "the snapshot holds a window of 4, the cache 16");
}

// A snapshot taken from a ring with other block sizes restores into this one's.
TEST(CacheErrors, RingRestoreKeepsItsBlockSize) {
  RotatingKVCache source(4, 3), target(4, 2);
  Decode(source, 0, 7);
  const auto snap = source.Snapshot(0);
  ASSERT_TRUE(target.Restore(snap.get(), 7));
  EXPECT_EQ(target.BlockTokens(), 2);
  Decode(target, 7, 2);
  EXPECT_EQ(test::Positions(target.View().Kv()), test::Range(6, 9));
}

// A failed Merge or Split gives the caller's snapshots back untouched.
TEST(CacheErrors, FailedMergeKeepsTheCallersSnapshots) {
  KVCache plain(4);
  RotatingKVCache ring(4, 2), wide(8, 2);
  Decode(plain, 0, 8);
  Decode(ring, 0, 8);
  Decode(wide, 0, 8);
  auto late = plain.Snapshot(6);
  auto early = plain.Snapshot(2);
  const Snapshot* late_ptr = late.get();
  const Snapshot* early_ptr = early.get();
  EXPECT_THROW(plain.Merge(std::move(late), std::move(early)), SnapshotError);
  EXPECT_EQ(late.get(), late_ptr);
  EXPECT_EQ(early.get(), early_ptr);
  EXPECT_EQ(late->FromOffset(), 6);
  EXPECT_EQ(early->FromOffset(), 2);
  auto ring_snap = ring.Snapshot(0);
  const Snapshot* ring_ptr = ring_snap.get();
  EXPECT_THROW(plain.Merge(std::move(early), std::move(ring_snap)), SnapshotError);
  EXPECT_EQ(early.get(), early_ptr);
  EXPECT_EQ(ring_snap.get(), ring_ptr);
  EXPECT_THROW(ring.Merge(std::move(ring_snap), std::move(late)), SnapshotError);
  EXPECT_EQ(ring_snap.get(), ring_ptr);
  EXPECT_EQ(late.get(), late_ptr);
  auto wide_snap = wide.Snapshot(0);
  EXPECT_THAT(
      [&] {
        try {
          (void)ring.Merge(std::move(ring_snap), std::move(wide_snap));
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      HasSubstr("[RotatingKVCache::Merge] the child holds a window of 8, the cache 4"));
  EXPECT_EQ(ring_snap.get(), ring_ptr);
  EXPECT_NE(wide_snap, nullptr);
  EXPECT_THROW(plain.Split(std::move(ring_snap), 2), SnapshotError);
  EXPECT_EQ(ring_snap.get(), ring_ptr);
  EXPECT_THROW(ring.Split(std::move(late), 2), SnapshotError);
  EXPECT_EQ(late.get(), late_ptr);
  // Success consumes the inputs.
  auto a = plain.Snapshot(0);
  auto b = plain.Split(plain.Snapshot(0), 4);
  auto merged = plain.Merge(std::move(b.first), std::move(b.second));
  EXPECT_EQ(b.first, nullptr);   // NOLINT(bugprone-use-after-move): consumed
  EXPECT_EQ(b.second, nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(merged->ToOffset(), 8);
  auto c = plain.Split(std::move(a), 3);
  EXPECT_EQ(a, nullptr);  // NOLINT(bugprone-use-after-move)
}

// Split points far outside the span (no overflow computing at - from).
TEST(CacheErrors, SplitAtExtremePoints) {
  KVCache plain(4);
  Decode(plain, 0, 8);
  auto [none, all] = plain.Split(plain.Snapshot(5), INT_MIN);
  EXPECT_EQ(none, nullptr);
  ASSERT_NE(all, nullptr);
  EXPECT_EQ(all->FromOffset(), 5);
  auto [whole, empty] = plain.Split(std::move(all), INT_MAX);
  EXPECT_EQ(empty, nullptr);
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(whole->ToOffset(), 8);
}

// Offsets are ints: an Update that would pass INT_MAX is an Error, not a
// gsl::narrowing_error (nor an overflow in a speculation wrapper).
TEST(CacheErrors, OffsetNearIntMaxFromAnImportedSnapshot) {
  RotatingKVCache source(4, 2);
  Decode(source, 0, 6);
  SnapshotData data = ExportSnapshot(*source.Snapshot(0));
  data.from = INT_MAX - 10;
  data.to = INT_MAX - 1;
  const auto imported = ImportSnapshot(data, 4, 2);
  RotatingKVCache ring(4, 2);
  ASSERT_TRUE(ring.Restore(imported.get(), INT_MAX - 1));
  Decode(ring, 0, 1);  // reaches INT_MAX
  const auto [k, v] = Tokens(9, 1);
  const auto [k3, v3] = Tokens(9, 3);
  ExpectThrowsUnchanged(
      ring, [&] { ring.Update(k, v); },
      "[RotatingKVCache::Update] offset 2147483647 + 1 new tokens would exceed 2147483647");
  ASSERT_TRUE(ring.Restore(imported.get(), INT_MAX - 1));
  ExpectThrowsUnchanged(
      ring, [&] { ring.Update(k3, v3); },
      "[RotatingKVCache::Update] offset 2147483646 + 3 new tokens would exceed 2147483647");
  AttentionCache* caches[] = {&ring};
  Speculation spec = BeginSpeculation(caches);
  ExpectThrowsUnchanged(
      ring, [&] { spec.Caches()[0]->Update(k3, v3); },
      "offset 2147483646 + 3 new tokens would exceed 2147483647");
  EXPECT_EQ(spec.Caches()[0]->Offset(), INT_MAX - 1);
  spec.Caches()[0]->Update(k, v);  // exactly INT_MAX
  spec.Commit(1);
  EXPECT_EQ(ring.Offset(), INT_MAX);
}

}  // namespace
}  // namespace ringkv
