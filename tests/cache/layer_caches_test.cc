// LayerCaches: a Gemma-style stack, managed all at once and atomically; the
// one-offset rule; failed Merge/Split leave the caller's snapshots intact.
#include "ringkv/layer_caches.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "cache_test_util.h"
#include "layer_snapshot_access.h"
#include "ringkv/error.h"

namespace ringkv {
namespace {

using test::ErrorOf;

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

// Quantized storage reaches every layer: one dtype for both sides, or K and V
// in their own; an int4 side still needs a head dim that is a multiple of 32.
TEST(LayerCaches, InterleavedTakesQuantizedStorage) {
  const LayerCaches same = LayerCaches::Interleaved(3, 3, 4, 2, DType::kI8);
  const LayerCaches mixed = LayerCaches::Interleaved(3, 3, 4, 2, KvStorage{DType::kI8, DType::kI4});
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(same[i].Storage(), KvStorage::Same(DType::kI8)) << i;
    EXPECT_EQ(mixed[i].Storage(), (KvStorage{DType::kI8, DType::kI4})) << i;
    EXPECT_EQ(dynamic_cast<const KVCache*>(&mixed[i]) != nullptr, i == 2) << i;
  }
  EXPECT_THAT(ErrorOf([] { LayerCaches::Interleaved(0, 3, 4, 2, KvStorage::Same(DType::kI4)); }),
              ::testing::HasSubstr("layers 0"));
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

TEST(LayerCaches, LayersThatDivergeAreReportedByTheNextJointOperation) {
  LayerCaches caches = LayerCaches::Interleaved(4, 2, 8, 2);
  Decode(caches, 0, 5);
  EXPECT_EQ(caches.Offset(), 5);
  const auto [k, v] = Tokens(5, 1);
  caches[0].Update(k, v);  // a forward that stopped after layer 0
  caches[1].Update(k, v);
  const auto before = AllPositions(caches);
  // Offsets() stays a diagnostic; every operation that needs one offset refuses.
  EXPECT_EQ(caches.Offsets(), (std::vector<int>{6, 6, 5, 5}));
  const std::string expected = "the layers are at different offsets: [6, 6, 5, 5]";
  EXPECT_THAT(ErrorOf([&] { (void)caches.Offset(); }),
              testing::HasSubstr("[LayerCaches::Offset] " + expected));
  EXPECT_THAT(ErrorOf([&] { (void)caches.Snapshot(0); }),
              testing::HasSubstr("[LayerCaches::Snapshot] " + expected));
  EXPECT_EQ(AllPositions(caches), before);
  // Restore always ends with every layer at `target` (or changes nothing): it is
  // the way back to one offset, as is Free().
  EXPECT_FALSE(caches.Restore(nullptr, 6));
  EXPECT_EQ(AllPositions(caches), before);
  ASSERT_TRUE(caches.Restore(nullptr, 5));
  EXPECT_EQ(caches.Offset(), 5);
  EXPECT_NE(caches.Snapshot(0), nullptr);
}

TEST(LayerCaches, SnapshotsWhoseLayersDisagreeAreRefused) {
  LayerCaches caches = LayerCaches::Interleaved(2, 2, 8, 2);  // ring(8), full
  Decode(caches, 0, 4);
  auto parent = caches.Snapshot(0);
  Decode(caches, 4, 3);
  // A hand-made snapshot: the ring layer at 7, the full layer's span [4, 6).
  std::vector<std::unique_ptr<Snapshot>> layers;
  layers.push_back(caches[0].Snapshot(4));
  layers.push_back(caches[1].Split(caches[1].Snapshot(4), 6).first);
  auto child = std::make_unique<LayerSnapshot>(std::move(layers));
  EXPECT_THAT(ErrorOf([&] { (void)caches.Merge(std::move(parent), std::move(child)); }),
              testing::HasSubstr("[LayerCaches::Merge] the child's layers end at different "
                                 "offsets: [7, 6]"));
  ASSERT_NE(parent, nullptr);
  ASSERT_NE(child, nullptr);
  EXPECT_THAT(ErrorOf([&] { (void)caches.Split(std::move(child), 5); }),
              testing::HasSubstr("[LayerCaches::Split] the snapshot's layers end at different "
                                 "offsets: [7, 6]"));
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(child->Layer(1)->ToOffset(), 6);
}

// A failed Merge or Split leaves both of the caller's snapshots as they were.
TEST(LayerCaches, FailedMergeAndSplitKeepTheCallersSnapshots) {
  LayerCaches caches = LayerCaches::Interleaved(2, 2, 8, 2);  // ring(8), full
  Decode(caches, 0, 6);
  auto late = caches.Snapshot(4);   // [4, 6)
  auto early = caches.Snapshot(1);  // [1, 6): not adjacent to `late`
  const Snapshot* late_layers[] = {late->Layer(0), late->Layer(1)};
  const Snapshot* early_layers[] = {early->Layer(0), early->Layer(1)};
  EXPECT_THROW(caches.Merge(std::move(late), std::move(early)), SnapshotError);
  ASSERT_NE(late, nullptr);
  ASSERT_NE(early, nullptr);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(late->Layer(i), late_layers[i]);
    EXPECT_EQ(early->Layer(i), early_layers[i]);
  }
  EXPECT_EQ(late->Layer(1)->FromOffset(), 4);
  EXPECT_EQ(early->Layer(1)->FromOffset(), 1);
  // Still usable: restore the intact snapshot.
  caches.Free();
  Decode(caches, 0, 1);
  ASSERT_TRUE(caches.Restore(early.get(), 6));
  EXPECT_EQ(Positions(caches[1].State()), Range(0, 6));
  // Another stack's layer kinds: Split refuses before moving any layer.
  LayerCaches swapped = LayerCaches::Interleaved(2, 1, 8, 2);  // full, full
  EXPECT_THROW(swapped.Split(std::move(early), 3), SnapshotError);
  ASSERT_NE(early, nullptr);
  EXPECT_EQ(early->Layer(0), early_layers[0]);
  EXPECT_EQ(early->Layer(1), early_layers[1]);
  // A successful Merge consumes both inputs.
  auto first = caches.Snapshot(0);
  Decode(caches, 6, 2);
  auto second = caches.Snapshot(6);
  auto merged = caches.Merge(std::move(first), std::move(second));
  ASSERT_NE(merged, nullptr);
  EXPECT_EQ(first, nullptr);   // NOLINT(bugprone-use-after-move): defined as consumed
  EXPECT_EQ(second, nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(merged->Layer(1)->ToOffset(), 8);
}

// The prompt cache's per-layer moves are internals, not LayerSnapshot's API.
template <class T>
concept MovesLayersPublicly = requires(T& s, std::unique_ptr<Snapshot> p) {
  s.Release(std::size_t{0});
  s.Reset(std::size_t{0}, std::move(p));
};
static_assert(!MovesLayersPublicly<LayerSnapshot>);

TEST(LayerCaches, LayerSnapshotAccessMovesOneLayer) {
  LayerCaches caches = LayerCaches::Interleaved(2, 2, 8, 2);
  Decode(caches, 0, 3);
  auto snap = caches.Snapshot(0);
  const Snapshot* layer0 = snap->Layer(0);
  std::unique_ptr<Snapshot> taken = detail::LayerSnapshotAccess::Release(*snap, 0);
  EXPECT_EQ(taken.get(), layer0);
  EXPECT_EQ(snap->Layer(0), nullptr);
  detail::LayerSnapshotAccess::Reset(*snap, 1, std::move(taken));
  EXPECT_EQ(snap->Layer(1), layer0);
  EXPECT_EQ(snap->Layers(), 2u);
}

TEST(LayerCaches, LayerSnapshotIndexOutOfRangeIsAnError) {
  LayerCaches caches = LayerCaches::Interleaved(2, 2, 8, 2);
  Decode(caches, 0, 3);
  auto snap = caches.Snapshot(0);
  const Snapshot* layer1 = snap->Layer(1);
  EXPECT_THAT(ErrorOf([&] { (void)snap->Layer(2); }),
              testing::HasSubstr("[LayerSnapshot::Layer] layer 2 is out of range for 2 layers"));
  EXPECT_EQ(snap->Layers(), 2u);
  EXPECT_EQ(snap->Layer(1), layer1);
}

}  // namespace
}  // namespace ringkv
