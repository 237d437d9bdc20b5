// Update straight from a model's buffers: keys and values borrowed as permuted
// views of row-major [L, Hkv, D] f32 projections, converted into a cache built
// with a storage dtype in the one copy into its blocks. The expectation is the
// path an engine had to take before (make a contiguous [1, Hkv, L, D] copy,
// convert it with AsType, then Update a cache without a storage dtype): the same
// stored bits and the same attention output.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cache_test_util.h"
#include "lib/lib_test_util.h"
#include "model_buffers.h"
#include "ringkv/attention.h"
#include "ringkv/context.h"
#include "ringkv/error.h"
#include "ringkv/kv_cache.h"
#include "ringkv/layer_caches.h"
#include "ringkv/rotating_kv_cache.h"
#include "ringkv/speculation.h"
#include "ringkv/tensor_ops.h"

namespace ringkv {
namespace {

using test::Positions;
using test::Projection;
using test::RandomProjection;
using test::Range;
using test::Tokens;

constexpr std::int64_t kHeads = 2;   // Hkv
constexpr std::int64_t kQHeads = 4;  // Hq
constexpr std::int64_t kKDim = 8;
constexpr std::int64_t kVDim = 4;

// Same dtype, shape and bytes, segment by segment.
void ExpectSameBits(const KvView& actual, const KvView& expected, DType storage) {
  ASSERT_EQ(actual.Length(), expected.Length());
  const Tensor ak = actual.ConcatKeys(), ek = expected.ConcatKeys();
  const Tensor av = actual.ConcatValues(), ev = expected.ConcatValues();
  ASSERT_EQ(ak.Dtype(), storage);
  ASSERT_EQ(av.Dtype(), storage);
  ASSERT_EQ(ek.Dtype(), storage);
  ASSERT_EQ(ak.GetShape(), ek.GetShape());
  ASSERT_EQ(av.GetShape(), ev.GetShape());
  EXPECT_EQ(std::memcmp(ak.Data(), ek.Data(), ak.NumBytes()), 0);
  EXPECT_EQ(std::memcmp(av.Data(), ev.Data(), av.NumBytes()), 0);
}

// Runs one Update per entry of `lengths` on both caches, zero-copy into
// `zero_copy` and the old way into `old_path`, and compares after each step.
template <class Cache>
void CompareSteps(Cache& zero_copy, Cache& old_path, DType storage,
                  const std::vector<std::int64_t>& lengths, bool bf16_values = false) {
  std::mt19937 rng(1234);
  Context ctx(1);
  for (std::size_t step = 0; step < lengths.size(); ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step << ", L " << lengths[step]);
    const std::int64_t length = lengths[step];
    const Projection k = RandomProjection(rng, length, kHeads, kKDim);
    const Projection v = RandomProjection(rng, length, kHeads, kVDim);
    const Projection q = RandomProjection(rng, length, kQHeads, kKDim);
    Tensor values = v.View();
    if (bf16_values) {
      // An engine whose V projection is already bf16 (a different dtype from K).
      values = Tensor::FromVector(v.data, {length, kHeads, kVDim}, DType::kBF16)
                   .Permute({1, 0, 2})
                   .Unsqueeze(0);
    }
    const KVHistory fast = zero_copy.Update(k.View(), values);
    const KVHistory slow =
        old_path.Update(k.View().Contiguous().AsType(storage), values.Contiguous().AsType(storage));
    ExpectSameBits(fast.Kv(), slow.Kv(), storage);
    ExpectSameBits(zero_copy.State(), old_path.State(), storage);
    const Tensor out_fast = Attention(q.View(), fast, AttentionMask::Causal(), 0.35f, ctx);
    const Tensor out_slow =
        Attention(q.View().Contiguous(), slow, AttentionMask::Causal(), 0.35f, ctx);
    EXPECT_EQ(out_fast.ToVector(), out_slow.ToVector());
    EXPECT_EQ(zero_copy.Offset(), old_path.Offset());
  }
}

class ZeroCopyUpdateTest : public testing::TestWithParam<DType> {};

TEST_P(ZeroCopyUpdateTest, KVCacheMatchesTheCopyingPath) {
  const DType storage = GetParam();
  KVCache zero_copy(4, storage);
  KVCache old_path(4);
  EXPECT_EQ(zero_copy.StorageDtype(), storage);
  EXPECT_EQ(old_path.StorageDtype(), std::nullopt);
  // Prefill, decode across block boundaries, a second prefill.
  CompareSteps(zero_copy, old_path, storage, {5, 1, 1, 1, 3, 1});
  EXPECT_EQ(zero_copy.Offset(), 12);
}

TEST_P(ZeroCopyUpdateTest, RotatingKVCacheMatchesTheCopyingPathThroughAWrap) {
  const DType storage = GetParam();
  RotatingKVCache zero_copy(6, 4, storage);
  RotatingKVCache old_path(6, 4);
  // Prefill 5, decode 7 (the ring wraps at 6), a prefill on the wrapped ring
  // (the concat path), then decode again.
  CompareSteps(zero_copy, old_path, storage, {5, 1, 1, 1, 1, 1, 1, 1, 3, 1, 1});
  EXPECT_EQ(zero_copy.Offset(), 17);
  EXPECT_EQ(zero_copy.RingIndex(), old_path.RingIndex());
}

TEST_P(ZeroCopyUpdateTest, KeysAndValuesMayHaveDifferentDtypes) {
  const DType storage = GetParam();
  KVCache plain(4, storage), plain_old(4);
  CompareSteps(plain, plain_old, storage, {3, 1, 2}, /*bf16_values=*/true);
  RotatingKVCache ring(3, 2, storage), ring_old(3, 2);
  CompareSteps(ring, ring_old, storage, {2, 1, 1, 1, 2, 1}, /*bf16_values=*/true);
}

INSTANTIATE_TEST_SUITE_P(HalfStorage, ZeroCopyUpdateTest,
                         testing::Values(DType::kF16, DType::kBF16),
                         [](const testing::TestParamInfo<DType>& param) {
                           return std::string(DTypeName(param.param));
                         });

TEST(StorageDtypeTest, OutlivesFreeAndFollowsForkAndSwap) {
  KVCache cache(4, DType::kF16);
  const auto [k, v] = Tokens(0, 2);  // f32
  cache.Update(k, v);
  EXPECT_EQ(cache.State().ConcatKeys().Dtype(), DType::kF16);
  cache.Free();
  const auto [k16, v16] = Tokens(0, 2, {.dtype = DType::kBF16});
  cache.Update(k16, v16);  // after Free the storage dtype still decides
  EXPECT_EQ(cache.State().ConcatKeys().Dtype(), DType::kF16);
  EXPECT_EQ(Positions(cache.State()), Range(0, 2));

  KVCache fork = cache.Fork();
  EXPECT_EQ(fork.StorageDtype(), DType::kF16);
  KVCache plain(4);
  plain.Swap(fork);
  EXPECT_EQ(plain.StorageDtype(), DType::kF16);
  EXPECT_EQ(fork.StorageDtype(), std::nullopt);

  RotatingKVCache ring(3, 2, DType::kBF16);
  ring.Update(k, v);
  ring.Free();
  ring.Update(k16, v16);
  EXPECT_EQ(ring.State().ConcatValues().Dtype(), DType::kBF16);
  EXPECT_EQ(ring.Fork().StorageDtype(), DType::kBF16);
}

// Without a storage dtype, behaviour is as before: the first Update's dtype stays.
TEST(StorageDtypeTest, WithoutOneTheFirstUpdateFixesTheDtype) {
  KVCache cache(4);
  const auto [k16, v16] = Tokens(0, 1, {.dtype = DType::kF16});
  cache.Update(k16, v16);
  const auto [k, v] = Tokens(1, 1);
  test::ExpectThrowWith<ShapeError>(
      [&] { cache.Update(k, v); },
      {"[KVCache::Update] keys dtype is f32, but the cache holds f16"});
  test::ExpectThrowWith<ShapeError>([&] { cache.Update(k, v16); },
                                    {"[KVCache::Update] keys dtype f32 != values dtype f16"});
  EXPECT_EQ(Positions(cache.State()), Range(0, 1));
  RotatingKVCache ring(4);
  test::ExpectThrowWith<ShapeError>(
      [&] { ring.Update(k16, v); },
      {"[RotatingKVCache::Update] keys dtype f16 != values dtype f32"});
  EXPECT_EQ(ring.Offset(), 0);
  // With one, other input errors are as specific as ever.
  KVCache converting(4, DType::kF16);
  const auto [k_other, v_other] = Tokens(0, 1, {.heads = 3});
  converting.Update(k, v);
  test::ExpectThrowWith<ShapeError>(
      [&] { converting.Update(k_other, v_other); },
      {"[KVCache::Update] keys dim 1 (heads) is 3, but the cache holds 2"});
  EXPECT_EQ(Positions(converting.State()), Range(1, 2));
}

TEST(StorageDtypeTest, ConstructorsRejectAnUnknownDtype) {
  const auto bad = static_cast<DType>(9);
  test::ExpectThrowWith<Error>([&] { KVCache cache(4, bad); },
                               {"[KVCache] dtype 9 is not one of f32, f16, bf16"});
  test::ExpectThrowWith<Error>([&] { RotatingKVCache cache(4, 4, bad); },
                               {"[RotatingKVCache] dtype 9 is not one of f32, f16, bf16"});
  test::ExpectThrowWith<Error>([&] { (void)LayerCaches::Interleaved(2, 2, 4, 16, bad); },
                               {"[LayerCaches::Interleaved] dtype 9 is not one of"});
}

// A snapshot of another dtype would leave blocks that are not the storage dtype.
TEST(StorageDtypeTest, RestoreRefusesASnapshotOfAnotherDtype) {
  KVCache source(4);
  const auto [k, v] = Tokens(0, 3);
  source.Update(k, v);
  const auto snapshot = source.Snapshot(0);
  KVCache cache(4, DType::kF16);
  test::ExpectThrowWith<SnapshotError>(
      [&] { cache.Restore(snapshot.get(), 3); },
      {"[KVCache::Restore] the snapshot holds f32, the cache's storage dtype is f16"});
  EXPECT_EQ(cache.Offset(), 0);
  cache.Update(k, v);  // still usable, still f16
  EXPECT_EQ(cache.State().ConcatKeys().Dtype(), DType::kF16);
  // A snapshot of its own dtype restores.
  const auto own = cache.Snapshot(0);
  KVCache other(4, DType::kF16);
  EXPECT_TRUE(other.Restore(own.get(), 3));
  EXPECT_EQ(Positions(other.State()), Range(0, 3));

  RotatingKVCache ring_source(4);
  ring_source.Update(k, v);
  const auto ring_snapshot = ring_source.Snapshot(0);
  RotatingKVCache ring(4, 4, DType::kBF16);
  test::ExpectThrowWith<SnapshotError>(
      [&] { ring.Restore(ring_snapshot.get(), 3); },
      {"[RotatingKVCache::Restore] the snapshot holds f32, the cache's storage dtype is bf16"});
  EXPECT_EQ(ring.Offset(), 0);
  EXPECT_TRUE(ring.State().Empty());
}

// Drafts are recorded in the live cache's storage dtype, so a history that mixes
// live and drafted tokens has one dtype.
TEST(StorageDtypeTest, IsolatedSpeculationConvertsDrafts) {
  KVCache plain(3, DType::kF16);
  RotatingKVCache ring(4, 2, DType::kF16);
  const auto [k, v] = Tokens(0, 5);
  plain.Update(k, v);
  ring.Update(k, v);
  AttentionCache* caches[] = {&plain, &ring};
  auto wrappers = BeginIsolatedSpeculation(caches);
  const auto [dk, dv] = Tokens(5, 2);  // f32 drafts
  const KVHistory drafted = wrappers[0]->Update(dk, dv);
  EXPECT_EQ(drafted.Kv().ConcatKeys().Dtype(), DType::kF16);
  EXPECT_EQ(Positions(drafted.Kv()), Range(0, 7));
  EXPECT_EQ(Positions(wrappers[1]->Update(dk, dv).Kv()), Range(2, 7));
  EXPECT_EQ(plain.Offset(), 5);
}

TEST(StorageDtypeTest, InterleavedLayersShareIt) {
  LayerCaches layers = LayerCaches::Interleaved(3, 2, 4, 16, DType::kBF16);
  const auto [k, v] = Tokens(0, 2);
  for (std::size_t i = 0; i < layers.Size(); ++i) {
    layers[i].Update(k, v);
    EXPECT_EQ(layers[i].State().ConcatKeys().Dtype(), DType::kBF16) << i;
    EXPECT_EQ(Positions(layers[i].State()), Range(0, 2)) << i;
  }
  LayerCaches plain = LayerCaches::Interleaved(2, 2, 4);
  const auto [k16, v16] = Tokens(0, 1, {.dtype = DType::kF16});
  plain[0].Update(k16, v16);
  EXPECT_EQ(plain[0].State().ConcatKeys().Dtype(), DType::kF16);
}

// An input that is a view of the cache's own blocks is read before the write.
TEST(StorageDtypeTest, UpdateFromTheCachesOwnBlocks) {
  KVCache cache(8, DType::kF16);
  const auto [k, v] = Tokens(0, 4);
  cache.Update(k, v);
  const KvView state = cache.State();
  const Tensor own_keys = state.KeySegments()[0].Slice(2, 1, 3);  // positions 1, 2
  const Tensor own_values = state.ValueSegments()[0].Slice(2, 1, 3);
  cache.Update(own_keys, own_values);  // into slots 4, 5 of the same block
  EXPECT_EQ(Positions(cache.State()), (std::vector<int>{0, 1, 2, 3, 1, 2}));
}

}  // namespace
}  // namespace ringkv
