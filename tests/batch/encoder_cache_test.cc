// EncoderCache: the reference's behaviour (store on a pass with an encoder
// input, nothing in reserve, Remove over the input's position forgets it,
// CanResume always true), made multi-sequence safe: each sequence sees its own
// encoder K/V, CopyPrefix shares them, states round-trip, and attention over a
// history matches the float64 oracle over exactly the sequence's encoder keys.
#include "ringkv/encoder_cache.h"

#include <gtest/gtest.h>

#include <array>
#include <random>
#include <string>
#include <vector>

#include "batch/hand_plan.h"
#include "batch/row_oracle.h"
#include "batch_plan.h"
#include "cache/cache_test_util.h"
#include "ringkv/batch_attention.h"
#include "ringkv/error.h"

namespace ringkv {
namespace {

using test::ErrorOf;
using test::RandomTensor;

constexpr std::int64_t kHq = 4, kHkv = 2, kD = 16, kDv = 8;
constexpr float kScale = 0.25f;
// Measured max abs error against the float64 oracle: 2.7e-7 on every tier.
constexpr double kTol = 1e-6;

struct Encoder {
  Tensor keys, values;  // [1, Hkv, Te, D] / [1, Hkv, Te, Dv], f32
};

Encoder MakeEncoder(std::mt19937& rng, std::int64_t te) {
  return {RandomTensor(rng, {1, kHkv, te, kD}), RandomTensor(rng, {1, kHkv, te, kDv})};
}

// One pass: tokens (seq, pos) in batch order.
struct Pass {
  std::vector<Position> positions;
  std::vector<SequenceId> sequences;
  Batch AsBatch() const { return {positions, sequences}; }
};

// A store pass: `pass` with the encoder input `e` at batch row `row`.
BatchHistory StorePass(EncoderCache& cache, const Pass& pass, std::int64_t row, const Encoder& e) {
  const std::array<std::int64_t, 1> rows{row};
  cache.StartForward(pass.AsBatch());
  cache.SetEncoderRows(rows);
  return cache.Update(0, e.keys, e.values);
}

// The history's row r sees exactly `e` (converted to the cache's dtype), or nothing.
void ExpectSees(const BatchHistory& h, std::int64_t row, const Encoder* e, DType dtype) {
  const Tensor k = h.VisibleKeys(row), v = h.VisibleValues(row);
  if (e == nullptr) {
    EXPECT_EQ(k.Dim(2), 0) << "row " << row;
    EXPECT_EQ(v.Dim(2), 0) << "row " << row;
    return;
  }
  EXPECT_EQ(k.ToVector(), e->keys.AsType(dtype).ToVector()) << "row " << row;
  EXPECT_EQ(v.ToVector(), e->values.AsType(dtype).ToVector()) << "row " << row;
}

class EncoderCacheTest : public ::testing::Test {
 protected:
  std::mt19937 rng_{17};
  Context ctx_{1};
};

TEST_F(EncoderCacheTest, APassWithAnEncoderInputStoresItForItsSequenceAndEveryRowSeesItAll) {
  EncoderCache cache(DType::kF16);
  const Encoder image = MakeEncoder(rng_, 5);
  // Sequence 7: text at 0-1, the image token at 2, text at 3.
  const Pass pass{{0, 1, 2, 3}, {7, 7, 7, 7}};
  cache.StartForward(pass.AsBatch());
  const std::array<std::int64_t, 1> image_row{2};
  cache.SetEncoderRows(image_row);
  EXPECT_FALSE(cache.EncoderCached(7));
  const BatchHistory h = cache.Update(0, image.keys, image.values);
  EXPECT_TRUE(cache.EncoderCached(7));
  EXPECT_EQ(h.Rows(), 4);
  EXPECT_EQ(h.Dtype(), DType::kF16);
  EXPECT_EQ(h.Heads(), kHkv);
  // No causal structure: the rows before the image token see it too.
  for (std::int64_t r = 0; r < 4; ++r) ExpectSees(h, r, &image, DType::kF16);

  const Tensor q = RandomTensor(rng_, {1, kHq, 4, kD});
  const Tensor out = Attention(q, h, kScale, ctx_);
  const Tensor k16 = image.keys.AsType(DType::kF16), v16 = image.values.AsType(DType::kF16);
  for (std::int64_t r = 0; r < 4; ++r) {
    test::ExpectRow(out, r, test::RowOracle(q, r, k16, v16, kDv, kScale), kTol, "encoder");
  }
  // The next pass (decode, no encoder input) reads what was stored; Update stores nothing.
  const Pass decode{{4}, {7}};
  cache.StartForward(decode.AsBatch());
  const Encoder other = MakeEncoder(rng_, 5);
  const BatchHistory later = cache.Update(0, other.keys, other.values);
  ExpectSees(later, 0, &image, DType::kF16);
  ExpectSees(cache.Get(0), 0, &image, DType::kF16);
  EXPECT_TRUE(cache.CanResume(7, 5));
  EXPECT_TRUE(cache.CanResume(99, 0));  // the reference: always
}

TEST_F(EncoderCacheTest, EachSequenceSeesItsOwnEncoderOutputInAMixedBatch) {
  EncoderCache cache(DType::kF32);
  const Encoder a = MakeEncoder(rng_, 3), b = MakeEncoder(rng_, 6);
  const Pass first{{0, 1}, {1, 1}};
  cache.StartForward(first.AsBatch());
  const std::array<std::int64_t, 1> row0{0};
  cache.SetEncoderRows(row0);
  cache.Update(0, a.keys, a.values);

  // Sequences 1 (decode), 2 (prefill with its image at row 2), 3 (no image).
  const Pass mixed{{2, 0, 1, 2, 0}, {1, 2, 2, 2, 3}};
  cache.StartForward(mixed.AsBatch());
  const std::array<std::int64_t, 1> row2{2};
  cache.SetEncoderRows(row2);
  const BatchHistory h = cache.Update(0, b.keys, b.values);
  EXPECT_TRUE(cache.EncoderCached(1));
  EXPECT_TRUE(cache.EncoderCached(2));
  EXPECT_FALSE(cache.EncoderCached(3));
  const std::array<const Encoder*, 5> sees{&a, &b, &b, &b, nullptr};
  for (std::int64_t r = 0; r < 5; ++r)
    ExpectSees(h, r, sees[static_cast<std::size_t>(r)], DType::kF32);
  const Tensor q = RandomTensor(rng_, {1, kHq, 5, kD});
  Tensor out = RandomTensor(rng_, {1, kHq, 5, kDv});
  Attention(q, h, kScale, ctx_, out);
  for (std::int64_t r = 0; r < 5; ++r) {
    const Encoder* e = sees[static_cast<std::size_t>(r)];
    test::ExpectRow(out, r,
                    e == nullptr ? test::RowOracle(q, r, Tensor(), Tensor(), kDv, kScale)
                                 : test::RowOracle(q, r, e->keys, e->values, kDv, kScale),
                    kTol, "mixed");
  }
}

TEST_F(EncoderCacheTest, AReservePassAndAPassWithoutEncoderRowsStoreNothing) {
  EncoderCache cache;
  const Encoder e = MakeEncoder(rng_, 4);
  const Pass pass{{0, 1}, {5, 5}};
  const std::array<std::int64_t, 1> row1{1};
  cache.StartForward(pass.AsBatch(), ForwardMode::kReserve);
  cache.SetEncoderRows(row1);
  const BatchHistory reserved = cache.Update(0, e.keys, e.values);
  EXPECT_FALSE(cache.EncoderCached(5));
  EXPECT_EQ(reserved.Rows(), 2);
  ExpectSees(reserved, 1, nullptr, DType::kF16);
  cache.StartForward(pass.AsBatch());
  cache.Update(0, e.keys, e.values);
  EXPECT_FALSE(cache.EncoderCached(5));
  // Rows of a pass when no sequence holds the layer: no keys, attention refuses.
  const Tensor q = RandomTensor(rng_, {1, kHq, 2, kD});
  EXPECT_NE(ErrorOf([&] {
              (void)Attention(q, cache.Get(0), kScale, ctx_);
            }).find("holds no keys for any of its 2 rows"),
            std::string::npos);
}

TEST_F(EncoderCacheTest, LayersAreSeparateAndANewEncoderInputReplacesEveryLayer) {
  EncoderCache cache(DType::kBF16);
  const Encoder l0 = MakeEncoder(rng_, 3), l1 = MakeEncoder(rng_, 3), again = MakeEncoder(rng_, 2);
  const Pass pass{{0}, {1}};
  StorePass(cache, pass, 0, l0);
  cache.Update(1, l1.keys, l1.values);
  ExpectSees(cache.Get(0), 0, &l0, DType::kBF16);
  ExpectSees(cache.Get(1), 0, &l1, DType::kBF16);
  ExpectSees(cache.Get(2), 0, nullptr, DType::kBF16);
  // A second image for sequence 1: its first Update drops layer 1 of the old one.
  const Pass second{{5}, {1}};
  StorePass(cache, second, 0, again);
  ExpectSees(cache.Get(0), 0, &again, DType::kBF16);
  ExpectSees(cache.Get(1), 0, nullptr, DType::kBF16);
  // Removing where the old image was (position 0) leaves the new one.
  cache.Remove(1, 0, 1);
  EXPECT_TRUE(cache.EncoderCached(1));
}

TEST_F(EncoderCacheTest, CopyPrefixSharesTheSourcesKvWhenThePrefixHoldsTheEncoderInput) {
  EncoderCache cache;
  const Encoder e = MakeEncoder(rng_, 4), own = MakeEncoder(rng_, 2);
  const Pass pass{{0, 1, 2, 3}, {1, 1, 1, 1}};  // the image token at position 2
  StorePass(cache, pass, 2, e);
  const Pass other{{0, 1, 2}, {9, 9, 9}};
  StorePass(cache, other, 2, own);
  ASSERT_TRUE(cache.EncoderCached(9));

  cache.CopyPrefix(1, 4, 3);  // positions [0, 3) hold the image token
  EXPECT_TRUE(cache.EncoderCached(4));
  cache.CopyPrefix(1, 9, 2);  // [0, 2) does not: 9's own encoder output is dropped
  EXPECT_FALSE(cache.EncoderCached(9));
  cache.CopyPrefix(1, 1, 3);  // onto itself, keeping the input
  EXPECT_TRUE(cache.EncoderCached(1));

  const Pass both{{3, 3}, {1, 4}};
  cache.StartForward(both.AsBatch());
  const BatchHistory h = cache.Get(0);
  ExpectSees(h, 0, &e, DType::kF16);
  ExpectSees(h, 1, &e, DType::kF16);
  // No copy: both groups read the same bytes.
  const detail::BatchPlan* plan = detail::BatchAccess::Current(h, "test");
  ASSERT_EQ(plan->runs.size(), 2u);
  EXPECT_EQ(plan->runs[0].k, plan->runs[1].k);
  EXPECT_EQ(plan->runs[0].v, plan->runs[1].v);

  cache.CopyPrefix(1, 1, 2);  // truncating onto itself past the input forgets it
  EXPECT_FALSE(cache.EncoderCached(1));
  EXPECT_TRUE(cache.EncoderCached(4));  // dst's share is its own
  EXPECT_NE(ErrorOf([&] {
              cache.CopyPrefix(4, 5, -1);
            }).find("[EncoderCache::CopyPrefix] len -1 is negative"),
            std::string::npos);
  EXPECT_FALSE(cache.EncoderCached(5));
}

TEST_F(EncoderCacheTest, RemoveForgetsOverThePositionAndMovesItWithTheTokensAfterARange) {
  EncoderCache cache;
  const Encoder e = MakeEncoder(rng_, 2);
  const Pass pass{{10}, {3}};
  StorePass(cache, pass, 0, e);
  cache.Remove(3, 11, kEndOfSequence);  // truncation after it
  cache.Remove(3, 0, 10);               // [0, 10) before it: it moves to 0 (the reference keeps 10)
  cache.Remove(3, 5, 10);               // where it was: nothing there now
  EXPECT_TRUE(cache.EncoderCached(3));
  cache.Remove(42, 0, kEndOfSequence);  // an unknown sequence: nothing to do
  EXPECT_NE(ErrorOf([&] {
              cache.Remove(3, 4, 2);
            }).find("[EncoderCache::Remove] range [4, 2) of sequence 3"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { cache.Remove(3, -1, 2); }).find("range [-1, 2)"), std::string::npos);
  EXPECT_TRUE(cache.EncoderCached(3));
  cache.Remove(3, 0, 1);
  EXPECT_FALSE(cache.EncoderCached(3));
}

TEST_F(EncoderCacheTest, StatesRoundTripAndRestoreOnlyIntoTheirCache) {
  EncoderCache cache;
  const Encoder e = MakeEncoder(rng_, 3), f = MakeEncoder(rng_, 5);
  const Pass pass{{0}, {1}};
  StorePass(cache, pass, 0, e);
  const std::unique_ptr<SequenceCache::State> saved = cache.SaveState();

  cache.CopyPrefix(1, 2, 1);
  const Pass next{{0}, {1}};
  StorePass(cache, next, 0, f);
  cache.Remove(2, 0, 1);
  ExpectSees(cache.Get(0), 0, &f, DType::kF16);

  cache.RestoreState(*saved);
  EXPECT_TRUE(cache.EncoderCached(1));
  EXPECT_FALSE(cache.EncoderCached(2));
  // The pass is the saved one too.
  const BatchHistory h = cache.Get(0);
  EXPECT_EQ(h.Rows(), 1);
  ExpectSees(h, 0, &e, DType::kF16);

  EncoderCache other;
  const std::unique_ptr<SequenceCache::State> foreign = other.SaveState();
  EXPECT_NE(ErrorOf([&] {
              cache.RestoreState(*foreign);
            }).find("[EncoderCache::RestoreState] the state was not saved by this cache"),
            std::string::npos);
  ExpectSees(cache.Get(0), 0, &e, DType::kF16);
  // A moved cache keeps its identity (and its histories).
  const BatchHistory before_move = cache.Get(0);
  EncoderCache moved(std::move(cache));
  ExpectSees(before_move, 0, &e, DType::kF16);
  moved.RestoreState(*saved);
}

TEST_F(EncoderCacheTest, SequenceOperationsMakeHistoriesStaleButUpdateDoesNot) {
  EncoderCache cache;
  const Encoder e = MakeEncoder(rng_, 3), f = MakeEncoder(rng_, 3);
  const Pass pass{{0}, {1}};
  const BatchHistory first = StorePass(cache, pass, 0, e);
  const BatchHistory second = cache.Update(0, f.keys, f.values);  // replaces layer 0
  ExpectSees(first, 0, &e, DType::kF16);  // still valid, reading what it was given
  ExpectSees(second, 0, &f, DType::kF16);
  const auto stale = [](const BatchHistory& history) {
    try {
      (void)history.Rows();
      return false;
    } catch (const Error& error) {
      return std::string(error.what()).find("stale") != std::string::npos;
    }
  };
  cache.CopyPrefix(1, 2, 1);
  EXPECT_TRUE(stale(second));
  BatchHistory h = cache.Get(0);
  cache.Remove(2, 0, 1);
  EXPECT_TRUE(stale(h));
  h = cache.Get(0);
  const std::unique_ptr<SequenceCache::State> s = cache.SaveState();
  EXPECT_FALSE(stale(h));
  cache.RestoreState(*s);
  EXPECT_TRUE(stale(h));
  h = cache.Get(0);
  cache.StartForward(pass.AsBatch());
  EXPECT_TRUE(stale(h));
}

TEST_F(EncoderCacheTest, BadInputThrowsNamingTheValuesAndChangesNothing) {
  EncoderCache cache;
  const Encoder e = MakeEncoder(rng_, 3);
  const Pass pass{{0, 4, 0}, {1, 1, 2}};
  cache.StartForward(pass.AsBatch());
  const std::array<std::int64_t, 1> row0{0};
  cache.SetEncoderRows(row0);
  cache.Update(0, e.keys, e.values);

  const std::array<Position, 2> two_positions{0, 1};
  const std::array<SequenceId, 1> one_sequence{1};
  EXPECT_NE(ErrorOf([&] {
              cache.StartForward({two_positions, one_sequence});
            })
                .find("[EncoderCache::StartForward] batch.positions has 2 entries but "
                      "batch.sequences has 1"),
            std::string::npos);
  const std::array<std::int64_t, 1> row3{3};
  EXPECT_NE(ErrorOf([&] {
              cache.SetEncoderRows(row3);
            }).find("[EncoderCache::SetEncoderRows] row 3 is outside the pass's 3 rows [0, 3)"),
            std::string::npos);
  const std::array<std::int64_t, 2> two_sequences{1, 2};
  EXPECT_NE(ErrorOf([&] { cache.SetEncoderRows(two_sequences); })
                .find("rows 1 (sequence 1) and 2 (sequence 2) are encoder inputs of different "
                      "sequences"),
            std::string::npos);
  const std::array<std::int64_t, 1> row2{2};
  cache.SetEncoderRows(row2);  // sequence 2, position 0
  const Tensor bad_heads = RandomTensor(rng_, {1, kHkv + 1, 3, kD});
  const Tensor bad_values = RandomTensor(rng_, {1, kHkv + 1, 3, kDv});
  EXPECT_NE(ErrorOf([&] {
              cache.Update(0, bad_heads, bad_values);
            }).find("[EncoderCache::Update] keys dim 1 (heads) is 3, but the cache holds 2"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              cache.Update(0, e.keys, e.values.Slice(2, 0, 2));
            }).find("[EncoderCache::Update] keys dim 2 (length) is 3, but values dim 2 is 2"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              cache.Update(-1, e.keys, e.values);
            }).find("[EncoderCache::Update] layer -1 is negative"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { (void)cache.Get(-2); }).find("[EncoderCache::Get] layer -2 is negative"),
            std::string::npos);
  EXPECT_FALSE(cache.EncoderCached(2));
  // Another layer may have its own shape.
  cache.Update(1, bad_heads, bad_values);
  EXPECT_TRUE(cache.EncoderCached(2));
  EXPECT_NE(ErrorOf([] { EncoderCache bad(static_cast<DType>(9)); }).find("EncoderCache"),
            std::string::npos);
}

}  // namespace
}  // namespace ringkv
