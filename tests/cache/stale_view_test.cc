// Stale views: a KvView / KVHistory used after a mutating call on its cache (or
// after the cache is gone) throws ringkv::Error instead of reading freed or
// rewritten memory; non-mutating calls and failed calls leave it valid.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "cache_test_util.h"
#include "kv_access.h"
#include "ringkv/attention.h"
#include "ringkv/error.h"
#include "ringkv/kv_cache.h"
#include "ringkv/layer_caches.h"
#include "ringkv/rotating_kv_cache.h"
#include "ringkv/speculation.h"

namespace ringkv {
namespace {

using test::Positions;
using test::Range;
using test::Tokens;
using ::testing::HasSubstr;

template <class C>
void Decode(C& cache, int first, int count) {
  for (int p = first; p < first + count; ++p) {
    const auto [k, v] = Tokens(p, 1);
    cache.Update(k, v);
  }
}

// Every accessor of a stale view throws an Error that says so.
void ExpectStale(const KvView& view) {
  const std::vector<std::function<void()>> reads = {
      [&] { (void)view.Length(); },
      [&] { (void)view.Empty(); },
      [&] { (void)view.Dtype(); },
      [&] { (void)view.Heads(); },
      [&] { (void)view.KeyDim(); },
      [&] { (void)view.ValueDim(); },
      [&] { (void)view.KeySegments(); },
      [&] { (void)view.ValueSegments(); },
      [&] { (void)view.ConcatKeys(); },
      [&] { (void)view.ConcatValues(); },
      [&] { (void)detail::KvAccess::SegmentCount(view); },
  };
  for (std::size_t i = 0; i < reads.size(); ++i) {
    try {
      reads[i]();
      ADD_FAILURE() << "accessor " << i << " read a stale view";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("the view is stale")) << "accessor " << i;
    }
  }
}

void ExpectStale(const KVHistory& history) {
  ExpectStale(history.Kv());
  Context ctx(1);
  const Tensor q = Tensor::Zeros(DType::kF32, {1, 2, 1, 8});
  EXPECT_THROW(Attention(q, history, AttentionMask::Causal(), 1.0f, ctx), Error);
}

// A mutating call, applied to a cache that holds `tokens` decode steps.
template <class C>
struct Mutation {
  const char* name;
  std::function<void(C&)> apply;
};

template <class C>
void EveryMutationMakesViewsStale(const std::function<C()>& make, int tokens,
                                  const std::vector<Mutation<C>>& mutations) {
  for (const Mutation<C>& m : mutations) {
    SCOPED_TRACE(m.name);
    C cache = make();
    Decode(cache, 0, tokens);
    const KvView state = cache.State();
    const KVHistory view = cache.View();
    const auto [k, v] = Tokens(tokens, 1);
    const KVHistory history = cache.Update(k, v);
    const KvView after_update = cache.State();
    ExpectStale(state);  // the Update itself was a mutating call
    ExpectStale(view);
    m.apply(cache);
    ExpectStale(history);
    ExpectStale(after_update);
  }
}

TEST(StaleView, EveryMutatingCallOfAKVCache) {
  EveryMutationMakesViewsStale<KVCache>(
      [] { return KVCache(2); }, 5,
      {
          {"Update (decode)", [](KVCache& c) { Decode(c, 6, 1); }},
          {"Update (prefill)",
           [](KVCache& c) {
             const auto [k, v] = Tokens(6, 3);
             c.Update(k, v);
           }},
          {"Restore (rewind)", [](KVCache& c) { ASSERT_TRUE(c.Restore(nullptr, 3)); }},
          {"Restore (rewind to the offset)",
           [](KVCache& c) { ASSERT_TRUE(c.Restore(nullptr, 6)); }},
          {"Restore (snapshot)",
           [](KVCache& c) {
             const auto snap = c.Snapshot(2);
             ASSERT_TRUE(c.Restore(snap.get(), 4));
           }},
          {"Free", [](KVCache& c) { c.Free(); }},
          {"Swap",
           [](KVCache& c) {
             KVCache other(2);
             c.Swap(other);
           }},
          {"move-assigned over", [](KVCache& c) { c = KVCache(2); }},
          {"destroyed", [](KVCache& c) { std::optional<KVCache> gone(std::move(c)); }},
      });
}

TEST(StaleView, EveryMutatingCallOfARotatingKVCache) {
  EveryMutationMakesViewsStale<RotatingKVCache>(
      [] { return RotatingKVCache(4, 2); }, 3,
      {
          {"Update (decode)", [](RotatingKVCache& c) { Decode(c, 4, 1); }},
          {"Update (prefill)",
           [](RotatingKVCache& c) {
             const auto [k, v] = Tokens(4, 3);
             c.Update(k, v);
           }},
          {"Restore (rewind)", [](RotatingKVCache& c) { ASSERT_TRUE(c.Restore(nullptr, 2)); }},
          {"Restore (rewind to the offset)",
           [](RotatingKVCache& c) { ASSERT_TRUE(c.Restore(nullptr, 4)); }},
          {"Restore (snapshot)",
           [](RotatingKVCache& c) {
             const auto snap = c.Snapshot(0);
             ASSERT_TRUE(c.Restore(snap.get(), 4));
           }},
          {"Free", [](RotatingKVCache& c) { c.Free(); }},
          {"Swap",
           [](RotatingKVCache& c) {
             RotatingKVCache other(4, 2);
             c.Swap(other);
           }},
          {"move-assigned over", [](RotatingKVCache& c) { c = RotatingKVCache(4, 2); }},
          {"destroyed",
           [](RotatingKVCache& c) { std::optional<RotatingKVCache> gone(std::move(c)); }},
      });
}

// The case from the issue: a history held across LayerCaches::Restore, whose
// old blocks are freed when the forks are swapped in.
TEST(StaleView, HeldAcrossLayerCachesRestore) {
  LayerCaches caches = LayerCaches::Interleaved(2, 2, 4, 2);
  for (std::size_t i = 0; i < 2; ++i) Decode(caches[i], 0, 3);
  const auto snap = caches.Snapshot(0);
  std::vector<KVHistory> histories;
  const auto [k, v] = Tokens(3, 1);
  for (std::size_t i = 0; i < 2; ++i) histories.push_back(caches[i].Update(k, v));
  ASSERT_TRUE(caches.Restore(snap.get(), 3));
  for (const KVHistory& h : histories) ExpectStale(h);
  // A Restore that fails changes nothing, views included.
  std::vector<KvView> states;
  for (std::size_t i = 0; i < 2; ++i) states.push_back(caches[i].State());
  EXPECT_FALSE(caches.Restore(nullptr, 9));
  EXPECT_EQ(Positions(states[1]), Range(0, 3));
  caches.Free();
  for (const KvView& s : states) ExpectStale(s);
}

TEST(StaleView, SpeculationWrappers) {
  LayerCaches caches = LayerCaches::Interleaved(2, 2, 4, 2);  // ring(4), full
  for (std::size_t i = 0; i < 2; ++i) Decode(caches[i], 0, 5);
  const std::vector<AttentionCache*> layers = caches.Caches();
  std::vector<KvView> live;
  std::vector<KvView> first_drafts;
  {
    Speculation spec = BeginSpeculation(layers);
    for (std::size_t i = 0; i < 2; ++i) live.push_back(caches[i].State());
    const auto [k, v] = Tokens(5, 2);
    for (std::size_t i = 0; i < 2; ++i) first_drafts.push_back(spec.Caches()[i]->Update(k, v).Kv());
    // The ring's live window is untouched by a draft; the full layer wrote through.
    EXPECT_EQ(Positions(live[0]), (std::vector<int>{4, 1, 2, 3}));
    ExpectStale(live[1]);
    EXPECT_EQ(Positions(first_drafts[0]), Range(2, 7));
    const auto [k2, v2] = Tokens(7, 1);
    const KvView second = spec.Caches()[0]->Update(k2, v2).Kv();
    ExpectStale(first_drafts[0]);  // the wrapper's Update is a mutating call on it
    EXPECT_EQ(Positions(second), Range(2, 8));
    first_drafts[0] = second;
  }  // rolled back: the full layer rewinds, the ring's draft buffer is gone
  ExpectStale(first_drafts[0]);
  ExpectStale(first_drafts[1]);
  EXPECT_EQ(Positions(live[0]), (std::vector<int>{4, 1, 2, 3}));  // never touched
  Speculation spec = BeginSpeculation(layers);
  const auto [k, v] = Tokens(5, 1);
  for (std::size_t i = 0; i < 2; ++i) spec.Caches()[i]->Update(k, v);
  spec.Commit(1);
  ExpectStale(live[0]);  // Commit appended to the ring
}

// Calls that do not mutate the cache keep its views valid and current.
TEST(StaleView, NonMutatingCallsKeepViewsValid) {
  LayerCaches caches = LayerCaches::Interleaved(2, 2, 4, 2);  // ring(4), full
  for (std::size_t i = 0; i < 2; ++i) Decode(caches[i], 0, 6);
  auto& ring = dynamic_cast<RotatingKVCache&>(caches[0]);
  auto& full = dynamic_cast<KVCache&>(caches[1]);
  const KvView ring_state = ring.State();
  const KVHistory ring_view = ring.View();
  const KvView full_state = full.State();
  const auto [k, v] = Tokens(6, 1);
  auto snap = caches.Snapshot(0);
  auto single = full.Snapshot(2);
  auto [a, b] = full.Split(full.Snapshot(1), 4);
  auto merged = full.Merge(std::move(a), std::move(b));
  (void)caches.Merge(caches.Snapshot(2), nullptr);
  (void)caches.Offset();
  (void)caches.Offsets();
  RotatingKVCache ring_fork = ring.Fork();
  KVCache full_fork = full.Fork();
  ring_fork.Update(k, v);  // a fork's writes go to its own blocks
  full_fork.Update(k, v);
  auto isolated = BeginIsolatedSpeculation(caches.Caches());
  isolated[0]->Update(k, v);
  isolated[1]->Update(k, v);
  EXPECT_FALSE(full.Restore(nullptr, 9));  // a call that fails changes nothing
  EXPECT_THROW(full.Update(Tensor(), Tensor()), Error);
  EXPECT_THROW(full.Restore(nullptr, -1), Error);
  (void)ring.AllocatedBytes();
  (void)ring.View();
  {
    const auto gone = std::move(snap);  // releasing snapshots
  }
  EXPECT_EQ(Positions(ring_state), (std::vector<int>{4, 5, 2, 3}));
  EXPECT_EQ(Positions(ring_view.Kv()), Range(3, 6));
  EXPECT_EQ(Positions(full_state), Range(0, 6));
  // Moving the cache keeps its storage, and the view follows it.
  KVCache moved = std::move(full_fork);
  const KvView fork_state = moved.State();
  KVCache moved_again = std::move(moved);
  EXPECT_EQ(Positions(fork_state), Range(0, 7));
}

}  // namespace
}  // namespace ringkv
