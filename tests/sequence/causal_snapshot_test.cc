// Sequence snapshots and saved states of CausalCache: sharing blocks (no K/V
// copy), restoring into the same cache or another of the same layout, and a
// saved state putting back exactly what was held.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "ringkv/causal_cache.h"
#include "sequence/sequence_test_util.h"

namespace ringkv {
namespace {

using test::ExpectVisibility;
using test::Forward;
using test::Iota;
using test::SeenBy;
using test::Span;
using test::Token;

TEST(CausalCacheTest, SnapshotAndRestoreSequenceShareBlocks) {
  CausalCache cache(test::SmallOptions());
  Forward(cache, Span(0, 0, 10));
  const std::unique_ptr<SequenceSnapshot> all = cache.SnapshotSequence(0);
  const std::unique_ptr<SequenceSnapshot> head = cache.SnapshotSequence(0, 6);
  EXPECT_EQ(all->Tokens(), 10);
  EXPECT_EQ(head->Tokens(), 6);
  EXPECT_EQ(head->Positions(), Iota(0, 6));
  EXPECT_EQ(head->Size(), 6 * cache.BytesPerBlock() / 4);
  cache.Remove(0, 0, kEndOfSequence);
  EXPECT_EQ(cache.UsedBlocks(), 3);  // the snapshots keep the blocks
  cache.RestoreSequence(3, *head);
  EXPECT_EQ(cache.UsedBlocks(), 3);  // no copy
  Forward(cache, {{3, 6}});
  std::vector<Token> want = Span(0, 0, 6);
  want.emplace_back(3, 6);
  EXPECT_EQ(SeenBy(cache.Get(1), 0, 1), want);
  EXPECT_EQ(cache.UsedBlocks(), 4);  // the partly shared block is not written into
}

TEST(CausalCacheTest, RestoreSequenceFromAnotherCacheCopies) {
  CausalCache a(test::SmallOptions());
  CausalCache b(test::SmallOptions());
  Forward(a, Span(0, 0, 7));
  const std::unique_ptr<SequenceSnapshot> snapshot = a.SnapshotSequence(0);
  Forward(b, Span(0, 0, 1));
  b.RestoreSequence(1, *snapshot);
  EXPECT_EQ(b.UsedBlocks(), 3);
  Forward(b, {{1, 7}});
  std::vector<Token> want = Span(0, 0, 7);
  want.emplace_back(1, 7);
  EXPECT_EQ(SeenBy(b.Get(1), 0, 1), want);
}

TEST(CausalCacheTest, SaveStateRestoresExactly) {
  CausalCacheOptions o = test::SmallOptions();
  o.shift = [](const ShiftRequest&) {};  // keys left as they are: the restore undoes it all
  CausalCache cache(o);
  Forward(cache, Span(0, 0, 6));
  Forward(cache, Span(1, 0, 3));
  const std::unique_ptr<SequenceCache::State> state = cache.SaveState();
  const std::int64_t used = cache.UsedBlocks();
  Forward(cache, {{0, 6}, {1, 3}, {2, 0}});
  cache.CopyPrefix(0, 3, 4);
  cache.Remove(0, 1, 3);
  cache.Remove(1, 0, kEndOfSequence);
  cache.RestoreState(*state);
  EXPECT_EQ(cache.Sequences(), (std::vector<SequenceId>{0, 1}));
  EXPECT_EQ(cache.SequencePositions(0), Iota(0, 6));
  EXPECT_EQ(cache.SequencePositions(1), Iota(0, 3));
  EXPECT_EQ(cache.UsedBlocks(), used);  // what was made since is released
  const std::vector<Token> pass{{0, 6}, {1, 3}};
  Forward(cache, pass);
  ExpectVisibility(cache, pass, {});
}

}  // namespace
}  // namespace ringkv
