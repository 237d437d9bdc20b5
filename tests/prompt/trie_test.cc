// The trie's behaviour on synthetic K/V: matches, splits, growth, holdback,
// eviction order, pinning, compaction through Merge and the byte accounting.
// Expected byte counts are tokens x kTokenBytes per layer (a KVCache span), and
// for a sliding layer the slots its ring held when the window was captured.
#include <gtest/gtest.h>

#include "prompt_test_util.h"
#include "ringkv/error.h"

namespace ringkv::test {
namespace {

constexpr std::size_t kLots = std::size_t{1} << 30;

// Two global layers: every offset is reachable, bytes are 2 x kTokenBytes per token.
LayerCaches Global() { return LayerCaches::Interleaved(2, 1, 4, 4); }
// Layer 0 sliding (window 4), layer 1 global.
LayerCaches Mixed() { return LayerCaches::Interleaved(2, 2, 4, 4); }

std::vector<int> Edge(const PromptNodeInfo& n) { return n.tokens; }

TEST(PromptTrie, ExactMatchIsHeldBackByOne) {
  LayerCaches caches = Global();
  PromptCache pc(caches, Options(kLots));
  const std::vector<int> a = Seq(1, 10);
  EXPECT_EQ(Serve(pc, caches, a).reused, 0);
  ASSERT_EQ(pc.Nodes().size(), 1u);
  EXPECT_EQ(pc.Nodes()[0].bytes, 10 * 2 * kTokenBytes);

  const PrefixMatch again = pc.Lookup(a);
  EXPECT_EQ(again.reused, 9);  // the last token is left to evaluate
  EXPECT_TRUE(again.checkpoints.empty());
  ExpectHolds(caches, std::span<const int>(a).first(9));
  FakeForward(caches, std::span<const int>(a).subspan(9));
  pc.Commit(a);
  ExpectBytes(pc);
  EXPECT_EQ(pc.Nodes().size(), 1u);
  const PromptCacheStats stats = pc.Stats();
  EXPECT_EQ(stats.lookups, 2);
  EXPECT_EQ(stats.hits, 1);
  EXPECT_EQ(stats.tokens_reused, 9);
  EXPECT_THROW(pc.Lookup({}), Error);
}

TEST(PromptTrie, DivergingMidEdgeSplitsTheEdge) {
  LayerCaches caches = Global();
  PromptCache pc(caches, Options(kLots));
  const std::vector<int> a = Seq(1, 10);
  const std::vector<int> b = Cat(Seq(1, 6), {50, 51, 52});
  Serve(pc, caches, a);
  EXPECT_EQ(Serve(pc, caches, b).reused, 6);
  const std::vector<PromptNodeInfo> nodes = pc.Nodes();
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(Edge(nodes[0]), Seq(1, 6));
  EXPECT_EQ(nodes[0].bytes, 6 * 2 * kTokenBytes);
  EXPECT_EQ(nodes[1].parent, 0);
  EXPECT_EQ(nodes[2].parent, 0);
  EXPECT_EQ(Edge(nodes[1]), Seq(7, 4));
  EXPECT_EQ(nodes[1].bytes, 4 * 2 * kTokenBytes);
  EXPECT_EQ(Edge(nodes[2]), (std::vector<int>{50, 51, 52}));
  EXPECT_EQ(nodes[2].bytes, 3 * 2 * kTokenBytes);
  EXPECT_TRUE(nodes[2].active);
  EXPECT_FALSE(nodes[1].active);
  EXPECT_EQ(pc.Stats().splits, 1);

  // Back to the first request through the split halves.
  EXPECT_EQ(pc.Lookup(Cat(a, {70})).reused, 10);
  ExpectHolds(caches, a);
  ExpectBytes(pc);
}

TEST(PromptTrie, DivergingAtTheFirstTokenAddsASibling) {
  LayerCaches caches = Global();
  PromptCache pc(caches, Options(kLots));
  Serve(pc, caches, Seq(1, 5));
  EXPECT_EQ(Serve(pc, caches, Seq(40, 5)).reused, 0);
  const std::vector<PromptNodeInfo> nodes = pc.Nodes();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].parent, -1);
  EXPECT_EQ(nodes[1].parent, -1);
  EXPECT_EQ(pc.Lookup(Seq(1, 7)).reused, 5);
  ExpectHolds(caches, Seq(1, 5));
}

TEST(PromptTrie, GrowsAfterGeneration) {
  LayerCaches caches = Global();
  PromptCache pc(caches, Options(kLots));
  const std::vector<int> prompt = Seq(1, 10);
  Serve(pc, caches, prompt);
  const std::vector<int> generated = {90, 91, 92, 93, 94};
  FakeDecode(caches, generated);
  pc.Commit(Cat(prompt, generated));
  ExpectBytes(pc);
  const std::vector<PromptNodeInfo> nodes = pc.Nodes();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[1].parent, 0);
  EXPECT_EQ(nodes[1].start, 10);
  EXPECT_EQ(nodes[1].end, 15);
  // The next turn continues the conversation: everything committed is reused.
  const std::vector<int> turn2 = Cat(Cat(prompt, generated), {95, 60, 61});
  EXPECT_EQ(pc.Lookup(turn2).reused, 15);
  ExpectHolds(caches, std::span<const int>(turn2).first(15));
}

TEST(PromptTrie, CommitRejectsWhatTheCachesDoNotHold) {
  LayerCaches caches = Global();
  PromptCache pc(caches, Options(kLots));
  Serve(pc, caches, Seq(1, 6));
  EXPECT_THROW(pc.Commit(Seq(1, 7)), Error);  // the caches hold 6
  EXPECT_EQ(pc.Lookup(Seq(1, 8)).reused, 6);
  FakeForward(caches, std::vector<int>{3, 4});
  EXPECT_THROW(pc.Commit(Cat(Seq(1, 5), {9, 3, 4})), Error);  // differs from the restored prefix
  EXPECT_EQ(pc.Nodes().size(), 1u);
  ExpectBytes(pc);
}

TEST(PromptTrie, EvictsTheLeastRecentlyUsedOffTheActivePath) {
  LayerCaches caches = Global();
  const std::size_t per_token = 2 * kTokenBytes;
  PromptCache pc(caches, Options(25 * per_token));
  const std::vector<int> a = Seq(100, 10), b = Seq(200, 10), c = Seq(300, 10);
  Serve(pc, caches, a);
  Serve(pc, caches, b);
  Serve(pc, caches, Cat(a, {7}));  // lands on a: a is now more recent than b
  // The budget counts blocks: a and b take 3 blocks of 4 tokens each, the
  // one-token node [10, 11) one right-sized block of 1.
  EXPECT_EQ(pc.Stats().bytes, (12 + 12 + 1) * per_token);
  Serve(pc, caches, c);  // 37 > 25: b goes
  ExpectBytes(pc);
  EXPECT_EQ(pc.Stats().evictions, 1);
  EXPECT_EQ(pc.Stats().bytes, (12 + 1 + 12) * per_token);
  EXPECT_EQ(pc.Lookup(Cat(b, {1})).reused, 0);
  EXPECT_EQ(pc.Lookup(Cat(a, {7, 8})).reused, 11);
  ExpectHolds(caches, Cat(a, {7}));
}

TEST(PromptTrie, PinnedNodesAreKept) {
  LayerCaches caches = Global();
  const std::size_t per_token = 2 * kTokenBytes;
  PromptCache pc(caches, Options(25 * per_token));
  const std::vector<int> system = Seq(100, 10);
  Serve(pc, caches, system);
  pc.Pin(system);
  EXPECT_TRUE(pc.Nodes()[0].pinned);
  Serve(pc, caches, Seq(200, 10));
  Serve(pc, caches, Seq(300, 10));  // the oldest is the pinned system prompt: the next goes
  ExpectBytes(pc);
  EXPECT_EQ(pc.Lookup(Cat(system, {1})).reused, 10);
  EXPECT_EQ(pc.Lookup(Seq(200, 11)).reused, 0);
  EXPECT_THROW(pc.Pin(Seq(500, 3)), Error);  // not cached
  pc.Unpin(system);
  EXPECT_FALSE(pc.Nodes()[0].pinned);
}

TEST(PromptTrie, PinningMoreThanTheBudgetThrows) {
  LayerCaches caches = Global();
  const std::size_t per_token = 2 * kTokenBytes;
  PromptCache pc(caches, Options(12 * per_token));
  Serve(pc, caches, Seq(100, 8));
  pc.Pin(Seq(100, 8));
  Serve(pc, caches, Seq(200, 4));
  pc.Unpin(Seq(100, 8));
  Serve(pc, caches, Cat(Seq(200, 4), Seq(50, 4)));  // evicts the unpinned 8
  ExpectBytes(pc);
  EXPECT_THROW(pc.Pin(Seq(100, 8)), Error);
}

TEST(PromptTrie, StaleBranchPointIsMergedIntoItsChild) {
  LayerCaches caches = Mixed();
  const std::vector<int> a = Seq(100, 10);
  const std::vector<int> more = Seq(150, 5);
  // Without a budget limit, to measure the node sizes.
  PromptCache probe(caches, Options(kLots));
  Serve(probe, caches, a);
  FakeForward(caches, more);
  probe.Commit(Cat(a, more));
  const std::vector<PromptNodeInfo> probe_nodes = probe.Nodes();
  ASSERT_EQ(probe_nodes.size(), 2u);
  // Node [0, 10): KV 10 tokens + the ring after one 10-token chunk (10 slots).
  EXPECT_EQ(probe_nodes[0].bytes, (10 + 10) * kTokenBytes);
  // Node [10, 15): KV 5 tokens + the ring after a 5-token chunk on a wrapped
  // window of 4: max_size - 1 = 3 old slots + 5 new.
  EXPECT_EQ(probe_nodes[1].bytes, (5 + 8) * kTokenBytes);
  const std::size_t z_bytes = (10 + 10) * kTokenBytes;  // like [0, 10)
  const std::size_t total = probe_nodes[0].bytes + probe_nodes[1].bytes + z_bytes;

  caches.Free();
  PromptCache pc(caches, Options(total - 1));
  Serve(pc, caches, a);
  FakeForward(caches, more);
  pc.Commit(Cat(a, more));
  Serve(pc, caches, Seq(300, 10));  // one byte over: [0, 10) is the oldest, with one child
  ExpectBytes(pc);
  EXPECT_EQ(pc.Stats().merges, 1);
  const std::vector<PromptNodeInfo> nodes = pc.Nodes();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(Edge(nodes[0]), Cat(a, more));
  EXPECT_EQ(nodes[0].start, 0);
  EXPECT_EQ(nodes[0].bytes, (15 + 8) * kTokenBytes);  // its window at 10 was released
  // The merged entry still restores exactly at its end...
  EXPECT_EQ(pc.Lookup(Cat(Cat(a, more), {1})).reused, 15);
  ExpectHolds(caches, Cat(a, more));
  // ...but no sliding layer can land at 10 any more: the match shrinks to 0.
  const PrefixMatch shrunk = pc.Lookup(Cat(a, {1, 2}));
  EXPECT_EQ(shrunk.reused, 0);
  EXPECT_EQ(shrunk.checkpoints, (std::vector<int>{10}));  // where it diverges
  ExpectBytes(pc);
}

TEST(PromptTrie, SlidingLayersRestoreExactWindowsAtCheckpoints) {
  LayerCaches caches = LayerCaches::Interleaved(2, 3, 4, 4);  // both layers sliding, window 4
  PromptCache pc(caches, Options(kLots));
  const std::vector<int> a = Seq(100, 10);
  EXPECT_TRUE(Serve(pc, caches, a).checkpoints.empty());
  // A repeat is held back to 9, where no window was captured (the ring wrapped
  // at 10): nothing is reused, and prefill stops at 9 to capture it.
  const PrefixMatch repeat = Serve(pc, caches, a);
  EXPECT_EQ(repeat.reused, 0);
  EXPECT_EQ(repeat.checkpoints, (std::vector<int>{9}));
  EXPECT_EQ(pc.Lookup(a).reused, 9);
  ExpectHolds(caches, std::span<const int>(a).first(9));
  // Diverging mid-edge at 6: no window at 6 yet, so nothing is reused, and
  // prefill stops at the branch point.
  const std::vector<int> b = Cat(Seq(100, 6), {7, 8, 9});
  const PrefixMatch diverged = Serve(pc, caches, b);
  EXPECT_EQ(diverged.reused, 0);
  EXPECT_EQ(diverged.checkpoints, (std::vector<int>{6}));
  // Now a third request reaches the branch point exactly.
  const std::vector<int> c = Cat(Seq(100, 6), {60, 61});
  EXPECT_EQ(pc.Lookup(c).reused, 6);
  ExpectHolds(caches, Seq(100, 6));
  // The live ring at 6 has wrapped (window 4): it cannot rewind to 3.
  const std::vector<int> d = Cat(Seq(100, 3), {5});
  const PrefixMatch short_match = Serve(pc, caches, d);
  EXPECT_EQ(short_match.reused, 0);
  EXPECT_EQ(short_match.checkpoints, (std::vector<int>{3}));
  // The window captured at 3 never wrapped, so it also serves every offset below 3.
  EXPECT_EQ(pc.Lookup(Cat(Seq(100, 2), {5})).reused, 2);
  ExpectHolds(caches, Seq(100, 2));
  ExpectBytes(pc);
}

}  // namespace
}  // namespace ringkv::test
