// Rewinding live state by name: Cache::CanRewind / Rewind / Trim on every cache
// kind, the speculation wrappers and LayerCaches. Hand-worked cases, a property
// test against the reference's rules and a fresh cache fed the same first
// tokens, and bad input (throws, nothing changed).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cache_test_util.h"
#include "ringkv/error.h"
#include "ringkv/kv_cache.h"
#include "ringkv/layer_caches.h"
#include "ringkv/rotating_kv_cache.h"
#include "ringkv/speculation.h"

namespace ringkv {
namespace {

using test::ErrorOf;

using test::Positions;
using test::Range;
using test::Tokens;

KVHistory Chunk(AttentionCache& cache, int first, int count) {
  const auto [k, v] = Tokens(first, count);
  return cache.Update(k, v);
}

void Feed(AttentionCache& cache, int first, int count) {
  for (int p = first; p < first + count; ++p) (void)Chunk(cache, p, 1);
}

// Every bit of a cache's live state (positions are checked element by element).
struct Held {
  int offset;
  std::vector<int> state;
  explicit Held(const Cache& cache) : offset(cache.Offset()), state(Positions(cache.State())) {}
  bool operator==(const Held&) const = default;
};

// A ring's state, including its cursor and buffer.
struct RingHeld {
  Held held;
  int ring_index;
  std::int64_t buffer;
  explicit RingHeld(const RotatingKVCache& c)
      : held(c), ring_index(c.RingIndex()), buffer(c.BufferLength()) {}
  bool operator==(const RingHeld&) const = default;
};

TEST(Rewind, KVCacheRewindsToAnyEarlierOffset) {
  KVCache cache(2);
  Feed(cache, 0, 5);
  for (int t = 0; t <= 5; ++t) EXPECT_TRUE(cache.CanRewind(t)) << t;
  EXPECT_FALSE(cache.CanRewind(6));
  EXPECT_FALSE(cache.Rewind(6));
  EXPECT_EQ(Positions(cache.State()), Range(0, 5));

  EXPECT_TRUE(cache.Rewind(3));
  EXPECT_EQ(cache.Offset(), 3);
  EXPECT_EQ(Positions(cache.State()), Range(0, 3));
  EXPECT_EQ(Positions(Chunk(cache, 3, 2).Kv()), Range(0, 5));  // appends after the rewind

  EXPECT_EQ(cache.Trim(1), 1);
  EXPECT_EQ(Positions(cache.State()), Range(0, 4));
  EXPECT_EQ(cache.Trim(0), 0);
  EXPECT_EQ(cache.Offset(), 4);
  EXPECT_EQ(cache.Trim(10), 4);  // up to n: everything there is
  EXPECT_EQ(cache.Offset(), 0);
  EXPECT_EQ(cache.Trim(3), 0);
  EXPECT_TRUE(cache.CanRewind(0));
  EXPECT_TRUE(cache.Rewind(0));
}

TEST(Rewind, RotatingRewindsBeforeTheRingWraps) {
  RotatingKVCache cache(4, 2);
  Feed(cache, 0, 3);
  for (int t = 0; t <= 3; ++t) EXPECT_TRUE(cache.CanRewind(t)) << t;
  EXPECT_FALSE(cache.CanRewind(4));
  EXPECT_TRUE(cache.Rewind(1));
  EXPECT_EQ(cache.Offset(), 1);
  EXPECT_EQ(cache.RingIndex(), 1);
  EXPECT_EQ(Positions(cache.State()), Range(0, 1));
  // Re-decoding after the rewind overwrites the old slots and wraps as usual.
  Feed(cache, 1, 5);  // positions 1..5
  EXPECT_EQ(Positions(cache.View().Kv()), Range(3, 6));
  EXPECT_EQ(Positions(cache.State()), (std::vector<int>{4, 5, 2, 3}));
}

TEST(Rewind, RotatingAtExactlyTheWindowStillRewinds) {
  // mlx-lm stops at offset < max_size; at offset == max_size nothing was dropped.
  RotatingKVCache cache(4, 2);
  Feed(cache, 0, 4);
  EXPECT_TRUE(cache.CanRewind(2));
  EXPECT_EQ(cache.Trim(2), 2);
  EXPECT_EQ(Positions(cache.State()), Range(0, 2));
  EXPECT_EQ(Positions(Chunk(cache, 2, 3).Kv()), Range(0, 5));  // a prefill after it
}

TEST(Rewind, RotatingRefusesOnceTheRingHasWrapped) {
  RotatingKVCache cache(4, 2);
  Feed(cache, 0, 6);  // slots [4 5 2 3], idx 2
  const RingHeld before(cache);
  ASSERT_EQ(before.ring_index, 2);
  const KVHistory view = cache.View();
  for (int t = 0; t < 6; ++t) {
    EXPECT_FALSE(cache.CanRewind(t)) << t;
    EXPECT_FALSE(cache.Rewind(t)) << t;
  }
  EXPECT_FALSE(cache.CanRewind(7));
  EXPECT_EQ(cache.Trim(1), 0);
  EXPECT_EQ(cache.Trim(100), 0);
  EXPECT_EQ(RingHeld(cache), before);
  EXPECT_EQ(Positions(view.Kv()), Range(3, 6));  // refusals keep views valid
  // To the offset itself: allowed, and the cursor stays where the ring is.
  EXPECT_TRUE(cache.CanRewind(6));
  EXPECT_TRUE(cache.Rewind(6));
  EXPECT_EQ(cache.Trim(0), 0);
  EXPECT_EQ(RingHeld(cache), before);
  Feed(cache, 6, 1);
  EXPECT_EQ(Positions(cache.State()), (std::vector<int>{4, 5, 6, 3}));
}

TEST(Rewind, RotatingRefusesAfterAPrefillPastTheWindow) {
  {
    RotatingKVCache cache(4, 2);
    (void)Chunk(cache, 0, 6);  // one prefill: 6 slots, offset 6
    const RingHeld before(cache);
    ASSERT_EQ(before.buffer, 6);
    EXPECT_FALSE(cache.CanRewind(5));
    EXPECT_FALSE(cache.Rewind(0));
    EXPECT_EQ(cache.Trim(2), 0);
    EXPECT_EQ(RingHeld(cache), before);
  }
  {
    RotatingKVCache cache(4, 2);
    (void)Chunk(cache, 0, 3);
    EXPECT_TRUE(cache.CanRewind(1));
    (void)Chunk(cache, 3, 2);  // offset 5 > 4: the window has moved
    EXPECT_FALSE(cache.CanRewind(4));
    EXPECT_EQ(cache.Trim(1), 0);
    EXPECT_EQ(cache.Offset(), 5);
  }
  {
    RotatingKVCache cache(4, 2);
    (void)Chunk(cache, 0, 4);  // a prefill up to the window: still exact
    EXPECT_EQ(cache.Trim(3), 3);
    EXPECT_EQ(Positions(cache.State()), Range(0, 1));
    // The next prefill drops the stale slots past the cursor.
    EXPECT_EQ(Positions(Chunk(cache, 1, 5).Kv()), Range(0, 6));
  }
}

TEST(Rewind, SpeculationWrappersNeverRewind) {
  KVCache plain(4);
  RotatingKVCache ring(4, 2);
  Feed(plain, 0, 3);
  Feed(ring, 0, 3);
  const Held plain_before(plain);
  const RingHeld ring_before(ring);
  AttentionCache* caches[] = {&plain, &ring};
  {
    Speculation spec = BeginSpeculation(caches);
    for (AttentionCache* layer : spec.Caches()) {
      for (int t = 0; t <= 4; ++t) {
        EXPECT_FALSE(layer->CanRewind(t)) << t;
        EXPECT_FALSE(layer->Rewind(t)) << t;
      }
      EXPECT_EQ(layer->Trim(0), 0);
      EXPECT_EQ(layer->Trim(2), 0);
      EXPECT_EQ(layer->Offset(), 3);
    }
  }
  EXPECT_EQ(Held(plain), plain_before);
  EXPECT_EQ(RingHeld(ring), ring_before);
}

// A wrapper keeps the Cache contract: a negative target is an error, not false.
TEST(Rewind, SpeculativeWrapperRestoreRejectsANegativeTarget) {
  KVCache plain(4);
  RotatingKVCache ring(4, 2);
  Feed(plain, 0, 3);
  Feed(ring, 0, 3);
  AttentionCache* caches[] = {&plain, &ring};
  Speculation spec = BeginSpeculation(caches);
  for (AttentionCache* layer : spec.Caches()) {
    EXPECT_THROW((void)layer->Restore(nullptr, -1), Error);
    EXPECT_THROW((void)layer->CanRewind(-1), Error);
    EXPECT_THROW((void)layer->Rewind(-1), Error);
    EXPECT_THROW((void)layer->Trim(-1), Error);
  }
  EXPECT_EQ(plain.Offset(), 3);
  EXPECT_EQ(ring.Offset(), 3);
}

TEST(Rewind, NegativeTargetOrCountThrowsAndChangesNothing) {
  KVCache plain(2);
  RotatingKVCache ring(4, 2);
  Feed(plain, 0, 3);
  Feed(ring, 0, 3);
  for (AttentionCache* cache : std::vector<AttentionCache*>{&plain, &ring}) {
    const Held before(*cache);
    const KVHistory view = Chunk(*cache, 3, 1);
    const Held after_update(*cache);
    EXPECT_THAT(ErrorOf([&] { (void)cache->CanRewind(-1); }),
                testing::HasSubstr("[Cache::CanRewind] target -1 is negative"));
    EXPECT_THAT(ErrorOf([&] { (void)cache->Rewind(-2); }),
                testing::HasSubstr("[Cache::Rewind] target -2 is negative"));
    EXPECT_THAT(ErrorOf([&] { (void)cache->Trim(-3); }),
                testing::HasSubstr("[Cache::Trim] n -3 is negative"));
    EXPECT_EQ(Held(*cache), after_update);
    EXPECT_EQ(Positions(view.Kv()), Range(0, 4));  // the view is not stale either
    ASSERT_TRUE(cache->Rewind(before.offset));
    EXPECT_EQ(Held(*cache), before);
  }
}

// Feeds `chunks` (token counts, in order) but stops after `limit` tokens.
template <class C>
void FeedChunks(C& cache, const std::vector<int>& chunks, int limit) {
  int fed = 0;
  for (int count : chunks) {
    const int take = std::min(count, limit - fed);
    if (take <= 0) break;
    (void)Chunk(cache, fed, take);
    fed += take;
  }
}

int Pick(std::mt19937& rng, int n) {
  return static_cast<int>(rng() % static_cast<std::uint32_t>(n));
}

// The reference's live-rewind rule, written out independently.
bool Expected(int offset, int target, std::optional<int> window) {
  if (target > offset) return false;
  return !window.has_value() || target == offset || offset <= *window;
}

// For random histories and every target in [0, Offset() + 2]: CanRewind agrees
// with Restore(nullptr, t) on a fork and with the rule; a successful rewind
// leaves exactly what a fresh cache fed the first t tokens holds, and both then
// behave the same on further updates; Trim removes min(n, Offset()) or nothing.
template <class C, class Make>
void CheckRandomHistories(std::optional<int> window_of_round(std::mt19937&), Make make) {
  std::mt19937 rng(2024);
  int rewound_below = 0;  // coverage: rewinds to t < Offset() that succeeded
  int refused_below = 0;
  bool windowed = false;
  for (int round = 0; round < 150; ++round) {
    const std::optional<int> window = window_of_round(rng);
    windowed = window.has_value();
    const int block = 1 + Pick(rng, 4);
    const int span = window.value_or(6);
    std::vector<int> chunks;
    C cache = make(window, block);
    // Decodes and prefills up to `length` tokens: within the window in about
    // half of the rounds, past it (wrapped, or grown by a prefill) in the rest.
    const int length = 1 + Pick(rng, Pick(rng, 2) == 0 ? span : 3 * span);
    while (cache.Offset() < length) {
      const int wanted = Pick(rng, 2) == 0 ? 1 : 2 + Pick(rng, span + 1);
      const int count = std::min(wanted, length - cache.Offset());
      (void)Chunk(cache, cache.Offset(), count);
      chunks.push_back(count);
    }
    const int offset = cache.Offset();
    for (int t = 0; t <= offset + 2; ++t) {
      SCOPED_TRACE(testing::Message()
                   << "round " << round << " window " << window.value_or(-1) << " block " << block
                   << " offset " << offset << " target " << t);
      const bool can = cache.CanRewind(t);
      EXPECT_EQ(can, Expected(offset, t, window));
      C restored = cache.Fork();
      EXPECT_EQ(restored.Restore(nullptr, t), can);
      C rewound = cache.Fork();
      const Held before(rewound);
      ASSERT_EQ(rewound.Rewind(t), can);
      if (!can) {
        EXPECT_EQ(Held(rewound), before);
        refused_below += t < offset ? 1 : 0;
        continue;
      }
      rewound_below += t < offset ? 1 : 0;
      C fresh = make(window, block);
      FeedChunks(fresh, chunks, t);
      ASSERT_EQ(rewound.Offset(), t);
      EXPECT_EQ(Positions(rewound.State()), Positions(fresh.State()));
      EXPECT_EQ(Positions(rewound.View().Kv()), Positions(fresh.View().Kv()));
      // Below the offset nothing had been dropped: the first t tokens, in order.
      EXPECT_EQ(Positions(rewound.State()), t < offset ? Range(0, t) : Positions(cache.State()));
      // Both continue alike: a decode, a prefill, a decode.
      for (const int count : {1, 2 + Pick(rng, span + 1), 1}) {
        const int first = rewound.Offset();
        EXPECT_EQ(Positions(Chunk(rewound, first, count).Kv()),
                  Positions(Chunk(fresh, first, count).Kv()));
        EXPECT_EQ(Positions(rewound.View().Kv()), Positions(fresh.View().Kv()));
      }
    }
    for (int n = 0; n <= offset + 2; ++n) {
      C trimmed = cache.Fork();
      const int removed = std::min(n, offset);
      const int expected = Expected(offset, offset - removed, window) ? removed : 0;
      EXPECT_EQ(trimmed.Trim(n), expected) << "round " << round << " n " << n;
      EXPECT_EQ(trimmed.Offset(), offset - expected);
    }
  }
  std::printf("rewound below the offset %d times, refused %d\n", rewound_below, refused_below);
  EXPECT_GE(rewound_below, 100);
  if (windowed) {
    EXPECT_GE(refused_below, 100);
  }
}

std::optional<int> NoWindow(std::mt19937& /*rng*/) { return std::nullopt; }
std::optional<int> SomeWindow(std::mt19937& rng) { return 1 + Pick(rng, 8); }

TEST(RewindProperty, KVCacheMatchesAFreshCache) {
  CheckRandomHistories<KVCache>(NoWindow,
                                [](std::optional<int>, int block) { return KVCache(block); });
}

TEST(RewindProperty, RotatingMatchesAFreshCache) {
  CheckRandomHistories<RotatingKVCache>(SomeWindow, [](std::optional<int> window, int block) {
    return RotatingKVCache(*window, block);
  });
}

// Positions per layer.
std::vector<std::vector<int>> AllPositions(const LayerCaches& caches) {
  std::vector<std::vector<int>> out;
  for (std::size_t i = 0; i < caches.Size(); ++i) out.push_back(Positions(caches[i].State()));
  return out;
}

void Decode(LayerCaches& caches, int first, int count) {
  for (int p = first; p < first + count; ++p) {
    for (std::size_t i = 0; i < caches.Size(); ++i) Feed(caches[i], p, 1);
  }
}

TEST(RewindLayers, AllLayersOrNone) {
  // Layers 0 and 1 slide over a window of 4, layer 2 is global.
  LayerCaches caches = LayerCaches::Interleaved(3, 3, 4, 2);
  Decode(caches, 0, 3);
  EXPECT_TRUE(caches.CanRewind(1));
  EXPECT_EQ(caches.Trim(2), 2);
  EXPECT_EQ(caches.Offsets(), (std::vector<int>{1, 1, 1}));
  Decode(caches, 1, 5);  // offset 6: the rings have wrapped
  const auto before = AllPositions(caches);
  const KvView view = caches[2].State();
  EXPECT_TRUE(caches[2].CanRewind(5));  // the global layer alone could
  EXPECT_FALSE(caches.CanRewind(5));
  EXPECT_FALSE(caches.Rewind(5));
  EXPECT_EQ(caches.Trim(1), 0);
  EXPECT_EQ(caches.Offsets(), (std::vector<int>{6, 6, 6}));
  EXPECT_EQ(AllPositions(caches), before);
  EXPECT_EQ(Positions(view), Range(0, 6));  // nothing was touched
  EXPECT_TRUE(caches.CanRewind(6));
  EXPECT_TRUE(caches.Rewind(6));
  EXPECT_EQ(caches.Trim(0), 0);
  EXPECT_EQ(AllPositions(caches), before);
  EXPECT_FALSE(caches.CanRewind(7));
}

TEST(RewindLayers, GlobalLayersTrimUpToN) {
  LayerCaches caches = LayerCaches::Interleaved(2, 1, 4, 2);  // both global
  Decode(caches, 0, 6);
  EXPECT_EQ(caches.Trim(4), 4);
  EXPECT_EQ(AllPositions(caches), (std::vector<std::vector<int>>{Range(0, 2), Range(0, 2)}));
  EXPECT_EQ(caches.Trim(9), 2);
  EXPECT_EQ(caches.Offset(), 0);
  LayerCaches none{std::vector<LayerCaches::Layer>{}};  // no layer refuses
  for (int t = 0; t < 3; ++t) EXPECT_EQ(none.CanRewind(t), none.Restore(nullptr, t)) << t;
  EXPECT_EQ(none.Trim(3), 0);
}

TEST(RewindLayers, DivergedLayers) {
  LayerCaches caches = LayerCaches::Interleaved(2, 2, 8, 2);
  Decode(caches, 0, 4);
  Feed(caches[0], 4, 1);  // a forward that stopped after layer 0
  const auto before = AllPositions(caches);
  // Trim counts from the common offset, so it needs one.
  EXPECT_THAT(
      ErrorOf([&] { (void)caches.Trim(1); }),
      testing::HasSubstr("[LayerCaches::Trim] the layers are at different offsets: [5, 4]"));
  EXPECT_EQ(AllPositions(caches), before);
  // Rewind, like Restore, is the way back.
  EXPECT_FALSE(caches.CanRewind(5));
  EXPECT_TRUE(caches.CanRewind(4));
  EXPECT_TRUE(caches.Rewind(4));
  EXPECT_EQ(caches.Offset(), 4);
  EXPECT_EQ(AllPositions(caches), (std::vector<std::vector<int>>{Range(0, 4), Range(0, 4)}));
}

TEST(RewindLayers, NegativeTargetOrCountThrowsAndChangesNothing) {
  LayerCaches caches = LayerCaches::Interleaved(2, 2, 8, 2);
  Decode(caches, 0, 3);
  const auto before = AllPositions(caches);
  EXPECT_THAT(ErrorOf([&] { (void)caches.CanRewind(-1); }),
              testing::HasSubstr("[LayerCaches::CanRewind] target -1 is negative"));
  EXPECT_THAT(ErrorOf([&] { (void)caches.Rewind(-1); }),
              testing::HasSubstr("[LayerCaches::Rewind] target -1 is negative"));
  EXPECT_THAT(ErrorOf([&] { (void)caches.Trim(-1); }),
              testing::HasSubstr("[LayerCaches::Trim] n -1 is negative"));
  EXPECT_EQ(AllPositions(caches), before);
  EXPECT_EQ(caches.Offset(), 3);
}

}  // namespace
}  // namespace ringkv
