// An encoder cache and a causal cache behind one WrapperCache, as a
// cross-attention model uses them: each pass's self-attention and
// cross-attention outputs against the float64 oracle over the tokens each row
// may see (computed here from positions alone), CopyPrefix through both, and
// a call the causal cache refuses leaving the encoder cache as it was.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "batch/hand_plan.h"
#include "batch/row_oracle.h"
#include "cache/cache_test_util.h"
#include "ringkv/batch_attention.h"
#include "ringkv/causal_cache.h"
#include "ringkv/encoder_cache.h"
#include "ringkv/tensor_ops.h"
#include "ringkv/wrapper_cache.h"

namespace ringkv {
namespace {

constexpr std::int64_t kHq = 4, kHkv = 2, kD = 16, kDv = 8;
constexpr float kScale = 0.25f;
// Measured max abs error against the float64 oracle: 3.2e-7 over every tier.
constexpr double kTol = 1e-6;
constexpr std::size_t kEncoderType = 0, kCausalType = 1;

using Token = std::pair<SequenceId, Position>;

class EncoderCausalPairTest : public ::testing::Test {
 protected:
  EncoderCausalPairTest() : causal_(Options()) {}

  static CausalCacheOptions Options() {
    CausalCacheOptions o;
    o.kv_heads = kHkv;
    o.key_dim = kD;
    o.value_dim = kDv;
    o.dtype = DType::kF32;
    o.capacity_tokens = 64;
    o.block_tokens = 4;
    o.max_sequences = 4;
    o.max_batch = 8;
    return o;
  }

  // Starts a pass over `tokens` (with the encoder input at `image_row`, or none)
  // and checks both layer types' attention for every row.
  void Forward(const std::vector<Token>& tokens, std::int64_t image_row = -1) {
    std::vector<Position> positions;
    std::vector<SequenceId> sequences;
    for (const auto& [s, p] : tokens) {
      sequences.push_back(s);
      positions.push_back(p);
    }
    wrapper_.StartForward({positions, sequences});
    if (image_row >= 0) {
      const std::array<std::int64_t, 1> rows{image_row};
      encoder_.SetEncoderRows(rows);
    }
    const auto n = static_cast<std::int64_t>(tokens.size());

    // Self-attention: this pass's K/V, recorded per token for the oracle.
    const Tensor k = test::RandomTensor(rng_, {1, kHkv, n, kD});
    const Tensor v = test::RandomTensor(rng_, {1, kHkv, n, kDv});
    for (std::int64_t i = 0; i < n; ++i) {
      stored_[tokens[static_cast<std::size_t>(i)]] = {k.Slice(2, i, i + 1), v.Slice(2, i, i + 1)};
    }
    wrapper_.SetLayerType(kCausalType);
    const BatchHistory self = wrapper_.Update(0, k, v);
    const Tensor q = test::RandomTensor(rng_, {1, kHq, n, kD});
    const Tensor out = Attention(q, self, kScale, ctx_);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto [s, p] = tokens[static_cast<std::size_t>(i)];
      std::vector<Tensor> ks, vs;  // the sequence's tokens at positions <= p, in order
      for (const auto& [token, kv] : stored_) {
        if (token.first == s && token.second <= p) {
          ks.push_back(kv.first);
          vs.push_back(kv.second);
        }
      }
      test::ExpectRow(out, i,
                      test::RowOracle(q, i, Concatenate(ks, 2), Concatenate(vs, 2), kDv, kScale),
                      kTol, fmt::format("self-attention of ({}, {})", s, p));
    }

    // Cross-attention: the encoder output of this pass's image, if any.
    wrapper_.SetLayerType(kEncoderType);
    BatchHistory cross;
    if (image_row >= 0) {
      const SequenceId s = tokens[static_cast<std::size_t>(image_row)].first;
      images_[s] = {test::RandomTensor(rng_, {1, kHkv, 5, kD}),
                    test::RandomTensor(rng_, {1, kHkv, 5, kDv})};
      cross = wrapper_.Update(0, images_[s].first, images_[s].second);
    } else {
      cross = wrapper_.Get(0);
    }
    const Tensor out_cross = Attention(q, cross, kScale, ctx_);
    for (std::int64_t i = 0; i < n; ++i) {
      const SequenceId s = tokens[static_cast<std::size_t>(i)].first;
      const auto image = images_.find(s);
      const bool sees = image != images_.end();
      const Tensor ek = sees ? image->second.first.AsType(DType::kF16) : Tensor();
      const Tensor ev = sees ? image->second.second.AsType(DType::kF16) : Tensor();
      test::ExpectRow(out_cross, i, test::RowOracle(q, i, ek, ev, kDv, kScale), kTol,
                      fmt::format("cross-attention of sequence {}", s));
    }
  }

  std::mt19937 rng_{31};
  Context ctx_{2};
  EncoderCache encoder_;  // f16
  CausalCache causal_;
  std::array<SequenceCache*, 2> list_{&encoder_, &causal_};
  WrapperCache wrapper_{list_};
  std::map<Token, std::pair<Tensor, Tensor>> stored_;       // [1, Hkv, 1, D] per token
  std::map<SequenceId, std::pair<Tensor, Tensor>> images_;  // [1, Hkv, 5, D]
};

TEST_F(EncoderCausalPairTest, SelfAndCrossAttentionOfEveryRowMatchTheOracle) {
  // Sequence 1 has an image token at position 1; sequence 2 is text only.
  Forward({{1, 0}, {1, 1}, {1, 2}, {1, 3}, {2, 0}, {2, 1}, {2, 2}}, /*image_row=*/1);
  Forward({{2, 3}, {1, 4}});  // decode both
  // Sequence 3 forks sequence 1's first 3 tokens (the image token among them).
  wrapper_.CopyPrefix(1, 3, 3);
  EXPECT_TRUE(encoder_.EncoderCached(3));
  EXPECT_EQ(causal_.SequencePositions(3), (std::vector<Position>{0, 1, 2}));
  for (Position p = 0; p < 3; ++p) stored_[{3, p}] = stored_[{1, p}];
  images_[3] = images_[1];
  Forward({{3, 3}, {1, 5}, {2, 4}});
  // Sequence 2 gets an image of its own, in a pass with the others decoding.
  Forward({{1, 6}, {2, 5}, {3, 4}}, /*image_row=*/1);
  // Truncating sequence 1 before its image token forgets the image in both.
  wrapper_.Remove(1, 1, kEndOfSequence);
  EXPECT_FALSE(encoder_.EncoderCached(1));
  for (Position p = 1; p <= 6; ++p) stored_.erase({1, p});
  images_.erase(1);
  Forward({{1, 1}, {3, 5}});
  EXPECT_TRUE(wrapper_.CanResume(1, 2));
}

TEST_F(EncoderCausalPairTest, ACallTheCausalCacheRefusesLeavesTheEncoderAsItWas) {
  Forward({{1, 0}, {1, 1}, {1, 2}, {1, 3}}, /*image_row=*/1);
  const std::vector<Position> held = causal_.SequencePositions(1);
  // Remove in the middle needs a shift function, which this causal cache lacks:
  // the encoder had already forgotten the image at position 1.
  const std::string removed = test::ErrorOf([&] { wrapper_.Remove(1, 1, 2); });
  EXPECT_NE(removed.find("[CausalCache::Remove]"), std::string::npos) << removed;
  EXPECT_TRUE(encoder_.EncoderCached(1));
  EXPECT_EQ(causal_.SequencePositions(1), held);
  // A batch over options.max_batch: the encoder keeps its pass (the 4 rows above).
  const std::vector<Position> positions{4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<SequenceId> sequences(9, 1);
  const std::string started = test::ErrorOf([&] { wrapper_.StartForward({positions, sequences}); });
  EXPECT_NE(started.find("options.max_batch 8"), std::string::npos) << started;
  EXPECT_EQ(encoder_.Get(0).Rows(), 4);
  EXPECT_EQ(causal_.SequencePositions(1), held);
  // Both still serve the next pass as if nothing had happened.
  Forward({{1, 4}});
}

}  // namespace
}  // namespace ringkv
