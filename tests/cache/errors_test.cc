// Bad input: an Error naming the values, and the cache exactly as before.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cache_test_util.h"
#include "ringkv/error.h"
#include "ringkv/kv_cache.h"
#include "ringkv/rotating_kv_cache.h"

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

}  // namespace
}  // namespace ringkv
