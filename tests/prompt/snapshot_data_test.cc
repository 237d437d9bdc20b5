// ExportSnapshot / ImportSnapshot: a round trip restores the same K/V, and
// imports that would break a cache's invariants are refused.
#include "ringkv/snapshot_data.h"

#include <gtest/gtest.h>

#include "prompt_test_util.h"
#include "ringkv/error.h"

namespace ringkv::test {
namespace {

TEST(SnapshotData, KvRoundTripRestoresTheSameTokens) {
  LayerCaches caches = LayerCaches::Interleaved(1, 1, 4, 3);  // one KVCache, blocks of 3
  FakeForward(caches, Seq(10, 7));
  const std::unique_ptr<Snapshot> span = caches[0].Snapshot(2);
  const SnapshotData data = ExportSnapshot(*span);
  EXPECT_EQ(data.kind, SnapshotData::Kind::kKv);
  EXPECT_EQ(data.from, 2);
  EXPECT_EQ(data.to, 7);
  EXPECT_EQ(data.keys.Dim(2), 5);
  const std::unique_ptr<Snapshot> imported = ImportSnapshot(data, 0, 3);
  EXPECT_EQ(imported->Size(), span->Size());
  ASSERT_TRUE(caches[0].Restore(nullptr, 2));
  FakeForward(caches, std::vector<int>{1, 1});  // overwrite [2, 4)
  ASSERT_TRUE(caches[0].Restore(imported.get(), 7));
  ExpectHolds(caches, Seq(10, 7));
}

TEST(SnapshotData, RingRoundTripAfterWrapping) {
  LayerCaches caches = LayerCaches::Interleaved(1, 2, 4, 4);  // one RotatingKVCache(4)
  FakeForward(caches, Seq(10, 6));
  FakeDecode(caches, Seq(16, 3));  // offset 9, decode layout
  const SnapshotData data = ExportSnapshot(*caches[0].Snapshot(8));
  EXPECT_EQ(data.kind, SnapshotData::Kind::kRotating);
  EXPECT_EQ(data.keys.Dim(2), 4);
  const std::unique_ptr<Snapshot> imported = ImportSnapshot(data, 4, 4);
  FakeForward(caches, std::vector<int>{1, 2, 3});
  ASSERT_TRUE(caches[0].Restore(imported.get(), 9));
  ExpectHolds(caches, Seq(10, 9));
}

TEST(SnapshotData, RefusesBrokenInvariants) {
  LayerCaches caches = LayerCaches::Interleaved(1, 2, 4, 4);
  FakeForward(caches, Seq(10, 6));
  const SnapshotData good = ExportSnapshot(*caches[0].Snapshot(5));  // prefill layout: 6 slots
  EXPECT_NO_THROW(ImportSnapshot(good, 4, 4));
  SnapshotData bad = good;
  bad.ring_index = 2;  // after a prefill chunk the cursor is at the end
  EXPECT_THROW(ImportSnapshot(bad, 4, 4), SnapshotError);
  bad = good;
  bad.to = 3;  // an unwrapped ring holds exactly `to` slots
  bad.from = 0;
  EXPECT_THROW(ImportSnapshot(bad, 4, 4), SnapshotError);
  bad = good;
  bad.from = 6;  // from < to
  EXPECT_THROW(ImportSnapshot(bad, 4, 4), SnapshotError);
  bad = good;
  bad.kind = SnapshotData::Kind::kKv;  // a span must hold to - from slots
  EXPECT_THROW(ImportSnapshot(bad, 0, 4), SnapshotError);
  bad = good;
  bad.values = Tensor::Zeros(DType::kF32, {1, 1, 6, 3});  // Dv may differ from D,
  EXPECT_NO_THROW(ImportSnapshot(bad, 4, 4));
  bad.values = Tensor::Zeros(DType::kF16, {1, 1, 6, 2});  // but dtypes must agree
  EXPECT_THROW(ImportSnapshot(bad, 4, 4), SnapshotError);
  bad.values = Tensor::Zeros(DType::kF32, {1, 1, 5, 2});  // and lengths
  EXPECT_THROW(ImportSnapshot(bad, 4, 4), SnapshotError);
  EXPECT_THROW(ImportSnapshot(SnapshotData{}, 4, 4), SnapshotError);  // empty
}

}  // namespace
}  // namespace ringkv::test
