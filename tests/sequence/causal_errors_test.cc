// Bad input to CausalCache: every refused call throws ringkv::Error naming the
// argument and its values, and changes nothing (positions held, used blocks,
// the stored K/V and the pass in progress are checked after each).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "cache/cache_test_util.h"
#include "ringkv/causal_cache.h"
#include "ringkv/tensor_ops.h"
#include "sequence/sequence_test_util.h"

namespace ringkv {
namespace {

using test::Forward;
using test::Iota;
using test::SeenBy;
using test::Span;
using test::Token;

void ExpectMessage(const std::string& message, const std::vector<std::string>& parts) {
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << message << "\nwant: " << part;
  }
}

// A cache holding sequence 0 at [0, 6) and sequence 1 at [0, 3), with the pass
// of sequence 1's tokens in progress; Unchanged() checks all of it.
class CausalErrorsTest : public ::testing::Test {
 protected:
  explicit CausalErrorsTest(CausalCacheOptions o = test::SmallOptions()) : cache_(o) {
    Forward(cache_, Span(0, 0, 6));
    Forward(cache_, Span(1, 0, 3));
    used_ = cache_.UsedBlocks();
  }

  void Unchanged() {
    EXPECT_EQ(cache_.Sequences(), (std::vector<SequenceId>{0, 1}));
    EXPECT_EQ(cache_.SequencePositions(0), Iota(0, 6));
    EXPECT_EQ(cache_.SequencePositions(1), Iota(0, 3));
    EXPECT_EQ(cache_.UsedBlocks(), used_);
    // The pass in progress still reads the stored tokens.
    const BatchHistory h = cache_.Get(1);
    for (std::int64_t r = 0; r < 3; ++r) {
      EXPECT_EQ(SeenBy(h, r, 1), Span(1, 0, static_cast<Position>(r) + 1));
    }
  }

  CausalCache cache_;
  std::int64_t used_ = 0;
};

std::string StartError(CausalCache& cache, std::vector<Position> positions,
                       std::vector<SequenceId> sequences) {
  return test::ErrorOf([&] { cache.StartForward({positions, sequences}); });
}

TEST_F(CausalErrorsTest, BatchSizes) {
  ExpectMessage(StartError(cache_, {6, 7}, {0}),
                {"[CausalCache::StartForward]", "batch.positions has 2", "batch.sequences 1"});
  Unchanged();
  ExpectMessage(StartError(cache_, {}, {}), {"[CausalCache::StartForward]", "no tokens"});
  Unchanged();
  ExpectMessage(StartError(cache_, Iota(6, 39), std::vector<SequenceId>(33, 0)),
                {"33 tokens", "options.max_batch 32"});
  Unchanged();
}

TEST_F(CausalErrorsTest, Positions) {
  ExpectMessage(StartError(cache_, {6, -1}, {0, 0}), {"position -1 (row 1)", "outside"});
  Unchanged();
  ExpectMessage(StartError(cache_, {6, 7, 6}, {0, 0, 0}),
                {"rows 0 and 2 both hold position 6 of sequence 0"});
  Unchanged();
  ExpectMessage(StartError(cache_, {6, 4}, {0, 0}),
                {"position 4 of sequence 0 (batch row 1) is already stored"});
  Unchanged();
}

TEST_F(CausalErrorsTest, TooManySequences) {
  ExpectMessage(StartError(cache_, {0, 0, 0}, {5, 6, 7}),
                {"adds 3 new sequences to the 2 held", "options.max_sequences 4"});
  Unchanged();
  ExpectMessage(test::ErrorOf([&] {
                  cache_.CopyPrefix(0, 2, 3);
                  cache_.CopyPrefix(0, 3, 3);
                  cache_.CopyPrefix(0, 4, 3);
                }),
                {"[CausalCache::CopyPrefix] sequence 4", "options.max_sequences 4"});
}

TEST_F(CausalErrorsTest, UpdateShapes) {
  const CausalCacheOptions& o = cache_.Options();
  const auto update = [&](std::int64_t heads, std::int64_t n, std::int64_t d, std::int64_t dv,
                          int layer = 0) {
    return test::ErrorOf([&] {
      cache_.Update(layer, Tensor::Zeros(DType::kF32, {1, heads, n, d}),
                    Tensor::Zeros(DType::kF32, {1, heads, n, dv}));
    });
  };
  ExpectMessage(update(3, 3, 4, 3), {"[CausalCache::Update]", "heads) is 3", "holds 2"});
  Unchanged();
  ExpectMessage(update(2, 3, 5, 3), {"keys dim 3 (head dim) is 5", "holds 4"});
  Unchanged();
  ExpectMessage(update(2, 3, 4, 8), {"values dim 3 (head dim) is 8", "holds 3"});
  Unchanged();
  ExpectMessage(update(2, 4, 4, 3), {"keys dim 2 (tokens) is 4", "the forward pass has 3"});
  Unchanged();
  ExpectMessage(update(2, 3, 4, 3, 2), {"layer 2 is outside [0, 2)"});
  Unchanged();
  ExpectMessage(update(2, 3, 4, 3, -1), {"layer -1 is outside [0, 2)"});
  Unchanged();
  ExpectMessage(test::ErrorOf([&] { (void)cache_.Get(7); }),
                {"[CausalCache::Get] layer 7 is outside [0, 2)"});
  ExpectMessage(test::ErrorOf([&] {
                  cache_.Update(0, Tensor::Zeros(DType::kF32, {2, 2, 3, o.key_dim}),
                                Tensor::Zeros(DType::kF32, {2, 2, 3, o.value_dim}));
                }),
                {"only B = 1"});
  Unchanged();
  ExpectMessage(test::ErrorOf([&] {
                  cache_.Update(0, Tensor::Zeros(DType::kF32, {2, 3, o.key_dim}),
                                Tensor::Zeros(DType::kF32, {1, 2, 3, o.value_dim}));
                }),
                {"keys has rank 3"});
  Unchanged();
}

TEST_F(CausalErrorsTest, NoPass) {
  cache_.Remove(1, 3, kEndOfSequence);  // ends the pass
  ExpectMessage(test::ErrorOf([&] { (void)cache_.Get(0); }),
                {"[CausalCache::Get] no forward pass"});
  ExpectMessage(test::ErrorOf([&] {
                  auto [k, v] = test::Encoded(Span(1, 0, 3), 0, cache_.Options());
                  cache_.Update(0, k, v);
                }),
                {"[CausalCache::Update] no forward pass"});
  ExpectMessage(test::ErrorOf([&] { cache_.SetNonCausalRows({}); }),
                {"[CausalCache::SetNonCausalRows] no forward pass"});
}

TEST_F(CausalErrorsTest, NonCausalRowsOutOfRange) {
  const std::vector<std::int64_t> rows{0, 3};
  ExpectMessage(test::ErrorOf([&] { cache_.SetNonCausalRows(rows); }),
                {"row 3 is outside the pass's rows [0, 3)"});
  Unchanged();
}

TEST_F(CausalErrorsTest, UnknownSequences) {
  ExpectMessage(test::ErrorOf([&] { cache_.CopyPrefix(9, 2, 3); }),
                {"[CausalCache::CopyPrefix] sequence 9 is unknown"});
  Unchanged();
  ExpectMessage(test::ErrorOf([&] { (void)cache_.SnapshotSequence(9); }),
                {"[CausalCache::SnapshotSequence] sequence 9 is unknown"});
  Unchanged();
  EXPECT_TRUE(cache_.SequencePositions(9).empty());
  ExpectMessage(test::ErrorOf([&] { cache_.CopyPrefix(0, 2, -1); }), {"len -1 is negative"});
  Unchanged();
}

TEST_F(CausalErrorsTest, RemoveRanges) {
  ExpectMessage(test::ErrorOf([&] { cache_.Remove(0, 4, 2); }),
                {"[CausalCache::Remove] the range [4, 2)"});
  Unchanged();
  ExpectMessage(test::ErrorOf([&] { cache_.Remove(0, -1, 2); }), {"the range [-1, 2)"});
  Unchanged();
  // Tokens after the range would move, and there is no shift function.
  ExpectMessage(
      test::ErrorOf([&] { cache_.Remove(0, 1, 3); }),
      {"removing positions [1, 3) of sequence 0 moves 3 tokens by -2", "no shift function"});
  Unchanged();
}

CausalCacheOptions WithShift(ShiftFn shift) {
  CausalCacheOptions o = test::SmallOptions();
  o.shift = std::move(shift);
  return o;
}

class ThrowingShiftTest : public CausalErrorsTest {
 protected:
  ThrowingShiftTest()
      : CausalErrorsTest(WithShift([this](const ShiftRequest& r) {
          // Scribbles over the scratch keys first: none of it may reach the cache.
          SliceUpdate(r.keys, Tensor::Zeros(r.keys.Dtype(), r.keys.GetShape()), 2, 0);
          if (r.layer == throw_at_) throw std::runtime_error("shift failed");
        })) {}
  int throw_at_ = 1;
};

TEST_F(ThrowingShiftTest, ACallbackThatThrowsChangesNothing) {
  cache_.CopyPrefix(0, 2, 6);  // the blocks are shared: Remove would clone
  const std::int64_t used = cache_.UsedBlocks();
  EXPECT_THROW(cache_.Remove(0, 1, 3), std::runtime_error);
  EXPECT_EQ(cache_.UsedBlocks(), used);
  EXPECT_EQ(cache_.SequencePositions(0), Iota(0, 6));
  EXPECT_EQ(cache_.SequencePositions(2), Iota(0, 6));
  Forward(cache_, {{0, 6}});
  EXPECT_EQ(SeenBy(cache_.Get(0), 0), Span(0, 0, 7));
  // Layer 0 succeeding first does not matter either.
  throw_at_ = 0;
  EXPECT_THROW(cache_.Remove(0, 1, 3), std::runtime_error);
  Forward(cache_, {{0, 7}});
  EXPECT_EQ(SeenBy(cache_.Get(1), 0, 1), Span(0, 0, 8));
}

TEST(CausalShiftShapeTest, ACallbackThatReplacesTheKeysIsRefused) {
  CausalCache cache(WithShift([](const ShiftRequest& r) {
    r.keys = Tensor::Zeros(DType::kF32, {1, 2, 1, 4});
  }));
  Forward(cache, Span(0, 0, 6));
  ExpectMessage(
      test::ErrorOf([&] { cache.Remove(0, 1, 3); }),
      {"the shift function left layer 0's keys as f32 [1, 2, 1, 4]", "expected f32 [1, 2, 3, 4]"});
  EXPECT_EQ(cache.SequencePositions(0), Iota(0, 6));
}

TEST_F(CausalErrorsTest, ForeignStatesAndSnapshots) {
  CausalCache other(test::SmallOptions());
  Forward(other, Span(0, 0, 2));
  const std::unique_ptr<SequenceCache::State> state = other.SaveState();
  ExpectMessage(test::ErrorOf([&] { cache_.RestoreState(*state); }),
                {"[CausalCache::RestoreState]", "another CausalCache"});
  Unchanged();

  CausalCacheOptions o = test::SmallOptions();
  o.dtype = DType::kF16;
  CausalCache f16(o);
  Forward(f16, Span(0, 0, 2));
  const std::unique_ptr<SequenceSnapshot> snapshot = f16.SnapshotSequence(0);
  ExpectMessage(test::ErrorOf([&] { cache_.RestoreSequence(2, *snapshot); }),
                {"[CausalCache::RestoreSequence]", "f16", "f32"});
  Unchanged();

  o.dtype = DType::kI8;
  o.key_dim = 32;
  o.value_dim = 32;
  CausalCache int8(o);
  Forward(int8, Span(0, 0, 2));
  const std::unique_ptr<SequenceSnapshot> quantized = int8.SnapshotSequence(0);
  ExpectMessage(test::ErrorOf([&] { cache_.RestoreSequence(2, *quantized); }),
                {"[CausalCache::RestoreSequence]", "32/32 int8/int8", "4/3 f32/f32"});
  Unchanged();

  // A snapshot from another cache that does not fit: cache full, nothing changed.
  o = test::SmallOptions();
  o.capacity_tokens = 128;
  CausalCache big(o);
  Forward(big, Span(0, 0, 32));
  Forward(big, Span(0, 32, 32));
  const std::unique_ptr<SequenceSnapshot> large = big.SnapshotSequence(0);
  ExpectMessage(test::ErrorOf([&] { cache_.RestoreSequence(2, *large); }),
                {"cache full", "64 tokens need 16 blocks"});
  Unchanged();
}

TEST(CausalOptionsTest, InconsistentOptionsAreNamed) {
  const auto error = [](auto edit) {
    CausalCacheOptions o = test::SmallOptions();
    edit(o);
    return test::ErrorOf([&] { CausalCache cache(o); });
  };
  ExpectMessage(error([](CausalCacheOptions& o) { o.layers = 0; }), {"options.layers is 0"});
  ExpectMessage(error([](CausalCacheOptions& o) { o.kv_heads = -2; }), {"options.kv_heads is -2"});
  ExpectMessage(error([](CausalCacheOptions& o) { o.key_dim = 0; }), {"options.key_dim is 0"});
  ExpectMessage(error([](CausalCacheOptions& o) { o.value_dim = 0; }), {"options.value_dim is 0"});
  ExpectMessage(error([](CausalCacheOptions& o) { o.key_dim = std::int64_t{1} << 40; }),
                {"options.key_dim is 1099511627776, at most 2147483647"});
  ExpectMessage(error([](CausalCacheOptions& o) { o.block_tokens = 0; }),
                {"options.block_tokens is 0"});
  ExpectMessage(error([](CausalCacheOptions& o) { o.max_sequences = 0; }),
                {"options.max_sequences is 0"});
  ExpectMessage(error([](CausalCacheOptions& o) { o.max_batch = 0; }), {"options.max_batch is 0"});
  ExpectMessage(error([](CausalCacheOptions& o) { o.capacity_bytes = 4096; }),
                {"options.capacity_tokens is 64 and options.capacity_bytes is 4096"});
  ExpectMessage(error([](CausalCacheOptions& o) { o.capacity_tokens = 3; }),
                {"less than one block of 4 tokens"});
  ExpectMessage(error([](CausalCacheOptions& o) { o.memory = 5; }),
                {"options.memory is 5 without a window"});
  ExpectMessage(error([](CausalCacheOptions& o) {
                  o.window = 8;
                  o.memory = 4;
                }),
                {"options.memory 4 is smaller than options.window 8"});
  ExpectMessage(error([](CausalCacheOptions& o) { o.chunk = -1; }), {"options.chunk is -1"});
  ExpectMessage(error([](CausalCacheOptions& o) { o.dtype = static_cast<DType>(42); }), {"dtype"});
  ExpectMessage(error([](CausalCacheOptions& o) { o.value_dtype = static_cast<DType>(42); }),
                {"options.value_dtype is 42, not one of f32, f16, bf16, int8, int4, int4h"});
  ExpectMessage(error([](CausalCacheOptions& o) {
                  o.dtype = DType::kI8;
                  o.value_dtype = DType::kF16;
                }),
                {"options.dtype is int8 and options.value_dtype f16: keys and values are either "
                 "one float dtype or both quantized"});
  ExpectMessage(error([](CausalCacheOptions& o) { o.value_dtype = DType::kF16; }),
                {"options.dtype is f32 and options.value_dtype f16"});
  ExpectMessage(error([](CausalCacheOptions& o) { o.dtype = DType::kI4H; }),
                {"options.dtype is int4h, which needs options.key_dim to be a multiple of 32, but "
                 "it is 4"});
  ExpectMessage(error([](CausalCacheOptions& o) {
                  o.dtype = DType::kI8;
                  o.value_dtype = DType::kI4;
                }),
                {"options.value_dtype is int4, which needs options.value_dim to be a multiple of "
                 "32, but it is 3"});
}

TEST(CausalOptionsTest, QuantizedBlocksCountTheirScalesAndPadding) {
  CausalCacheOptions o = test::SmallOptions();
  o.key_dim = 30;    // int8: 30 bytes + a 4-byte scale, padded to 36
  o.value_dim = 64;  // int4: 32 bytes + 2 scales = 40
  o.dtype = DType::kI8;
  o.value_dtype = DType::kI4;
  o.capacity_tokens = 0;
  // 2 layers x 2 heads x (36 + 40) bytes x 4 tokens = 1216 bytes per block.
  o.capacity_bytes = 1216 * 3;
  CausalCache cache(o);
  EXPECT_EQ(cache.BytesPerBlock(), 1216u);
  EXPECT_EQ(cache.CapacityBlocks(), 3);
}

TEST(CausalOptionsTest, CapacityInBytesRoundsDownToBlocks) {
  CausalCacheOptions o = test::SmallOptions();
  o.capacity_tokens = 0;
  // 2 layers x 2 heads x (4 + 3) x 4 bytes x 4 tokens = 448 bytes per block.
  o.capacity_bytes = 448 * 5 + 100;
  CausalCache cache(o);
  EXPECT_EQ(cache.BytesPerBlock(), 448u);
  EXPECT_EQ(cache.CapacityBlocks(), 5);
  EXPECT_EQ(cache.UsedBlocks(), 0);
}

}  // namespace
}  // namespace ringkv
