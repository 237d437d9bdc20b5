// The batched forward (tools/model/batch_forward.h) against the single-sequence
// paths: several sequences of different lengths, two of them sharing a prefix
// through CopyPrefix (one shorter than the source, so a block is only partly
// shared), prefilled together in one mixed batch and then decoded together one
// token per sequence per step, past the sliding window and many block
// boundaries. Every logit row of every sequence must equal the no-cache
// recompute of that sequence's whole token list, and the single-sequence cached
// Forward of the same tokens.
//
// Tolerance: the same as cached_vs_recompute_test.cc (the paths differ only in
// the attention's summation order; K/V are rounded through f16 on both sides).
// Measured here: <= 6.2e-5 against both references (f16 K/V); a sliding pool
// built with the model window instead of window - 1 moves logits by ~1.
#include "batch_forward.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <vector>

#include "model_caches.h"
#include "model_test_util.h"
#include "recompute.h"
#include "ringkv/context.h"
#include "ringkv/error.h"
#include "sampling.h"
#include "serving_caches.h"
#include "tiny_transformer.h"

namespace ringkv::model::test {
namespace {

constexpr float kTolerance = 1e-3f;

ServingCachesOptions SmallPools() {
  ServingCachesOptions o;
  o.max_sequences = 4;
  o.capacity_tokens = 512;
  o.max_batch = 64;
  o.block_tokens = 4;  // small blocks: many boundaries and partly shared blocks
  return o;
}

// Each sequence's tokens and the batched run's logit row for each of them.
struct Sequence {
  std::vector<int> tokens;
  std::vector<float> rows;  // [tokens, vocab]
};

class BatchForwardTest : public ::testing::Test {
 protected:
  BatchForwardTest() : config_(TinyConfig()), ctx_(2), model_(config_, ctx_) {}

  // One pass over `entries` (sequence, token) in the given order; each token goes
  // at its sequence's next position. Records every row.
  void Pass(const std::vector<std::pair<SequenceId, int>>& entries, ServingCaches& caches) {
    std::vector<int> tokens;
    std::vector<Position> positions;
    std::vector<SequenceId> sequences;
    std::map<SequenceId, Position> next;
    for (const auto& [seq, token] : entries) {
      auto [it, added] = next.try_emplace(seq, static_cast<Position>(seqs_[seq].tokens.size()));
      tokens.push_back(token);
      positions.push_back(it->second++);
      sequences.push_back(seq);
    }
    const std::vector<float> rows =
        ForwardBatch(model_, tokens, Batch{positions, sequences}, caches, ctx_);
    const auto vocab = static_cast<std::size_t>(config_.vocab);
    ASSERT_EQ(rows.size(), entries.size() * vocab);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      Sequence& s = seqs_[sequences[i]];
      ASSERT_EQ(static_cast<std::size_t>(positions[i]), s.tokens.size());
      s.tokens.push_back(tokens[i]);
      s.rows.insert(s.rows.end(), rows.begin() + static_cast<std::ptrdiff_t>(i * vocab),
                    rows.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab));
    }
  }

  ModelConfig config_;
  Context ctx_;
  TinyTransformer model_;
  std::map<SequenceId, Sequence> seqs_;
};

TEST_F(BatchForwardTest, EverySequenceEqualsTheRecomputeAndTheSingleSequenceForward) {
  ServingCaches caches(config_, SmallPools());
  // Sequence 0: a 10-token prefix. 1 shares all of it, 2 its first 6 tokens (the
  // block of positions 4..7 only partly), 3 starts on its own.
  const std::vector<int> prefix = RandomTokens(10, config_.vocab, 1);
  std::vector<std::pair<SequenceId, int>> entries;
  for (const int t : prefix) entries.emplace_back(0, t);
  Pass(entries, caches);
  caches.CopyPrefix(0, 1, 10);
  caches.CopyPrefix(0, 2, 6);
  for (const SequenceId seq : {1, 2}) {
    const auto len = static_cast<std::size_t>(seq == 1 ? 10 : 6);
    seqs_[seq].tokens.assign(prefix.begin(), prefix.begin() + static_cast<std::ptrdiff_t>(len));
    seqs_[seq].rows.assign(
        seqs_[0].rows.begin(),
        seqs_[0].rows.begin() +
            static_cast<std::ptrdiff_t>(len * static_cast<std::size_t>(config_.vocab)));
  }
  // One mixed prefill: different counts per sequence, rows interleaved.
  const std::vector<int> more = RandomTokens(11, config_.vocab, 2);
  Pass({{1, more[0]},
        {3, more[1]},
        {0, more[2]},
        {1, more[3]},
        {2, more[4]},
        {3, more[5]},
        {1, more[6]},
        {3, more[7]},
        {0, more[8]},
        {1, more[9]},
        {1, more[10]}},
       caches);
  // Decode all four together, greedy, well past the window of 8.
  for (int step = 0; step < 14; ++step) {
    std::vector<std::pair<SequenceId, int>> decode;
    for (SequenceId seq = 3; seq >= 0; --seq) {  // batch order unlike id order
      const Sequence& s = seqs_[seq];
      const auto vocab = static_cast<std::size_t>(config_.vocab);
      decode.emplace_back(seq,
                          Greedy(std::span<const float>(s.rows).subspan(s.rows.size() - vocab)));
    }
    Pass(decode, caches);
  }

  for (const auto& [seq, s] : seqs_) {
    SCOPED_TRACE(testing::Message() << "sequence " << seq << ", " << s.tokens.size() << " tokens");
    const std::vector<float> recompute = RecomputeLogits(model_, s.tokens, ctx_);
    ModelCaches single(config_);
    const std::vector<float> forward =
        model_.Forward(s.tokens, single.Layers(), ctx_, LogitRows::kAll);
    float worst_recompute = 0, worst_forward = 0;
    for (std::size_t p = 0; p < s.tokens.size(); ++p) {
      worst_recompute =
          std::max(worst_recompute, MaxRowDiff(s.rows, p, recompute, p, config_.vocab));
      worst_forward = std::max(worst_forward, MaxRowDiff(s.rows, p, forward, p, config_.vocab));
    }
    EXPECT_LE(worst_recompute, kTolerance);
    EXPECT_LE(worst_forward, kTolerance);
    RecordProperty("max_diff_seq" + std::to_string(seq), std::to_string(worst_recompute));
    std::printf("sequence %d: %zu tokens, max |diff| %.2e vs recompute, %.2e vs Forward\n", seq,
                s.tokens.size(), static_cast<double>(worst_recompute),
                static_cast<double>(worst_forward));
  }
  // Sharing: the prefix blocks are held once.
  EXPECT_LT(caches.UsedBytes(), caches.SeparateBytes());
}

TEST_F(BatchForwardTest, BadInputThrowsBeforeAnyCacheChanges) {
  ServingCaches caches(config_, SmallPools());
  const std::vector<int> prefix = RandomTokens(5, config_.vocab, 3);
  std::vector<std::pair<SequenceId, int>> entries;
  for (const int t : prefix) entries.emplace_back(0, t);
  Pass(entries, caches);
  const std::vector<Position> held = caches.Pool(LayerKind::kGlobal)->SequencePositions(0);
  const std::vector<Position> held_sliding = caches.Pool(LayerKind::kSliding)->SequencePositions(0);
  const std::size_t used = caches.UsedBytes();

  const std::vector<int> two = {1, 2};
  const std::vector<Position> positions = {5, 6};
  const std::vector<SequenceId> sequences = {0, 0};
  const std::vector<Position> one_position = {5};
  EXPECT_THROW(ForwardBatch(model_, two, Batch{one_position, sequences}, caches, ctx_), Error);
  const std::vector<int> outside = {1, config_.vocab};
  EXPECT_THROW(ForwardBatch(model_, outside, Batch{positions, sequences}, caches, ctx_), Error);
  EXPECT_EQ(caches.Pool(LayerKind::kGlobal)->SequencePositions(0), held);
  EXPECT_EQ(caches.Pool(LayerKind::kSliding)->SequencePositions(0), held_sliding);
  EXPECT_EQ(caches.UsedBytes(), used);
}

TEST(ServingCaches, AWindowOfOneHasNoCausalCacheEquivalent) {
  ModelConfig config = TinyConfig();
  config.window = 1;
  EXPECT_THROW(ServingCaches(config, SmallPools()), Error);
  config.global_every = 1;  // no sliding layer: nothing to refuse
  EXPECT_NO_THROW(ServingCaches(config, SmallPools()));
}

// A model layer's pool and its index in it follow the layer pattern (layer 1 is
// global, 0 and 2 sliding).
TEST(ServingCaches, LayersMapToTheirPool) {
  const ModelConfig config = TinyConfig();
  const ServingCaches caches(config, SmallPools());
  EXPECT_EQ(&caches.PoolOf(1), caches.Pool(LayerKind::kGlobal));
  EXPECT_EQ(&caches.PoolOf(0), caches.Pool(LayerKind::kSliding));
  EXPECT_EQ(&caches.PoolOf(2), caches.Pool(LayerKind::kSliding));
  EXPECT_EQ(caches.IndexInPool(0), 0);
  EXPECT_EQ(caches.IndexInPool(1), 0);
  EXPECT_EQ(caches.IndexInPool(2), 1);
  EXPECT_EQ(caches.Pool(LayerKind::kGlobal)->Options().layers, 1);
  EXPECT_EQ(caches.Pool(LayerKind::kSliding)->Options().layers, 2);
  EXPECT_EQ(caches.Pool(LayerKind::kSliding)->Options().window, config.window - 1);
}

}  // namespace
}  // namespace ringkv::model::test
