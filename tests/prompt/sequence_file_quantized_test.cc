// SaveSequence / LoadSequence with quantized pools: the stored rows go to the
// file and back as bits (never dequantised and requantized), a pool of other
// dtypes refuses the file naming both, and a row the loader would refuse (a NaN
// scale) is never written.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <vector>

#include "cache/cache_test_util.h"
#include "file_craft.h"
#include "ringkv/causal_cache.h"
#include "ringkv/sequence_file.h"
#include "scratch_dir.h"
#include "sequence_test_util.h"

namespace ringkv::test {
namespace {

constexpr std::int64_t kHeads = kSeqHeads;
constexpr std::int64_t kKeyDim = 32;
constexpr std::int64_t kValueDim = 64;
constexpr Position kWindow = 8;

// The sequence tests' pool, with head dims int4 can hold and quantized storage.
CausalCacheOptions Pool(int layers, DType keys, DType values, std::int64_t block_tokens,
                        Position window = 0) {
  CausalCacheOptions o = SeqOptions(layers, 64 * block_tokens, block_tokens, 4, window);
  o.key_dim = kKeyDim;
  o.value_dim = kValueDim;
  o.dtype = keys;
  if (values != keys) o.value_dtype = values;
  return o;
}

// Unit-scale K/V that differ per position, layer, head and element.
Tensor Kv(std::span<const Position> positions, int layer, std::int64_t dim, float salt) {
  const auto n = static_cast<std::int64_t>(positions.size());
  std::vector<float> out(static_cast<std::size_t>(kHeads * n * dim));
  for (std::int64_t h = 0; h < kHeads; ++h) {
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t d = 0; d < dim; ++d) {
        const auto p = static_cast<float>(positions[static_cast<std::size_t>(i)]);
        out[static_cast<std::size_t>((h * n + i) * dim + d)] =
            std::sin(p * 0.37f + static_cast<float>(d) * 1.3f + static_cast<float>(h + layer) +
                     salt) *
            (d % 7 == 3 ? 6.0f : 1.0f);
      }
    }
  }
  return Tensor::FromVector(out, {1, kHeads, n, dim});
}

void FeedKv(CausalCache& cache, SequenceId seq, Position from, Position to) {
  const std::vector<Position> positions = PositionRange(from, to);
  const std::vector<SequenceId> sequences(positions.size(), seq);
  cache.StartForward(Batch{positions, sequences});
  for (int l = 0; l < cache.Options().layers; ++l) {
    cache.Update(l, Kv(positions, l, kKeyDim, 0.0f), Kv(positions, l, kValueDim, 0.5f));
  }
}

// Every layer's stored rows of `seq`, packed, keys then values.
std::vector<std::vector<std::byte>> Rows(const CausalCache& cache, SequenceId seq) {
  const std::unique_ptr<SequenceSnapshot> snapshot = cache.SnapshotSequence(seq);
  std::vector<std::vector<std::byte>> out;
  for (int l = 0; l < cache.Options().layers; ++l) {
    out.push_back(detail::PackedSequenceRows(*snapshot, l, true));
    out.push_back(detail::PackedSequenceRows(*snapshot, l, false));
  }
  return out;
}

class QuantizedSequenceFile : public ::testing::Test {
 protected:
  QuantizedSequenceFile()
      : sliding_(Pool(2, DType::kI8, DType::kI4H, 4, kWindow)),
        global_(Pool(1, DType::kI4, DType::kI4, 4)) {
    for (Position p = 0; p < 30; p += 5) {
      FeedKv(sliding_, 2, p, p + 5);
      FeedKv(global_, 2, p, p + 5);
    }
  }

  std::string Save() {
    const CausalCache* caches[] = {&sliding_, &global_};
    const std::string path = dir_.File("seq.safetensors");
    SaveSequence(path, caches, 2, tokens_, {});
    return path;
  }

  std::vector<int> tokens_ = std::vector<int>(30, 7);
  CausalCache sliding_;
  CausalCache global_;
  ScratchDir dir_;
};

TEST_F(QuantizedSequenceFile, StoredRowsComeBackBitForBit) {
  ASSERT_GT(sliding_.SequencePositions(2).front(), 0) << "the window slid";
  const std::string path = Save();
  CausalCache* caches[] = {&sliding_, &global_};
  const SavedSequence loaded = LoadSequence(path, caches, 6);
  EXPECT_EQ(loaded.next_position, 30);
  for (const CausalCache* cache : {&sliding_, &global_}) {
    EXPECT_EQ(cache->SequencePositions(6), cache->SequencePositions(2));
    EXPECT_EQ(Rows(*cache, 6), Rows(*cache, 2));
  }
  // Into pools of the same dtypes with another block size, over a sequence they held.
  CausalCache other_sliding(Pool(2, DType::kI8, DType::kI4H, 5, kWindow));
  CausalCache other_global(Pool(1, DType::kI4, DType::kI4, 5));
  FeedKv(other_sliding, 1, 0, 3);
  FeedKv(other_global, 1, 0, 3);
  CausalCache* other[] = {&other_sliding, &other_global};
  LoadSequence(path, other, 1);
  EXPECT_EQ(other_sliding.SequencePositions(1), sliding_.SequencePositions(2));
  EXPECT_EQ(Rows(other_sliding, 1), Rows(sliding_, 2));
  EXPECT_EQ(Rows(other_global, 1), Rows(global_, 2));

  // Both decode on: the next token's rows see the same values.
  FeedKv(other_global, 1, 30, 31);
  const std::vector<Position> next{30, 30};
  const std::vector<SequenceId> both{2, 6};
  global_.StartForward(Batch{next, both});
  const BatchHistory history =
      global_.Update(0, Kv(next, 0, kKeyDim, 0.0f), Kv(next, 0, kValueDim, 0.5f));
  EXPECT_EQ(history.VisibleKeys(1).ToVector(), history.VisibleKeys(0).ToVector());
  EXPECT_EQ(history.VisibleValues(1).ToVector(), history.VisibleValues(0).ToVector());
  EXPECT_EQ(other_global.SequencePositions(1), global_.SequencePositions(2));
}

TEST_F(QuantizedSequenceFile, PoolsOfOtherDtypesRefuseTheFileNamingBoth) {
  const std::string path = Save();
  const auto refusal = [&](CausalCacheOptions sliding) {
    CausalCache s(sliding);
    CausalCache g(Pool(1, DType::kI4, DType::kI4, 4));
    CausalCache* caches[] = {&s, &g};
    const std::string message = ErrorOf([&] { LoadSequence(path, caches, 0); });
    EXPECT_TRUE(s.Sequences().empty() && g.Sequences().empty()) << message;
    return message;
  };
  EXPECT_NE(refusal(Pool(2, DType::kI8, DType::kI4, 4, kWindow))
                .find("caches[0].dtype is int8 keys / int4h values in the file, int8 keys / int4 "
                      "values in the pool"),
            std::string::npos);
  CausalCacheOptions f16 = Pool(2, DType::kF16, DType::kF16, 4, kWindow);
  const std::string message = refusal(f16);
  EXPECT_NE(
      message.find("caches[0].dtype is int8 keys / int4h values in the file, f16 in the pool"),
      std::string::npos)
      << message;
}

TEST_F(QuantizedSequenceFile, EveryFlippedByteAndEveryTruncationIsRefused) {
  CausalCache small(Pool(1, DType::kI8, DType::kI4H, 4));
  FeedKv(small, 0, 0, 2);
  const CausalCache* save[] = {&small};
  const std::vector<int> tokens{1, 2};
  SaveSequence(dir_.File("small.safetensors"), save, 0, tokens, {});
  const std::vector<std::byte> valid = ReadBytes(dir_.File("small.safetensors"));
  CausalCache* load[] = {&small};
  ExpectEveryFlipAndTruncationRefused(valid, load, 1);
  ASSERT_EQ(SequenceLoadRefusal(valid, load, 1), "(loaded)");
  EXPECT_EQ(Rows(small, 1), Rows(small, 0));
}

TEST_F(QuantizedSequenceFile, ANaNScaleIsNeverWritten) {
  const std::vector<Position> next{30};
  const std::vector<SequenceId> seq{2};
  global_.StartForward(Batch{next, seq});
  std::vector<float> keys = Kv(next, 0, kKeyDim, 0.0f).ToVector();
  keys[kKeyDim + 5] = std::numeric_limits<float>::quiet_NaN();  // head 1's row, group 0
  global_.Update(0, Tensor::FromVector(keys, {1, kHeads, 1, kKeyDim}),
                 Kv(next, 0, kValueDim, 0.5f));
  tokens_.push_back(7);
  const CausalCache* caches[] = {&global_};
  const std::string path = dir_.File("nan.safetensors");
  const std::string message = ErrorOf([&] { SaveSequence(path, caches, 2, tokens_, {}); });
  EXPECT_NE(message.find("[SaveSequence] tensor c0.l0.keys row [0, 1, 30] (kv head 1, slot 30) "
                         "has int4 scale nan in group 0"),
            std::string::npos)
      << message;
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace ringkv::test
