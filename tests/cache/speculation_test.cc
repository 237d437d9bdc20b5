// Speculation: commit of 0, some and all drafted tokens on both cache kinds,
// before and after the ring wraps; the isolated mode leaves the live caches
// bit-identical; an abandoned speculation rolls every layer back; Commit's edge
// cases (huge n, a second Commit, uneven drafts).
#include "ringkv/speculation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <random>
#include <stdexcept>

#include "cache_test_util.h"
#include "kv_access.h"
#include "ringkv/attention.h"
#include "ringkv/error.h"
#include "ringkv/kv_cache.h"
#include "ringkv/layer_caches.h"
#include "ringkv/rotating_kv_cache.h"

namespace ringkv {
namespace {

using test::Positions;
using test::Range;
using test::Tokens;

void Feed(AttentionCache& cache, int first, int count) {
  for (int p = first; p < first + count; ++p) {
    const auto [k, v] = Tokens(p, 1);
    cache.Update(k, v);
  }
}

// Every bit of a cache's live state.
struct Bits {
  int offset;
  std::vector<float> keys, values;
  explicit Bits(const Cache& cache) : offset(cache.Offset()) {
    const KvView state = cache.State();
    if (!state.Empty()) {
      keys = state.ConcatKeys().ToVector();
      values = state.ConcatValues().ToVector();
    }
  }
  bool operator==(const Bits&) const = default;
};

TEST(Speculation, KVCacheCommitKeepsTheAcceptedPrefix) {
  for (int accepted : {0, 2, 4, 9, -1}) {
    KVCache cache(3);
    Feed(cache, 0, 5);
    AttentionCache* caches[] = {&cache};
    Speculation spec = BeginSpeculation(caches);
    AttentionCache& layer = *spec.Caches()[0];
    const auto [k, v] = Tokens(5, 4);  // four drafted tokens in one forward
    const KVHistory history = layer.Update(k, v);
    EXPECT_EQ(Positions(history.Kv()), Range(0, 9));  // written through
    EXPECT_EQ(layer.Offset(), 9);
    spec.Commit(accepted);
    const int expected = 5 + std::clamp(accepted, 0, 4);
    EXPECT_EQ(cache.Offset(), expected);
    EXPECT_EQ(Positions(cache.State()), Range(0, expected));
  }
}

TEST(Speculation, RotatingCacheIsUntouchedUntilCommit) {
  for (int max_size : {4, 6}) {
    for (int before : {2, 3, 9}) {  // before and after the ring wraps
      for (int accepted : {0, 1, 2, 3}) {
        SCOPED_TRACE(testing::Message()
                     << "max " << max_size << " before " << before << " accepted " << accepted);
        RotatingKVCache cache(max_size, 2);
        RotatingKVCache expected(max_size, 2);
        Feed(cache, 0, before);
        Feed(expected, 0, before);
        AttentionCache* caches[] = {&cache};
        Speculation spec = BeginSpeculation(caches);
        const Bits live(cache);
        const auto [k, v] = Tokens(before, 3);
        const KVHistory history = spec.Caches()[0]->Update(k, v);
        EXPECT_TRUE(Bits(cache) == live);  // not mutated by the forward
        // Logical order: the last max_size - 1 live tokens, then the drafts.
        const int kept = std::min(before, max_size - 1);
        EXPECT_EQ(Positions(history.Kv()), Range(before - kept, before + 3));
        EXPECT_EQ(detail::KvAccess::Applier(history).kind,
                  detail::MaskApplier::Kind::kLogicalSliding);
        spec.Commit(accepted);
        // Same as appending the accepted tokens through the normal write path.
        if (accepted > 0) {
          const auto [ek, ev] = Tokens(before, accepted);
          expected.Update(ek, ev);
        }
        EXPECT_TRUE(Bits(cache) == Bits(expected));
        EXPECT_EQ(cache.RingIndex(), expected.RingIndex());
        EXPECT_EQ(Positions(cache.View().Kv()), Positions(expected.View().Kv()));
      }
    }
  }
}

TEST(Speculation, IsolatedModeNeverMutates) {
  KVCache plain(3);
  RotatingKVCache ring(4, 2);
  Feed(plain, 0, 7);
  Feed(ring, 0, 7);
  const Bits plain_before(plain), ring_before(ring);
  const int ring_idx = ring.RingIndex();
  AttentionCache* caches[] = {&plain, nullptr, &ring};
  auto wrappers = BeginIsolatedSpeculation(caches);
  ASSERT_EQ(wrappers.size(), 3u);
  EXPECT_EQ(wrappers[1], nullptr);
  const auto [k, v] = Tokens(7, 2);
  EXPECT_EQ(Positions(wrappers[0]->Update(k, v).Kv()), Range(0, 9));
  EXPECT_EQ(Positions(wrappers[2]->Update(k, v).Kv()), Range(4, 9));
  Feed(*wrappers[0], 9, 1);
  Feed(*wrappers[2], 9, 1);
  EXPECT_EQ(Positions(wrappers[0]->State()), Range(0, 10));
  EXPECT_EQ(Positions(wrappers[2]->State()), Range(4, 10));
  EXPECT_EQ(wrappers[0]->Offset(), 10);
  EXPECT_TRUE(Bits(plain) == plain_before);
  EXPECT_TRUE(Bits(ring) == ring_before);
  EXPECT_EQ(ring.RingIndex(), ring_idx);
  // State management is off on wrappers, as in the reference.
  EXPECT_EQ(wrappers[0]->Snapshot(0), nullptr);
  EXPECT_FALSE(wrappers[0]->Restore(nullptr, 0));
}

TEST(Speculation, RejectsUnknownKindsAndBadDrafts) {
  KVCache plain(3);
  Feed(plain, 0, 2);
  auto isolated = BeginIsolatedSpeculation(std::vector<AttentionCache*>{&plain});
  AttentionCache* nested[] = {isolated[0].get()};
  EXPECT_THROW(BeginSpeculation(nested), Error);
  RotatingKVCache ring(4);
  Feed(ring, 0, 2);
  AttentionCache* caches[] = {&ring};
  Speculation spec = BeginSpeculation(caches);
  const auto bad = Tokens(2, 1, test::Dims{2, 16, 4, DType::kF32});
  EXPECT_THROW(spec.Caches()[0]->Update(bad.first, bad.second), ShapeError);
  EXPECT_EQ(spec.Caches()[0]->Offset(), 2);
}

// The speculative rotating history, attended in logical order with its
// sliding applier, equals attention over the whole sequence.
TEST(Speculation, RotatingDraftAttentionParity) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist;
  const auto random = [&](const Shape& shape) {
    std::vector<float> x(static_cast<std::size_t>(shape.NumElements()));
    for (float& e : x) e = dist(rng);
    return Tensor::FromVector(x, shape);
  };
  Context ctx(1);
  const Tensor keys = random({1, 2, 20, 16}), values = random({1, 2, 20, 8});
  RotatingKVCache cache(5, 2);
  for (std::int64_t p = 0; p < 13; ++p) {
    cache.Update(keys.Slice(2, p, p + 1), values.Slice(2, p, p + 1));
  }
  AttentionCache* caches[] = {&cache};
  Speculation spec = BeginSpeculation(caches);
  const KVHistory history =
      spec.Caches()[0]->Update(keys.Slice(2, 13, 17), values.Slice(2, 13, 17));
  const Tensor q = random({1, 4, 4, 16});
  const Tensor got = Attention(q, history, AttentionMask::Causal(), 0.25f, ctx);
  const Tensor want = ScaledDotProductAttention(q, keys.Slice(2, 0, 17), values.Slice(2, 0, 17),
                                                AttentionMask::SlidingWindow(5), 0.25f, ctx);
  const auto a = got.ToVector(), b = want.ToVector();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5);
}

}  // namespace
}  // namespace ringkv

namespace ringkv {
namespace {

// Everything observable about a stack: per layer its offset, every stored bit,
// the ring cursor and the bytes held.
struct StackState {
  std::vector<int> offsets;
  std::vector<std::vector<float>> keys, values;
  std::vector<int> ring_indices;
  std::vector<std::size_t> bytes;
  explicit StackState(const LayerCaches& caches) {
    for (std::size_t i = 0; i < caches.Size(); ++i) {
      const Cache& layer = caches[i];
      offsets.push_back(layer.Offset());
      const Bits bits(layer);
      keys.push_back(bits.keys);
      values.push_back(bits.values);
      if (const auto* ring = dynamic_cast<const RotatingKVCache*>(&layer)) {
        ring_indices.push_back(ring->RingIndex());
        bytes.push_back(ring->AllocatedBytes());
      } else {
        ring_indices.push_back(-1);
        bytes.push_back(dynamic_cast<const KVCache&>(layer).AllocatedBytes());
      }
    }
  }
  bool operator==(const StackState&) const = default;
};

// ring(4), full, ring(4), full with blocks of 2, after `tokens` decode steps.
LayerCaches MixedStack(int tokens) {
  LayerCaches caches = LayerCaches::Interleaved(4, 2, 4, 2);
  for (std::size_t i = 0; i < caches.Size(); ++i) Feed(caches[i], 0, tokens);
  return caches;
}

// Drafts positions [first, first + count) into the wrappers of layers [0, layers).
void Draft(const Speculation& spec, std::size_t layers, int first, int count) {
  const auto [k, v] = Tokens(first, count);
  for (std::size_t i = 0; i < layers; ++i) spec.Caches()[i]->Update(k, v);
}

TEST(Speculation, AbandonedSpeculationRollsEveryLayerBack) {
  for (int before : {3, 6}) {  // before and after the rings wrap
    for (int count : {1, 3}) {
      SCOPED_TRACE(testing::Message() << "before " << before << " drafted " << count);
      LayerCaches caches = MixedStack(before);
      const StackState start(caches);
      {
        const std::vector<AttentionCache*> layers = caches.Caches();
        Speculation spec = BeginSpeculation(layers);
        Draft(spec, caches.Size(), before, count);
        EXPECT_EQ(caches[1].Offset(), before + count);  // the full layers wrote through
      }                                                 // no Commit
      EXPECT_TRUE(StackState(caches) == start);
      // The stack goes on exactly like one that never speculated.
      LayerCaches expected = MixedStack(before + 2);
      for (std::size_t i = 0; i < caches.Size(); ++i) Feed(caches[i], before, 2);
      EXPECT_TRUE(StackState(caches) == StackState(expected));
    }
  }
}

TEST(Speculation, AnExceptionInTheForwardRollsEveryLayerBack) {
  LayerCaches caches = MixedStack(6);
  const StackState start(caches);
  const std::vector<AttentionCache*> layers = caches.Caches();
  const auto forward = [&] {
    Speculation spec = BeginSpeculation(layers);
    const auto [k, v] = Tokens(6, 3);
    for (std::size_t i = 0; i < layers.size(); ++i) {
      if (i == 3) throw std::runtime_error("the model failed in layer 3");
      spec.Caches()[i]->Update(k, v);
    }
    spec.Commit(2);
  };
  EXPECT_THROW(forward(), std::runtime_error);
  EXPECT_TRUE(StackState(caches) == start);
}

TEST(Speculation, MoveAssigningOverAnOpenSpeculationRollsItBack) {
  LayerCaches caches = MixedStack(5);
  const StackState start(caches);
  const std::vector<AttentionCache*> layers = caches.Caches();
  Speculation spec = BeginSpeculation(layers);
  Draft(spec, layers.size(), 5, 2);
  spec = BeginSpeculation(std::vector<AttentionCache*>{});  // ends the first one
  EXPECT_TRUE(StackState(caches) == start);
  Speculation moved = BeginSpeculation(layers);
  Draft(moved, layers.size(), 5, 2);
  Speculation target = std::move(moved);  // the moved-from object no longer owns it
  target.Commit(1);
  EXPECT_EQ(caches.Offsets(), std::vector<int>(4, 6));
}

TEST(Speculation, CommitClampsHugeCountsWithoutOverflow) {
  for (int n : {INT_MAX, INT_MAX - 1, 3, 100}) {
    SCOPED_TRACE(n);
    LayerCaches caches = MixedStack(6);
    LayerCaches expected = MixedStack(6);  // + the three tokens in one Update (the concat path)
    const auto [k, v] = Tokens(6, 3);
    for (std::size_t i = 0; i < expected.Size(); ++i) expected[i].Update(k, v);
    const std::vector<AttentionCache*> layers = caches.Caches();
    Speculation spec = BeginSpeculation(layers);
    Draft(spec, layers.size(), 6, 3);
    spec.Commit(n);  // all three drafted tokens
    EXPECT_EQ(caches.Offsets(), std::vector<int>(4, 9));
    EXPECT_TRUE(StackState(caches) == StackState(expected));
  }
  for (int n : {INT_MIN, -1, 0}) {
    SCOPED_TRACE(n);
    LayerCaches caches = MixedStack(6);
    const StackState start(caches);
    const std::vector<AttentionCache*> layers = caches.Caches();
    Speculation spec = BeginSpeculation(layers);
    Draft(spec, layers.size(), 6, 3);
    spec.Commit(n);  // none
    EXPECT_TRUE(StackState(caches) == start);
  }
}

TEST(Speculation, ASecondCommitThrowsAndChangesNothing) {
  LayerCaches caches = MixedStack(6);
  const std::vector<AttentionCache*> layers = caches.Caches();
  Speculation spec = BeginSpeculation(layers);
  Draft(spec, layers.size(), 6, 3);
  spec.Commit(2);
  const StackState committed(caches);
  EXPECT_EQ(committed.offsets, std::vector<int>(4, 8));
  try {
    spec.Commit(2);
    ADD_FAILURE() << "a second Commit did not throw";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("[Speculation::Commit] the speculation was already "
                                             "committed"));
  }
  EXPECT_TRUE(StackState(caches) == committed);
  // The wrappers are closed too: a late draft must not reach the live caches.
  const auto [k, v] = Tokens(8, 1);
  for (AttentionCache* wrapper : spec.Caches()) {
    EXPECT_THROW(wrapper->Update(k, v), Error);
  }
  EXPECT_TRUE(StackState(caches) == committed);
  Speculation moved = std::move(spec);
  EXPECT_THROW(spec.Commit(0), Error);  // NOLINT(bugprone-use-after-move): defined to throw
}

TEST(Speculation, CommitRejectsLayersThatDraftedDifferentCounts) {
  LayerCaches caches = MixedStack(6);
  const StackState start(caches);
  const std::vector<AttentionCache*> layers = caches.Caches();
  Speculation spec = BeginSpeculation(layers);
  Draft(spec, 2, 6, 3);  // a forward that stopped after layer 1
  try {
    spec.Commit(2);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("drafted tokens per layer [3, 3, 0, 0]"));
  }
  EXPECT_EQ(caches.Offsets(), (std::vector<int>{6, 9, 6, 6}));  // nothing committed yet
  spec = BeginSpeculation(std::vector<AttentionCache*>{});      // abandoned: rolled back
  EXPECT_TRUE(StackState(caches) == start);
}

TEST(Speculation, BeginRejectsCachesAtDifferentOffsets) {
  LayerCaches caches = MixedStack(6);
  Feed(caches[1], 6, 1);  // only one layer moves on
  const StackState before(caches);
  try {
    (void)BeginSpeculation(caches.Caches());
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("[BeginSpeculation] the caches are at different "
                                             "offsets: [6, 7, 6, 6]"));
  }
  try {
    (void)BeginIsolatedSpeculation(caches.Caches());
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("[BeginIsolatedSpeculation] the caches are at "
                                             "different offsets: [6, 7, 6, 6]"));
  }
  EXPECT_TRUE(StackState(caches) == before);
}

}  // namespace
}  // namespace ringkv
