// LayerCaches: a Gemma-style stack, managed all at once and atomically.
#include "ringkv/layer_caches.h"

#include <gtest/gtest.h>

#include "cache_test_util.h"
#include "ringkv/error.h"

namespace ringkv {
namespace {

using test::Positions;
using test::Range;
using test::Tokens;

void Decode(LayerCaches& caches, int first, int count) {
  for (int p = first; p < first + count; ++p) {
    const auto [k, v] = Tokens(p, 1);
    for (std::size_t i = 0; i < caches.Size(); ++i) caches[i].Update(k, v);
  }
}

std::vector<std::vector<int>> AllPositions(const LayerCaches& caches) {
  std::vector<std::vector<int>> all;
  for (std::size_t i = 0; i < caches.Size(); ++i) all.push_back(Positions(caches[i].State()));
  return all;
}

TEST(LayerCaches, InterleavedPattern) {
  LayerCaches caches = LayerCaches::Interleaved(6, 3, 4, 2);
  ASSERT_EQ(caches.Size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) {
    const bool global = (i + 1) % 3 == 0;
    EXPECT_EQ(dynamic_cast<KVCache*>(&caches[i]) != nullptr, global) << i;
    EXPECT_EQ(dynamic_cast<RotatingKVCache*>(&caches[i]) != nullptr, !global) << i;
  }
  Decode(caches, 0, 6);
  EXPECT_EQ(caches.Offsets(), std::vector<int>(6, 6));
  EXPECT_EQ(Positions(caches[2].State()), Range(0, 6));
  EXPECT_EQ(Positions(caches[0].State()), (std::vector<int>{4, 5, 2, 3}));
  EXPECT_THROW(caches[6], Error);
  EXPECT_THROW(LayerCaches::Interleaved(0, 3, 4), Error);
}

TEST(LayerCaches, SnapshotRestoreRoundTrip) {
  LayerCaches caches = LayerCaches::Interleaved(4, 2, 4, 2);
  Decode(caches, 0, 6);
  auto snap = caches.Snapshot(0);
  ASSERT_NE(snap, nullptr);
  EXPECT_EQ(snap->Layers(), 4u);
  // Two ring layers of 4 slots and two full layers of 6 tokens.
  EXPECT_EQ(snap->Size(), (2u * 4u + 2u * 6u) * 2u * (8u + 4u) * 4u);
  const auto before = AllPositions(caches);
  Decode(caches, 6, 5);
  ASSERT_TRUE(caches.Restore(snap.get(), 6));
  EXPECT_EQ(AllPositions(caches), before);
  EXPECT_EQ(caches.Offsets(), std::vector<int>(4, 6));
}

TEST(LayerCaches, RestoreIsAllOrNothing) {
  LayerCaches caches = LayerCaches::Interleaved(4, 2, 4, 2);
  Decode(caches, 0, 6);
  const auto before = AllPositions(caches);
  // The KVCache layers could rewind to 3, the rotating ones cannot (offset 6 > 4):
  // nothing may change.
  EXPECT_FALSE(caches.Restore(nullptr, 3));
  EXPECT_EQ(AllPositions(caches), before);
  EXPECT_EQ(caches.Offsets(), std::vector<int>(4, 6));
  auto snap = caches.Snapshot(0);
  EXPECT_FALSE(caches.Restore(snap.get(), 5));  // rotating: window moved, target < end
  EXPECT_EQ(AllPositions(caches), before);
  EXPECT_THROW(caches.Restore(nullptr, -1), Error);
  EXPECT_EQ(AllPositions(caches), before);
  // The failing layer last: the full layer before it must not have rewound.
  std::vector<LayerCaches::Layer> layers;
  layers.emplace_back(std::in_place_type<KVCache>, 2);
  layers.emplace_back(std::in_place_type<RotatingKVCache>, 4, 2);
  LayerCaches mixed(std::move(layers));
  Decode(mixed, 0, 6);
  EXPECT_FALSE(mixed.Restore(nullptr, 3));
  EXPECT_EQ(Positions(mixed[0].State()), Range(0, 6));
  EXPECT_EQ(mixed.Offsets(), (std::vector<int>{6, 6}));
  ASSERT_TRUE(mixed.Restore(nullptr, 6));
  LayerCaches other = LayerCaches::Interleaved(3, 2, 4, 2);
  EXPECT_THROW(other.Restore(snap.get(), 6), SnapshotError);
}

TEST(LayerCaches, MergeAndSplitPerLayer) {
  LayerCaches caches = LayerCaches::Interleaved(2, 2, 8, 2);  // ring(8), full
  Decode(caches, 0, 3);
  auto first = caches.Snapshot(0);
  Decode(caches, 3, 3);
  auto second = caches.Snapshot(3);
  auto merged = caches.Merge(std::move(first), std::move(second));
  ASSERT_NE(merged, nullptr);
  EXPECT_EQ(merged->Layer(1)->FromOffset(), 0);  // full layer: [0, 3) + [3, 6)
  EXPECT_EQ(merged->Layer(1)->ToOffset(), 6);
  EXPECT_EQ(merged->Layer(0)->FromOffset(), 3);  // ring layer: the child
  caches.Free();
  ASSERT_TRUE(caches.Restore(merged.get(), 6));
  EXPECT_EQ(Positions(caches[1].State()), Range(0, 6));
  EXPECT_EQ(Positions(caches[0].State()), Range(0, 6));
  auto [a, b] = caches.Split(std::move(merged), 2);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->Layer(0), nullptr);  // a ring cannot split
  EXPECT_EQ(a->Layer(1)->ToOffset(), 2);
  EXPECT_EQ(b->Layer(1)->FromOffset(), 2);
  // Non-adjacent: rejected before any layer is merged.
  EXPECT_THROW(caches.Merge(caches.Snapshot(4), caches.Snapshot(1)), SnapshotError);
}

}  // namespace
}  // namespace ringkv
