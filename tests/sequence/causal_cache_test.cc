// CausalCache against the reference's behaviour, checked through what each
// row sees (BatchHistory::VisibleKeys/VisibleValues decoded token by token)
// against a positions-only expectation computed here.
#include "ringkv/causal_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "batch_plan.h"
#include "cache/cache_test_util.h"
#include "ringkv/tensor_ops.h"
#include "sequence/sequence_test_util.h"

namespace ringkv {
namespace {

using test::Expected;
using test::ExpectVisibility;
using test::Forward;
using test::Iota;
using test::SeenBy;
using test::Span;
using test::Token;

TEST(CausalCacheTest, PrefillThenDecodeSeesItsOwnPast) {
  CausalCache cache(test::SmallOptions());
  std::vector<Token> prefill = Span(0, 0, 6);
  Forward(cache, prefill);
  ExpectVisibility(cache, prefill, {});
  for (Position p = 6; p < 12; ++p) {
    Forward(cache, {{0, p}});
    ExpectVisibility(cache, {{0, p}}, {});
  }
  EXPECT_EQ(cache.SequencePositions(0), Iota(0, 12));
  EXPECT_EQ(cache.Sequences(), std::vector<SequenceId>{0});
  EXPECT_EQ(cache.UsedBlocks(), 3);  // 12 tokens in blocks of 4
}

TEST(CausalCacheTest, QuantizedPoolReadsBackDequantisedRows) {
  CausalCacheOptions o = test::SmallOptions();
  o.layers = 1;
  o.kv_heads = 1;
  o.dtype = DType::kI8;  // values int8 too
  CausalCache cache(o);
  // Rows whose int8 form is exact: max |x| = 127 s with s = 0.25, every x a multiple of s.
  const std::vector<float> k{31.75f, -16.0f, 0.75f, 0.0f, -31.75f, 8.0f, 0.25f, 1.0f};
  const std::vector<float> v{-0.5f, 63.5f, 2.0f, 1.0f, -127.0f, 3.0f};
  const Tensor keys = Tensor::FromVector(k, {1, 1, 2, 4});
  const Tensor values = Tensor::FromVector(v, {1, 1, 2, 3});
  const std::vector<Position> positions{0, 1};
  const std::vector<SequenceId> sequences{5, 5};
  cache.StartForward({positions, sequences});
  const BatchHistory history = cache.Update(0, keys, values);
  EXPECT_EQ(history.KeyDtype(), DType::kI8);
  EXPECT_EQ(history.ValueDtype(), DType::kI8);
  EXPECT_EQ(history.VisibleKeys(1).Dtype(), DType::kF32);
  EXPECT_EQ(history.VisibleKeys(1).ToVector(), keys.ToVector());
  EXPECT_EQ(history.VisibleValues(1).ToVector(), values.ToVector());
  EXPECT_EQ(history.VisibleKeys(0).ToVector(), keys.Slice(2, 0, 1).ToVector());
}

TEST(CausalCacheTest, MixedBatchKeepsSequencesApart) {
  CausalCache cache(test::SmallOptions());
  // Interleaved rows, positions out of order, a sequence with a gap.
  const std::vector<Token> pass{{1, 2}, {0, 0}, {1, 0}, {2, 5}, {0, 1}, {1, 1}, {2, 7}};
  Forward(cache, pass);
  ExpectVisibility(cache, pass, {});
  EXPECT_EQ(cache.SequencePositions(2), (std::vector<Position>{5, 7}));
  // Filling the gap later: the new token lands between the stored ones.
  const std::vector<Token> next{{2, 6}, {0, 2}};
  Forward(cache, next);
  ExpectVisibility(cache, next, {});
  EXPECT_EQ(cache.SequencePositions(2), (std::vector<Position>{5, 6, 7}));
  Forward(cache, {{2, 8}});
  ExpectVisibility(cache, {{2, 8}}, {});
}

TEST(CausalCacheTest, SlotsAreReusedAfterRemove) {
  CausalCacheOptions o = test::SmallOptions();
  o.capacity_tokens = 16;  // 4 blocks
  o.max_sequences = 1;
  CausalCache cache(o);
  Forward(cache, Span(0, 0, 16));
  EXPECT_EQ(cache.UsedBlocks(), 4);
  cache.Remove(0, 0, kEndOfSequence);
  EXPECT_EQ(cache.UsedBlocks(), 0);
  EXPECT_TRUE(cache.Sequences().empty());
  // The id and every block are free again.
  Forward(cache, Span(7, 0, 16));
  ExpectVisibility(cache, Span(7, 0, 16), {});
  EXPECT_EQ(cache.UsedBlocks(), 4);
}

TEST(CausalCacheTest, SlidingWindowRetainsMemoryPerSequence) {
  CausalCacheOptions o = test::SmallOptions();
  o.window = 4;  // with two sequences the memory grows to window + 1 = 5
  o.max_sequences = 2;
  CausalCache cache(o);
  EXPECT_EQ(cache.Options().memory, 5);
  const test::Rules rules{4, 0};
  Forward(cache, {{0, 0}, {1, 0}});
  for (Position q = 1; q < 40; ++q) {
    std::vector<Token> pass{{0, q}};
    if (q < 30) pass.emplace_back(1, q);  // sequence 1 stops at 29
    Forward(cache, pass);
    ExpectVisibility(cache, pass, rules);
    // Tokens older than the memory before the pass's position are released.
    EXPECT_EQ(cache.SequencePositions(0), Iota(std::max(0, q - 5), q + 1)) << q;
    // An idle sequence keeps the memory before its next position.
    const Position last1 = std::min(q, 29);
    const Position keep1 = q < 30 ? std::max(0, q - 5) : std::max(0, last1 + 1 - 5);
    EXPECT_EQ(cache.SequencePositions(1), Iota(keep1, last1 + 1)) << q;
    // 6 tokens at most per sequence, in blocks of 4: at most 3 blocks each.
    EXPECT_LE(cache.UsedBlocks(), 6) << q;
  }
}

TEST(CausalCacheTest, SingleSequenceWindowKeepsMemoryEqualToWindow) {
  CausalCacheOptions o = test::SmallOptions();
  o.window = 4;
  o.max_sequences = 1;
  CausalCache cache(o);
  EXPECT_EQ(cache.Options().memory, 4);
  Forward(cache, Span(0, 0, 10));
  ExpectVisibility(cache, Span(0, 0, 10), {4, 0});
  Forward(cache, {{0, 10}});
  EXPECT_EQ(cache.SequencePositions(0), Iota(6, 11));
}

TEST(CausalCacheTest, CopyPrefixSharesBlocksAndWritesDiverge) {
  CausalCache cache(test::SmallOptions());
  Forward(cache, Span(0, 0, 10));  // blocks of 4: 4 + 4 + 2
  EXPECT_EQ(cache.UsedBlocks(), 3);
  cache.CopyPrefix(0, 1, 10);
  EXPECT_EQ(cache.UsedBlocks(), 3);  // shared, nothing copied
  cache.CopyPrefix(0, 2, 6);         // ends inside the second block
  EXPECT_EQ(cache.UsedBlocks(), 3);
  EXPECT_EQ(cache.SequencePositions(1), Iota(0, 10));
  EXPECT_EQ(cache.SequencePositions(2), Iota(0, 6));

  // Each continues with its own tokens.
  const std::vector<Token> pass{{0, 10}, {1, 10}, {2, 6}};
  const BatchHistory h = Forward(cache, pass);
  const auto shared = [](Position end) {
    std::vector<Token> t;
    for (Position p = 0; p < end; ++p) t.emplace_back(0, p);
    return t;
  };
  std::vector<Token> want0 = shared(11);
  std::vector<Token> want1 = shared(10);
  want1.emplace_back(1, 10);
  std::vector<Token> want2 = shared(6);
  want2.emplace_back(2, 6);
  EXPECT_EQ(SeenBy(h, 0), want0);
  EXPECT_EQ(SeenBy(h, 1), want1);
  EXPECT_EQ(SeenBy(h, 2), want2);
  // Sequence 0 continued in place (nobody else had seen those rows); 1 and 2
  // each needed a block of their own: the shared rows were never rewritten.
  EXPECT_EQ(cache.UsedBlocks(), 5);

  // The three share their first block in the plan: one prefix, read once.
  const detail::BatchPlan* plan = detail::BatchAccess::Current(h, "test");
  ASSERT_NE(plan, nullptr);
  ASSERT_EQ(plan->prefixes.size(), 1u);
  std::int64_t prefix_keys = 0;
  for (std::int64_t i = 0; i < plan->prefixes[0].run_count; ++i) {
    prefix_keys += plan->runs[static_cast<std::size_t>(plan->prefixes[0].first_run + i)].count;
  }
  EXPECT_EQ(prefix_keys, 6);  // what all three start with: positions 0..5
  for (const kernels::RaggedGroup& g : plan->groups) EXPECT_EQ(g.prefix, 0);

  // Later passes: the source's K/V are unchanged.
  Forward(cache, {{0, 11}});
  EXPECT_EQ(SeenBy(cache.Get(1), 0, 1), shared(12));
}

TEST(CausalCacheTest, CopyPrefixReplacesTheDestination) {
  CausalCache cache(test::SmallOptions());
  Forward(cache, Span(0, 0, 5));
  Forward(cache, Span(1, 0, 9));
  EXPECT_EQ(cache.UsedBlocks(), 5);
  cache.CopyPrefix(0, 1, 3);
  EXPECT_EQ(cache.SequencePositions(1), Iota(0, 3));
  EXPECT_EQ(cache.UsedBlocks(), 2);  // sequence 1's own blocks were released
  cache.CopyPrefix(0, 1, 0);         // nothing: sequence 1 holds no tokens
  EXPECT_EQ(cache.Sequences(), std::vector<SequenceId>{0});
  cache.CopyPrefix(0, 0, 2);  // onto itself: keeps [0, len)
  EXPECT_EQ(cache.SequencePositions(0), Iota(0, 2));
}

TEST(CausalCacheTest, CanResumeFollowsTheReference) {
  CausalCacheOptions o = test::SmallOptions();
  CausalCache unbounded(o);
  EXPECT_TRUE(unbounded.CanResume(3, 100));  // no window: always
  o.window = 4;
  o.memory = 8;
  o.max_sequences = 1;
  CausalCache cache(o);
  EXPECT_FALSE(cache.CanResume(0, 0));  // unknown sequence
  Forward(cache, Span(0, 0, 20));
  Forward(cache, {{0, 20}});  // releases positions < 20 - 8
  ASSERT_EQ(cache.SequencePositions(0), Iota(12, 21));
  EXPECT_TRUE(cache.CanResume(0, 21));   // the next token
  EXPECT_FALSE(cache.CanResume(0, 22));  // past last + 1
  EXPECT_TRUE(cache.CanResume(0, 16));   // window [12, 16) still held
  EXPECT_FALSE(cache.CanResume(0, 15));  // window starts at 11: released
  EXPECT_FALSE(cache.CanResume(0, 3));   // window starts at 0: released
}

TEST(CausalCacheTest, CanResumeAtTheStartOfAShortSequence) {
  CausalCacheOptions o = test::SmallOptions();
  o.window = 4;
  o.max_sequences = 1;
  CausalCache cache(o);
  Forward(cache, Span(0, 0, 3));
  EXPECT_TRUE(cache.CanResume(0, 0));  // window start max(0, -4) = 0 >= first 0
  EXPECT_TRUE(cache.CanResume(0, 3));
  EXPECT_FALSE(cache.CanResume(0, 4));
}

struct ShiftCall {
  int layer = 0;
  std::vector<Position> positions;
  Position delta = 0;
  std::vector<Position> key_positions;  // what the keys handed over encode (d == 0 of head 0)
};

// A shift function that records its calls and re-encodes each key's position
// (d == 0) as its new one, so the stored keys stay decodable.
ShiftFn Recorder(std::vector<ShiftCall>& calls) {
  return [&calls](const ShiftRequest& r) {
    ShiftCall call{r.layer, {r.positions.begin(), r.positions.end()}, r.delta, {}};
    std::vector<float> k = r.keys.ToVector();
    const std::int64_t heads = r.keys.Dim(1), n = r.keys.Dim(2), d = r.keys.Dim(3);
    for (std::int64_t t = 0; t < n; ++t) {
      call.key_positions.push_back(static_cast<Position>(k[static_cast<std::size_t>(t * d)]));
      for (std::int64_t h = 0; h < heads; ++h)
        k[static_cast<std::size_t>((h * n + t) * d)] += static_cast<float>(r.delta);
    }
    const Tensor shifted = Tensor::FromVector(k, r.keys.GetShape(), r.keys.Dtype());
    SliceUpdate(r.keys, shifted, 2, 0);
    calls.push_back(std::move(call));
  };
}

TEST(CausalCacheTest, RemoveInTheMiddleShiftsTheKeysAfterIt) {
  std::vector<ShiftCall> calls;
  CausalCacheOptions o = test::SmallOptions();
  o.shift = Recorder(calls);
  CausalCache cache(o);
  Forward(cache, Span(0, 0, 10));
  Forward(cache, Span(1, 0, 3));
  cache.Remove(0, 3, 5);
  ASSERT_EQ(calls.size(), 2u);  // one per layer
  for (int layer = 0; layer < 2; ++layer) {
    EXPECT_EQ(calls[static_cast<std::size_t>(layer)].layer, layer);
    EXPECT_EQ(calls[static_cast<std::size_t>(layer)].delta, -2);
    EXPECT_EQ(calls[static_cast<std::size_t>(layer)].positions, Iota(3, 8));
    EXPECT_EQ(calls[static_cast<std::size_t>(layer)].key_positions, Iota(5, 10));
  }
  EXPECT_EQ(cache.SequencePositions(0), Iota(0, 8));
  EXPECT_EQ(cache.SequencePositions(1), Iota(0, 3));
  // The moved keys now encode their new positions (the shift function's
  // rewrite was stored); their values are the moved tokens' own.
  const BatchHistory h = Forward(cache, {{0, 8}});
  const Tensor keys = h.VisibleKeys(0);
  const Tensor values = h.VisibleValues(0);
  ASSERT_EQ(keys.Dim(2), 9);
  const std::vector<float> k = keys.ToVector();
  const std::vector<float> v = values.ToVector();
  const std::vector<Position> old_positions{0, 1, 2, 5, 6, 7, 8, 9};
  for (std::size_t t = 0; t < 8; ++t) {
    EXPECT_EQ(k[t * 4], static_cast<float>(t)) << t;
    EXPECT_EQ(v[t * 3], test::ValueElement({0, old_positions[t]}, 0, 0, 0)) << t;
  }
}

TEST(CausalCacheTest, RemoveAGapBetweenRowsThatFollowEachOther) {
  // Positions 0..3 and 10..13 written in one pass sit in rows 0..7 of one block:
  // after removing [4, 10) the moved tokens continue both the rows and the
  // positions of the ones before them, and must still be shifted.
  std::vector<ShiftCall> calls;
  CausalCacheOptions o = test::SmallOptions();
  o.block_tokens = 16;
  o.shift = Recorder(calls);
  CausalCache cache(o);
  std::vector<Token> pass = Span(0, 0, 4);
  for (const Token& t : Span(0, 10, 4)) pass.push_back(t);
  Forward(cache, pass);
  cache.Remove(0, 4, 10);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].positions, Iota(4, 8));
  EXPECT_EQ(calls[0].key_positions, Iota(10, 14));
  EXPECT_EQ(cache.SequencePositions(0), Iota(0, 8));
  const BatchHistory h = Forward(cache, {{0, 8}});
  const std::vector<float> k = h.VisibleKeys(0).ToVector();
  ASSERT_EQ(k.size(), 9u * 4u * 2u);
  for (std::size_t t = 0; t < 9; ++t) EXPECT_EQ(k[t * 4], static_cast<float>(t)) << t;
}

TEST(CausalCacheTest, RemoveClonesBlocksOthersShareInsteadOfRefusing) {
  std::vector<ShiftCall> calls;
  CausalCacheOptions o = test::SmallOptions();
  o.shift = Recorder(calls);
  CausalCache cache(o);
  Forward(cache, Span(0, 0, 8));
  cache.CopyPrefix(0, 1, 8);
  const std::unique_ptr<SequenceSnapshot> snapshot = cache.SnapshotSequence(0);
  EXPECT_EQ(cache.UsedBlocks(), 2);
  cache.Remove(0, 1, 2);
  EXPECT_EQ(cache.SequencePositions(0), Iota(0, 7));
  EXPECT_EQ(cache.UsedBlocks(), 4);  // both blocks of sequence 0 are its own now
  // The sharers see the old keys.
  const BatchHistory h = Forward(cache, {{1, 8}, {0, 7}});
  std::vector<Token> want1 = Span(0, 0, 8);
  want1.emplace_back(1, 8);
  EXPECT_EQ(SeenBy(h, 0), want1);
  cache.RestoreSequence(2, *snapshot);
  Forward(cache, {{2, 8}});
  std::vector<Token> want2 = Span(0, 0, 8);
  want2.emplace_back(2, 8);
  EXPECT_EQ(SeenBy(cache.Get(0), 0), want2);
}

TEST(CausalCacheTest, TruncationNeverShifts) {
  std::vector<ShiftCall> calls;
  CausalCacheOptions o = test::SmallOptions();
  o.shift = Recorder(calls);
  CausalCache cache(o);
  Forward(cache, Span(0, 0, 10));
  cache.Remove(0, 4, kEndOfSequence);
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(cache.SequencePositions(0), Iota(0, 4));
  EXPECT_EQ(cache.UsedBlocks(), 1);
  // A truncated sequence continues where it now ends, rewriting its dead rows.
  Forward(cache, Span(0, 4, 3));
  ExpectVisibility(cache, Span(0, 4, 3), {});
  EXPECT_EQ(cache.UsedBlocks(), 2);
  // Removing a range with nothing after it needs no shift function either.
  CausalCache plain(test::SmallOptions());
  Forward(plain, Span(0, 0, 10));
  plain.Remove(0, 6, 20);
  EXPECT_EQ(plain.SequencePositions(0), Iota(0, 6));
  plain.Remove(5, 0, 3);  // an unknown sequence holds nothing: no change, as the reference
  EXPECT_EQ(plain.Sequences(), std::vector<SequenceId>{0});
}

TEST(CausalCacheTest, CacheFullChangesNothing) {
  CausalCacheOptions o = test::SmallOptions();
  o.capacity_tokens = 16;  // 4 blocks
  CausalCache cache(o);
  Forward(cache, Span(0, 0, 10));  // 3 blocks
  const std::vector<Position> pos8 = Iota(0, 8);
  const std::vector<SequenceId> seq8(8, 1);
  const std::string message = test::ErrorOf([&] { cache.StartForward({pos8, seq8}); });
  EXPECT_NE(message.find("cache full"), std::string::npos) << message;
  EXPECT_NE(message.find("needs 2 new blocks"), std::string::npos) << message;
  EXPECT_NE(message.find("1 of the capacity of 4 blocks (16 tokens)"), std::string::npos)
      << message;
  EXPECT_EQ(cache.UsedBlocks(), 3);
  EXPECT_EQ(cache.Sequences(), std::vector<SequenceId>{0});
  // The pass in progress is still the previous one, and the data is intact.
  ExpectVisibility(cache, Span(0, 0, 10), {});
  Forward(cache, Span(1, 0, 4));  // exactly the free block
  ExpectVisibility(cache, Span(1, 0, 4), {});
  EXPECT_EQ(cache.UsedBlocks(), 4);
}

TEST(CausalCacheTest, ChunkedAttentionSeesOnlyItsChunk) {
  CausalCacheOptions o = test::SmallOptions();
  o.chunk = 3;
  CausalCache cache(o);
  const std::vector<Token> pass = Span(0, 0, 10);
  Forward(cache, pass);
  ExpectVisibility(cache, pass, {0, 3});
  Forward(cache, {{0, 10}, {0, 11}});
  ExpectVisibility(cache, {{0, 10}, {0, 11}}, {0, 3});
}

TEST(CausalCacheTest, WindowAndChunkTogether) {
  CausalCacheOptions o = test::SmallOptions();
  o.window = 5;
  o.memory = 9;
  o.chunk = 4;
  CausalCache cache(o);
  const std::vector<Token> pass = Span(0, 0, 14);
  Forward(cache, pass);
  ExpectVisibility(cache, pass, {5, 4});
}

TEST(CausalCacheTest, NonCausalRowsSeeTheWholePass) {
  CausalCacheOptions o = test::SmallOptions();
  o.window = 3;
  o.max_sequences = 1;
  CausalCache cache(o);
  Forward(cache, Span(0, 0, 2));
  const std::vector<Token> pass{{0, 2}, {0, 3}, {0, 4}, {0, 5}, {0, 6}};
  Forward(cache, pass);
  const BatchHistory before = cache.Get(0);
  cache.SetNonCausalRows(std::vector<std::int64_t>{1, 2});
  ExpectVisibility(cache, pass, {3, 0}, {1, 2});
  // A history taken before keeps what it saw.
  EXPECT_EQ(SeenBy(before, 1), Expected(0, 3, cache.SequencePositions(0), {3, 0}));
  cache.SetNonCausalRows({});
  ExpectVisibility(cache, pass, {3, 0});
  cache.SetNonCausalRows(std::vector<std::int64_t>{0});
  Forward(cache, {{0, 7}});  // reset by the next pass
  ExpectVisibility(cache, {{0, 7}}, {3, 0});
}

TEST(CausalCacheTest, StaleHistoriesThrow) {
  CausalCache cache(test::SmallOptions());
  const BatchHistory h = Forward(cache, Span(0, 0, 3));
  EXPECT_EQ(h.VisibleKeys(2).Dim(2), 3);
  cache.Remove(0, 2, kEndOfSequence);
  EXPECT_NE(test::ErrorOf([&] { (void)h.VisibleKeys(0); }).find("stale"), std::string::npos);
  const BatchHistory h2 = Forward(cache, {{0, 2}});
  Forward(cache, {{0, 3}});
  EXPECT_NE(test::ErrorOf([&] { (void)h2.Rows(); }).find("stale"), std::string::npos);
}

TEST(CausalCacheTest, ReservePassStoresNothing) {
  CausalCache cache(test::SmallOptions());
  Forward(cache, Span(0, 0, 3));
  const std::vector<Position> positions = Iota(0, 32);
  const std::vector<SequenceId> sequences(32, 1);
  cache.StartForward({positions, sequences}, ForwardMode::kReserve);
  EXPECT_EQ(cache.Sequences(), std::vector<SequenceId>{0});
  EXPECT_EQ(cache.UsedBlocks(), 1);
  auto [k, v] = test::Encoded(test::Span(1, 0, 32), 0, cache.Options());
  const BatchHistory h = cache.Update(0, k, v);
  EXPECT_EQ(h.Rows(), 32);
  EXPECT_EQ(h.Heads(), 2);
  EXPECT_EQ(h.KeyDim(), 4);
  EXPECT_EQ(h.ValueDim(), 3);
  for (std::int64_t r = 0; r < 32; ++r) EXPECT_EQ(h.VisibleKeys(r).Dim(2), 0);
  // Sequence 0 is untouched: it continues as before.
  Forward(cache, {{0, 3}});
  ExpectVisibility(cache, {{0, 3}}, {});
}

TEST(CausalCacheTest, ConvertsAnyFloatInputIntoTheStorageDtype) {
  CausalCacheOptions o = test::SmallOptions();
  o.dtype = DType::kF16;
  CausalCache cache(o);
  const std::vector<Token> pass = Span(0, 0, 5);
  const std::vector<Position> positions = Iota(0, 5);
  const std::vector<SequenceId> sequences(5, 0);
  cache.StartForward({positions, sequences});
  for (int layer = 0; layer < 2; ++layer) {
    // bf16 keys and f32 values (transposed strides): small integers are exact in both.
    auto [k, v] = test::Encoded(pass, layer, o, DType::kBF16);
    auto [k32, v32] = test::Encoded(pass, layer, o);
    const Tensor v_strided = v32.Transpose(1, 2).Contiguous().Transpose(1, 2);
    cache.Update(layer, k, v_strided);
  }
  EXPECT_EQ(cache.Get(0).Dtype(), DType::kF16);
  ExpectVisibility(cache, pass, {});
}

TEST(CausalCacheTest, MoveKeepsTheCache) {
  CausalCache cache(test::SmallOptions());
  Forward(cache, Span(0, 0, 5));
  CausalCache moved(std::move(cache));
  EXPECT_EQ(moved.SequencePositions(0), Iota(0, 5));
  CausalCache other(test::SmallOptions());
  other = std::move(moved);
  Forward(other, {{0, 5}});
  ExpectVisibility(other, {{0, 5}}, {});
}

}  // namespace
}  // namespace ringkv
