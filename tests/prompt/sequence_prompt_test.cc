// SequencePromptCache: one trie for every sequence of a pool. Each test checks
// the sequences' stored K/V against the model's (sequence_test_util.h): what a
// fresh sequence fed the same tokens holds.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "cache/cache_test_util.h"
#include "ringkv/batch_attention.h"
#include "ringkv/context.h"
#include "ringkv/sequence_prompt_cache.h"
#include "sequence_test_util.h"

namespace ringkv::test {
namespace {

std::vector<int> Tokens(int n, int seed) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back((seed * 7919 + i * 104729) % 50000 - 25);
  return out;
}

std::vector<int> Concat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Causal attention of row queries at `positions` over the model's K/V of
// tokens[0, p] each, in float64 (GQA: query head h reads kv head h / group).
std::vector<double> Oracle(const Tensor& q, std::span<const int> tokens,
                           std::span<const Position> positions, int layer, double scale) {
  const std::int64_t hq = q.Dim(1);
  const std::int64_t group = hq / kSeqHeads;
  const std::vector<float> qv = q.ToVector();
  const auto n = static_cast<std::int64_t>(positions.size());
  std::vector<double> out(static_cast<std::size_t>(hq * n * kSeqValueDim));
  for (std::int64_t i = 0; i < n; ++i) {
    const Position p = positions[static_cast<std::size_t>(i)];
    const std::vector<Position> seen = PositionRange(0, p + 1);
    const std::vector<float> k = ModelKv(tokens, seen, layer, false).ToVector();
    const std::vector<float> v = ModelKv(tokens, seen, layer, true).ToVector();
    const auto m = static_cast<std::int64_t>(seen.size());
    for (std::int64_t h = 0; h < hq; ++h) {
      const std::int64_t kh = h / group;
      std::vector<double> s(static_cast<std::size_t>(m));
      double top = -INFINITY;
      for (std::int64_t j = 0; j < m; ++j) {
        double dot = 0;
        for (std::int64_t d = 0; d < kSeqKeyDim; ++d) {
          dot += double{qv[static_cast<std::size_t>((h * n + i) * kSeqKeyDim + d)]} *
                 double{k[static_cast<std::size_t>((kh * m + j) * kSeqKeyDim + d)]};
        }
        s[static_cast<std::size_t>(j)] = dot * scale;
        top = std::max(top, s[static_cast<std::size_t>(j)]);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - top));
      for (std::int64_t d = 0; d < kSeqValueDim; ++d) {
        double acc = 0;
        for (std::int64_t j = 0; j < m; ++j) {
          acc += s[static_cast<std::size_t>(j)] *
                 double{v[static_cast<std::size_t>((kh * m + j) * kSeqValueDim + d)]};
        }
        out[static_cast<std::size_t>((h * n + i) * kSeqValueDim + d)] = acc / sum;
      }
    }
  }
  return out;
}

// A system prompt prefilled once into sequence 0 and committed; sequences
// 1..7 look it up (no new block), continue with their own question, and hold
// and attend to exactly what a fresh sequence fed the whole prompt would.
TEST(SequencePromptCache, SystemPromptIsSharedByEverySlot) {
  CausalCache cache(SeqOptions(2, 64 * 16, 16, 8));
  CausalCache* caches[] = {&cache};
  SequencePromptCache prompts(caches, {});
  const std::vector<int> system = Tokens(100, 1);
  Feed(cache, 0, system, 0, 100);
  prompts.Commit(0, system);
  const std::int64_t used = cache.UsedBlocks();
  ASSERT_EQ(used, 7);  // ceil(100 / 16)
  Context ctx(1);
  for (SequenceId seq = 1; seq < 8; ++seq) {
    const std::vector<int> prompt = Concat(system, Tokens(5, 100 + seq));
    const std::int64_t before = cache.UsedBlocks();
    EXPECT_EQ(prompts.Lookup(seq, prompt), 100);
    EXPECT_EQ(cache.UsedBlocks(), before) << "the restore shares the system prompt's blocks";
    EXPECT_TRUE(cache.CanResume(seq, 100));
    // The question: one pass of 5 rows, attention checked against float64.
    const std::vector<Position> positions = PositionRange(100, 105);
    const std::vector<SequenceId> sequences(positions.size(), seq);
    cache.StartForward(Batch{positions, sequences});
    for (int l = 0; l < 2; ++l) {
      const BatchHistory h = cache.Update(l, ModelKv(prompt, positions, l, false),
                                          ModelKv(prompt, positions, l, true));
      EXPECT_TRUE(SameBytes(h.VisibleKeys(4), ModelKv(prompt, PositionRange(0, 105), l, false)));
      EXPECT_TRUE(SameBytes(h.VisibleValues(4), ModelKv(prompt, PositionRange(0, 105), l, true)));
      const Tensor q4 = Tensor::FromVector(
          [&] {
            std::vector<float> v(4 * 5 * kSeqKeyDim);
            for (std::size_t i = 0; i < v.size(); ++i)
              v[i] = KvValue(static_cast<std::uint32_t>(i * 31) + static_cast<std::uint32_t>(seq),
                             l, 0, 0, false);
            return v;
          }(),
          {1, 4, 5, kSeqKeyDim}, DType::kF32);
      const std::vector<float> got = Attention(q4, h, 0.35f, ctx).ToVector();
      const std::vector<double> want = Oracle(q4, prompt, positions, l, 0.35);
      ASSERT_EQ(got.size(), want.size());
      double max_error = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        max_error = std::max(max_error, std::abs(double{got[i]} - want[i]));
      }
      // f32 accumulation over 105 keys: measured at most 1.1e-7 (scalar tier).
      EXPECT_LE(max_error, 2.5e-7) << "seq " << seq << " layer " << l;
    }
    ExpectHolds(cache, seq, prompt);
    prompts.Commit(seq, prompt);
  }
  ExpectHolds(cache, 0, system);
  const PromptCacheStats stats = prompts.Stats();
  EXPECT_EQ(stats.lookups, 7);
  EXPECT_EQ(stats.hits, 7);
  EXPECT_EQ(stats.tokens_reused, 700);
  // The system prompt and seven questions below it.
  const std::vector<PromptNodeInfo> nodes = prompts.Nodes();
  ASSERT_EQ(nodes.size(), 8u);
  EXPECT_EQ(nodes[0].end, 100);
  for (std::size_t i = 1; i < nodes.size(); ++i) {
    EXPECT_EQ(nodes[i].parent, 0);
    EXPECT_EQ(nodes[i].start, 100);
    EXPECT_EQ(nodes[i].end, 105);
  }
  // Every sequence's final state is in the trie and nothing else is: the trie
  // references exactly the pool's used blocks, each counted once.
  EXPECT_EQ(stats.bytes, static_cast<std::size_t>(cache.UsedBlocks()) * cache.BytesPerBlock());
  EXPECT_LT(cache.UsedBlocks(), 2 * used) << "the system prompt is stored once";
  EXPECT_EQ(prompts.SnapshotBytes(), stats.bytes);
}

// Commits from any sequence grow the one trie; a later lookup from another
// sequence lands at the deepest shared point (splitting an edge where it ends).
TEST(SequencePromptCache, CommitsFromAnySequenceGrowTheTrie) {
  CausalCache cache(SeqOptions(1, 64 * 8, 8, 6));
  CausalCache* caches[] = {&cache};
  SequencePromptCache prompts(caches, {});
  const std::vector<int> a = Tokens(30, 2);
  const std::vector<int> ab = Concat(a, Tokens(12, 3));
  Feed(cache, 3, ab, 0, 42);
  prompts.Commit(3, ab);
  // Sequence 5 shares the first 30 tokens, then diverges: the edge splits at 30.
  const std::vector<int> ac = Concat(a, Tokens(9, 4));
  EXPECT_EQ(prompts.Lookup(5, ac), 30);
  ExpectHolds(cache, 5, a);
  Feed(cache, 5, ac, 30, 39);
  prompts.Commit(5, ac);
  EXPECT_EQ(prompts.Stats().splits, 1);
  const std::vector<PromptNodeInfo> nodes = prompts.Nodes();
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0].end, 30);
  EXPECT_EQ(nodes[0].missing_windows, 0) << "the split point holds sequence 5's snapshot at 30";
  // Sequence 1 asks for both branches in turn, and for a repeat (held back one token).
  EXPECT_EQ(prompts.Lookup(1, Concat(ac, {7})), 39);
  ExpectHolds(cache, 1, ac);
  EXPECT_EQ(prompts.Lookup(1, Concat(ab, {7})), 42);
  ExpectHolds(cache, 1, ab);
  EXPECT_EQ(prompts.Lookup(1, ab), 41);
  ExpectHolds(cache, 1, std::span(ab).first(41));
  EXPECT_EQ(prompts.Lookup(1, Concat(Tokens(20, 2), {1, 2, 3})), 20) << "mid-edge";
  ExpectHolds(cache, 1, std::span(a).first(20));
  EXPECT_EQ(prompts.Lookup(1, Tokens(5, 9)), 0);
  EXPECT_TRUE(cache.SequencePositions(1).empty());
  // Nothing the lookups did touched the committed sequences.
  ExpectHolds(cache, 3, ab);
  ExpectHolds(cache, 5, ac);
}

// Past the byte budget the least recently used leaves go; the trie never
// counts more than the pool blocks its snapshots reference.
TEST(SequencePromptCache, BudgetEvictsLeastRecentlyUsedLeaves) {
  CausalCache cache(SeqOptions(1, 64 * 8, 8, 8));
  CausalCache* caches[] = {&cache};
  const std::size_t block = cache.BytesPerBlock();
  SequencePromptCache prompts(caches, {.byte_budget = 9 * block});
  std::vector<std::vector<int>> prompt;
  for (SequenceId seq = 0; seq < 4; ++seq) {
    prompt.push_back(Tokens(24, 10 + seq));  // 3 blocks each, nothing shared
    Feed(cache, seq, prompt.back(), 0, 24);
    prompts.Commit(seq, prompt.back());
    EXPECT_LE(prompts.Stats().bytes, 9 * block);
    EXPECT_EQ(prompts.SnapshotBytes(), prompts.Stats().bytes);
  }
  // Three fit: the first one committed went.
  EXPECT_EQ(prompts.Stats().bytes, 9 * block);
  EXPECT_EQ(prompts.Stats().evictions, 1);
  EXPECT_EQ(prompts.Lookup(7, Concat(prompt[0], {1})), 0);
  // A lookup refreshes prompt 1, so the next commit evicts prompt 2.
  EXPECT_EQ(prompts.Lookup(7, Concat(prompt[1], {1})), 24);
  const std::vector<int> fresh = Tokens(16, 20);
  Feed(cache, 6, fresh, 0, 16);
  prompts.Commit(6, fresh);
  EXPECT_EQ(prompts.Lookup(7, Concat(prompt[2], {1})), 0);
  EXPECT_EQ(prompts.Lookup(7, Concat(prompt[1], {1})), 24);
  EXPECT_EQ(prompts.Lookup(7, Concat(prompt[3], {1})), 24);
  // A pinned prefix stays whatever comes after it.
  prompts.Pin(prompt[3]);
  for (SequenceId seq = 0; seq < 3; ++seq) {
    const std::vector<int> other = Tokens(24, 30 + seq);
    cache.Remove(seq, 0, kEndOfSequence);
    Feed(cache, seq, other, 0, 24);
    prompts.Commit(seq, other);
  }
  EXPECT_EQ(prompts.Lookup(7, Concat(prompt[3], {1})), 24);
  EXPECT_THROW(prompts.Pin(Tokens(3, 99)), Error);
  // Released by the trie and by their sequences, the blocks return to the pool.
  prompts.Clear();
  EXPECT_EQ(prompts.Stats().bytes, 0u);
  for (const SequenceId seq : cache.Sequences()) cache.Remove(seq, 0, kEndOfSequence);
  EXPECT_EQ(cache.UsedBlocks(), 0);
}

// A sliding-window cache keeps only the recent tokens: a restore at r is
// offered only where every cache can resume (the window of r is stored), so
// the match shrinks; the global cache beside it would have reached further.
TEST(SequencePromptCache, SlidingWindowShrinksTheMatch) {
  constexpr Position kWindow = 8;
  CausalCache global(SeqOptions(1, 64 * 4, 4, 4));
  CausalCache sliding(SeqOptions(2, 64 * 4, 4, 4, kWindow));
  CausalCache* both[] = {&sliding, &global};
  SequencePromptCache prompts(both, {});
  const std::vector<int> long_prompt = Tokens(40, 5);
  // Decode-style passes, so the sliding cache releases old tokens as it goes.
  for (Position p = 0; p < 40; p += 4) {
    Feed(global, 0, long_prompt, p, p + 4);
    Feed(sliding, 0, long_prompt, p, p + 4);
  }
  ASSERT_GT(sliding.SequencePositions(0).front(), 20) << "the window slid past 20";
  prompts.Commit(0, long_prompt);
  // The whole prompt resumes (the window of 40 is stored) ...
  EXPECT_EQ(prompts.Lookup(1, Concat(long_prompt, {3})), 40);
  EXPECT_TRUE(sliding.CanResume(1, 40));
  ExpectHolds(global, 1, long_prompt);
  ExpectHolds(sliding, 1, long_prompt);
  // ... a prefix of 20 does not: 20 - 8 lies before what the snapshot holds.
  const std::vector<int> diverging =
      Concat(std::vector<int>(long_prompt.begin(), long_prompt.begin() + 20), Tokens(5, 6));
  EXPECT_EQ(prompts.Lookup(2, diverging), 0);
  EXPECT_FALSE(sliding.CanResume(0, 20));
  // With the global cache alone, 20 is reachable.
  CausalCache* global_only[] = {&global};
  SequencePromptCache global_prompts(global_only, {});
  global_prompts.Commit(0, long_prompt);
  EXPECT_EQ(global_prompts.Lookup(2, diverging), 20);
  ExpectHolds(global, 2, std::span(long_prompt).first(20));
  // A sequence committed at 20 before its window slid gives the point a snapshot.
  global.Remove(2, 0, kEndOfSequence);
  Feed(global, 2, diverging, 0, 20);
  Feed(sliding, 2, diverging, 0, 20);
  prompts.Commit(2, std::span(diverging).first(20));
  EXPECT_EQ(prompts.Lookup(3, diverging), 20);
  EXPECT_TRUE(sliding.CanResume(3, 20));
  ExpectHolds(sliding, 3, std::span(diverging).first(20));
  ExpectHolds(global, 3, std::span(diverging).first(20));
}

// Bad input throws ringkv::Error naming it, and changes nothing: not the
// trie, not the sequences, not the pool.
TEST(SequencePromptCache, BadInputChangesNothing) {
  CausalCache cache(SeqOptions(1, 64 * 8, 8, 2));
  CausalCache* caches[] = {&cache};
  SequencePromptCache prompts(caches, {});
  const std::vector<int> prompt = Tokens(20, 7);
  Feed(cache, 0, prompt, 0, 20);
  prompts.Commit(0, prompt);
  Feed(cache, 1, prompt, 0, 10);
  auto snapshot = [&] {
    std::vector<std::vector<Position>> positions;
    for (SequenceId seq = 0; seq < 4; ++seq) positions.push_back(cache.SequencePositions(seq));
    return std::tuple(prompts.Nodes().size(), prompts.Stats().bytes, prompts.Stats().lookups,
                      cache.UsedBlocks(), positions);
  };
  const auto before = snapshot();
  EXPECT_NE(ErrorOf([&] {
              prompts.Lookup(1, std::vector<int>{});
            }).find("[SequencePromptCache::Lookup] tokens must not be empty"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { prompts.Commit(3, prompt); }).find("seq 3 holds no tokens"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              prompts.Commit(0, std::span(prompt).first(12));
            }).find("seq 0 holds 20 tokens at positions [0, 19] in caches[0], but 12 tokens"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { prompts.Commit(1, prompt); }).find("seq 1 holds 10 tokens"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { prompts.Commit(0, std::vector<int>{}); }).find("must not be empty"),
            std::string::npos);
  // Two sequences are held: restoring into a third is refused by the cache.
  EXPECT_NE(ErrorOf([&] { prompts.Lookup(2, Concat(prompt, {1})); }).find("max_sequences"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { prompts.Pin(Tokens(3, 1)); }).find("only 0 of the 3 tokens"),
            std::string::npos);
  EXPECT_EQ(snapshot(), before);
  ExpectHolds(cache, 0, prompt);
  ExpectHolds(cache, 1, std::span(prompt).first(10));
  // The constructor's arguments.
  EXPECT_NE(ErrorOf([&] { SequencePromptCache({}, {}); }).find("caches is empty"),
            std::string::npos);
  CausalCache* null_cache[] = {nullptr};
  EXPECT_NE(ErrorOf([&] { SequencePromptCache(null_cache, {}); }).find("caches[0] is null"),
            std::string::npos);
  CausalCache* twice[] = {&cache, &cache};
  EXPECT_NE(ErrorOf([&] {
              SequencePromptCache(twice, {});
            }).find("caches[0] and caches[1] are one cache"),
            std::string::npos);
}

}  // namespace
}  // namespace ringkv::test
