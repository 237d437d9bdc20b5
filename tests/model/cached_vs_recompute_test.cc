// The end-to-end proof: at every step, the cached model's logits equal a no-cache
// recompute of the same tokens (full causal attention, with the sliding-window mask
// on the local layers), across wrap-around, snapshots, rewinds and prefill chunking.
//
// Tolerance. The recompute rounds K/V through the same dtype as the caches, and
// every projection is bit-identical between one token and a batch (matmul.h), so
// the two differ only in the attention's summation order (ring order and block
// splits) and in a rare one-ulp flip of an f16-rounded K/V value downstream of
// such a difference. Measured: <= 2e-6 with f32 and bf16 K/V, <= 9e-5 with f16 K/V, on
// logits of standard deviation ~2. kTolerance leaves 10x headroom over f16; a
// window off by one token already moves logits by > 0.05 (SensitiveToTheWindow).
// int8 / int4 K/V: the recompute quantizes each row exactly as the cache write
// does (ringkv::AsStored): measured <= 2e-6 here (AVX2 tier). But a summation-order
// difference upstream can flip one quantized value by a whole step (not an ulp):
// the demo's small int8 run measured 8.4e-4 from one such flip, so they keep
// kTolerance. The quantization's own cost, against unrounded f32 K/V, is ~1e-2
// (int8) to ~3e-1 (int4) on these logits (docs/quantized_kv.md). Tiers that
// attend quantized K/V with int16 rounding of queries and softmax weights
// (kernels::RoundsQuantizedToInt16) measured up to 1.7e-3 for int8 and 5.1e-2
// for int4 (flips included: an int4 step is 1/7 of its group's largest), so they
// get kToleranceInt16 and kToleranceInt4Int16 there. Likewise a tier that rounds
// the softmax weights of bf16 attention to bf16 (kernels::RoundsBf16Weights)
// rounds them against each block's running max, which differs between the
// cached decode and the recompute: measured up to 4.2e-3 on bf16 logits, so bf16
// gets kToleranceBf16Weights there.
#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <string>

#include "model_caches.h"
#include "model_test_util.h"
#include "recompute.h"
#include "ringkv/context.h"
#include "ringkv/kernels/sdpa.h"
#include "ringkv/speculation.h"
#include "sampling.h"
#include "tiny_transformer.h"

namespace ringkv::model::test {
namespace {

constexpr float kTolerance = 1e-3f;
constexpr float kToleranceF32 = 1e-4f;
constexpr float kToleranceInt16 = 5e-3f;
constexpr float kToleranceInt4Int16 = 0.15f;
constexpr float kToleranceBf16Weights = 1.1e-2f;

// The tokens fed so far and the cached model's logits for each of them.
class Transcript {
 public:
  Transcript(const TinyTransformer& model, ModelCaches& caches, Context& ctx)
      : model_(model), caches_(caches), ctx_(ctx) {}

  // Feeds `chunk` in one forward at the caches' offset.
  void Feed(std::span<const int> chunk) {
    const std::vector<float> rows = model_.Forward(chunk, caches_.Layers(), ctx_, LogitRows::kAll);
    Truncate(caches_.Offset() - static_cast<int>(chunk.size()));
    tokens_.insert(tokens_.end(), chunk.begin(), chunk.end());
    logits_.insert(logits_.end(), rows.begin(), rows.end());
  }
  // Greedy decode: one token at a time, each the argmax of the previous row.
  void Decode(int steps) {
    for (int i = 0; i < steps; ++i) {
      const int next = Greedy(LastRow());
      Feed(std::span<const int>(&next, 1));
    }
  }
  // One speculative step: verifies `draft` in one forward through BeginSpeculation,
  // accepts the greedy-matching prefix and commits it. Returns how many were accepted.
  int Speculate(std::span<const int> draft) {
    const int start = caches_.Offset();
    Speculation spec = BeginSpeculation(caches_.Layers());
    const std::vector<float> rows = model_.Forward(draft, spec.Caches(), ctx_, LogitRows::kAll);
    int accepted = 0;
    int expected = Greedy(LastRow());
    while (accepted < static_cast<int>(draft.size()) &&
           draft[static_cast<std::size_t>(accepted)] == expected) {
      expected = Greedy(std::span<const float>(rows).subspan(
          static_cast<std::size_t>(accepted) * Vocab(), Vocab()));
      ++accepted;
    }
    spec.Commit(accepted);
    Truncate(start);
    tokens_.insert(tokens_.end(), draft.begin(), draft.begin() + accepted);
    logits_.insert(
        logits_.end(), rows.begin(),
        rows.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(accepted) * Vocab()));
    return accepted;
  }
  // The target's own greedy continuation of `n` tokens on forked caches, with the
  // token at `wrong` replaced (-1: none): an imperfect draft.
  std::vector<int> Draft(int n, int wrong) const {
    ModelCaches fork = caches_.Fork();
    std::vector<int> draft;
    std::vector<float> row(LastRow().begin(), LastRow().end());
    for (int i = 0; i < n; ++i) {
      draft.push_back(Greedy(row));
      row = model_.Forward(std::span<const int>(&draft.back(), 1), fork.Layers(), ctx_);
    }
    if (wrong >= 0) {
      int& token = draft[static_cast<std::size_t>(wrong)];
      token = (token + 1) % model_.Config().vocab;
    }
    return draft;
  }
  // After a rewind or restore: forget what lies at and after `offset`.
  void Truncate(int offset) {
    ASSERT_GE(offset, 0);
    const auto n = static_cast<std::size_t>(offset);
    if (tokens_.size() > n) {
      tokens_.resize(n);
      logits_.resize(n * Vocab());
    }
  }
  // The largest difference over every recorded position.
  float MaxDiffAgainstRecompute() const {
    const std::vector<float> reference = RecomputeLogits(model_, tokens_, ctx_);
    float worst = 0;
    for (std::size_t i = 0; i < tokens_.size(); ++i) {
      worst = std::max(worst, MaxRowDiff(logits_, i, reference, i, model_.Config().vocab));
    }
    return worst;
  }
  std::span<const float> LastRow() const {
    return std::span<const float>(logits_).subspan(logits_.size() - Vocab());
  }
  const std::vector<int>& Tokens() const { return tokens_; }
  const std::vector<float>& Logits() const { return logits_; }

 private:
  std::size_t Vocab() const { return static_cast<std::size_t>(model_.Config().vocab); }

  const TinyTransformer& model_;
  ModelCaches& caches_;
  Context& ctx_;
  std::vector<int> tokens_;
  std::vector<float> logits_;  // [tokens, vocab]
};

struct Pattern {
  const char* name;
  int global_every;
  DType kv_dtype;
  int head_dim = 16;  // int4 needs whole groups of 32
};

// Names the case in test output (gtest would otherwise dump the struct's bytes,
// padding included).
void PrintTo(const Pattern& pattern, std::ostream* os) { *os << pattern.name; }

class CachedVsRecompute : public ::testing::TestWithParam<Pattern> {
 protected:
  ModelConfig Config() const {
    ModelConfig c = TinyConfig(GetParam().global_every);
    c.kv_dtype = GetParam().kv_dtype;
    c.head_dim = GetParam().head_dim;
    return c;
  }
  float Tolerance() const {
    const DType d = GetParam().kv_dtype;
    if (IsQuantized(d) && kernels::RoundsQuantizedToInt16(ctx_.Tier())) {
      return IsInt4(d) ? kToleranceInt4Int16 : kToleranceInt16;
    }
    if (d == DType::kBF16 && kernels::RoundsBf16Weights(ctx_.Tier())) return kToleranceBf16Weights;
    return d == DType::kF32 ? kToleranceF32 : kTolerance;
  }
  // One thread: the pool's barrier makes a loaded 2-core machine slow; threading
  // is covered by the tests below and by the demo.
  Context ctx_{1};
};

TEST_P(CachedVsRecompute, EveryDecodeStepAcrossManyWraps) {
  const ModelConfig config = Config();
  const TinyTransformer model(config, ctx_);
  ModelCaches caches(config);
  Transcript t(model, caches, ctx_);
  t.Feed(RandomTokens(5, config.vocab, 1));
  t.Decode(100);  // offset 105: the window of 8 wraps 13 times
  EXPECT_EQ(caches.Offset(), 105);
  const float diff = t.MaxDiffAgainstRecompute();
  EXPECT_LE(diff, Tolerance()) << GetParam().name;
  RecordProperty("max_abs_logit_diff", std::to_string(diff));
}

TEST_P(CachedVsRecompute, PrefillInOneChunkOrManyAgrees) {
  const ModelConfig config = Config();
  const TinyTransformer model(config, ctx_);
  const std::vector<int> tokens = RandomTokens(45, config.vocab, 2);
  // Chunk sizes below, at and above the window of 8, and an irregular mix.
  const std::vector<std::vector<int>> chunkings = {
      {45}, {1}, {3}, {7}, {8}, {13}, {2, 9, 1, 16, 1, 1, 15}};
  std::vector<float> single;  // the one-chunk logits
  for (const std::vector<int>& sizes : chunkings) {
    ModelCaches caches(config);
    Transcript t(model, caches, ctx_);
    std::size_t at = 0;
    for (std::size_t i = 0; at < tokens.size(); ++i) {
      const std::size_t size =
          std::min(static_cast<std::size_t>(sizes[i % sizes.size()]), tokens.size() - at);
      t.Feed(std::span<const int>(tokens).subspan(at, size));
      at += size;
    }
    ASSERT_EQ(t.Tokens(), tokens);
    EXPECT_LE(t.MaxDiffAgainstRecompute(), Tolerance()) << "first chunk " << sizes[0];
    if (single.empty()) {
      single = t.Logits();
    } else {
      float worst = 0;
      for (std::size_t row = 0; row < tokens.size(); ++row) {
        worst = std::max(worst, MaxRowDiff(single, row, t.Logits(), row, config.vocab));
      }
      EXPECT_LE(worst, Tolerance()) << "chunking starting " << sizes[0] << " vs one chunk";
    }
  }
}

TEST_P(CachedVsRecompute, AfterRestoringASnapshot) {
  const ModelConfig config = Config();
  const TinyTransformer model(config, ctx_);
  ModelCaches caches(config);
  Transcript t(model, caches, ctx_);
  t.Feed(RandomTokens(12, config.vocab, 3));
  t.Decode(8);  // offset 20: the ring has wrapped
  const std::unique_ptr<LayerSnapshot> snapshot = caches.Snapshot(0);
  ASSERT_NE(snapshot, nullptr);
  ASSERT_GT(snapshot->Size(), 0u);

  // Diverge: decode and prefill on top, overwriting ring slots the snapshot shares.
  t.Feed(RandomTokens(5, config.vocab, 4));
  t.Decode(6);
  EXPECT_LE(t.MaxDiffAgainstRecompute(), Tolerance());

  // Back to offset 20 and a different continuation.
  ASSERT_TRUE(caches.Restore(snapshot.get(), 20));
  EXPECT_EQ(caches.Offset(), 20);
  t.Truncate(20);
  t.Feed(RandomTokens(3, config.vocab, 5));
  t.Decode(15);
  EXPECT_LE(t.MaxDiffAgainstRecompute(), Tolerance());

  // Prompt caching: a fresh set of caches restored from the same snapshot.
  ModelCaches other(config);
  ASSERT_TRUE(other.Restore(snapshot.get(), 20));
  const std::vector<int> prefix(t.Tokens().begin(), t.Tokens().begin() + 20);
  const std::vector<int> next = RandomTokens(4, config.vocab, 6);
  const std::vector<float> rows = model.Forward(next, other.Layers(), ctx_, LogitRows::kAll);
  std::vector<int> all = prefix;
  all.insert(all.end(), next.begin(), next.end());
  const std::vector<float> reference = RecomputeLogits(model, all, ctx_);
  float worst = 0;
  for (std::size_t i = 0; i < next.size(); ++i) {
    worst = std::max(worst, MaxRowDiff(rows, i, reference, prefix.size() + i, config.vocab));
  }
  EXPECT_LE(worst, Tolerance());
}

TEST_P(CachedVsRecompute, AfterARewind) {
  const ModelConfig config = Config();
  const TinyTransformer model(config, ctx_);
  ModelCaches caches(config);
  Transcript t(model, caches, ctx_);
  // A live rewind on a rotating cache is possible only while offset <= window (8).
  t.Feed(RandomTokens(4, config.vocab, 7));
  t.Decode(3);  // offset 7
  ASSERT_TRUE(caches.Restore(nullptr, 3));
  EXPECT_EQ(caches.Offset(), 3);
  t.Truncate(3);
  t.Decode(20);
  t.Feed(RandomTokens(6, config.vocab, 8));
  t.Decode(4);
  EXPECT_LE(t.MaxDiffAgainstRecompute(), Tolerance());
}

// Verify a draft in one forward, commit the accepted prefix, keep decoding: before
// the sliding window (8) wraps and long after it.
TEST_P(CachedVsRecompute, AfterASpeculativeCommit) {
  const ModelConfig config = Config();
  const TinyTransformer model(config, ctx_);
  for (const int prefill : {3, 30}) {
    ModelCaches caches(config);
    Transcript t(model, caches, ctx_);
    t.Feed(RandomTokens(static_cast<std::size_t>(prefill), config.vocab, 11));
    const int k = 5;
    // Fewer than k: token 2 is wrong, so exactly 2 are accepted.
    EXPECT_EQ(t.Speculate(t.Draft(k, 2)), 2) << "prefill " << prefill;
    for (int layer = 0; layer < config.layers; ++layer) {
      EXPECT_EQ(caches.Layer(layer).Offset(), prefill + 2) << "layer " << layer;
    }
    t.Decode(3);
    // None: the first token is wrong.
    EXPECT_EQ(t.Speculate(t.Draft(k, 0)), 0);
    EXPECT_EQ(caches.Offset(), prefill + 5);
    t.Decode(2);
    // All k: a perfect draft.
    EXPECT_EQ(t.Speculate(t.Draft(k, -1)), k);
    EXPECT_EQ(caches.Offset(), prefill + 7 + k);
    t.Decode(12);
    EXPECT_LE(t.MaxDiffAgainstRecompute(), Tolerance()) << "prefill " << prefill;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Patterns, CachedVsRecompute,
    ::testing::Values(Pattern{"GlobalOnlyF16", 1, DType::kF16},
                      Pattern{"SlidingOnlyF16", 0, DType::kF16},
                      Pattern{"MixedF16", 2, DType::kF16}, Pattern{"MixedF32", 2, DType::kF32},
                      Pattern{"MixedBF16", 2, DType::kBF16}, Pattern{"MixedI8", 2, DType::kI8, 32},
                      Pattern{"MixedI4", 2, DType::kI4, 32},
                      Pattern{"GlobalOnlyI8", 1, DType::kI8, 16}),
    [](const ::testing::TestParamInfo<Pattern>& p) { return std::string(p.param.name); });

// A global layer can rewind anywhere: far beyond the window, where the sliding
// layers of the mixed model could not.
TEST(CachedVsRecomputeGlobal, RewindFarBack) {
  Context ctx(2);
  const ModelConfig config = TinyConfig(1);
  const TinyTransformer model(config, ctx);
  ModelCaches caches(config);
  Transcript t(model, caches, ctx);
  t.Feed(RandomTokens(10, config.vocab, 9));
  t.Decode(20);
  ASSERT_TRUE(caches.Restore(nullptr, 11));
  t.Truncate(11);
  t.Decode(10);
  EXPECT_LE(t.MaxDiffAgainstRecompute(), kTolerance);
}

// The comparison can fail: the same cached run against a recompute whose sliding
// window is one token wider differs by far more than the tolerance once the
// sequence is longer than the window.
TEST(CachedVsRecomputeSensitivity, SensitiveToTheWindow) {
  Context ctx(2);
  ModelConfig config = TinyConfig(0);
  const TinyTransformer model(config, ctx);
  ModelCaches caches(config);
  Transcript t(model, caches, ctx);
  t.Feed(RandomTokens(4, config.vocab, 10));
  t.Decode(20);
  ASSERT_LE(t.MaxDiffAgainstRecompute(), kTolerance);

  config.window += 1;  // same seed, so the same weights
  const TinyTransformer wider(config, ctx);
  const std::vector<float> reference = RecomputeLogits(wider, t.Tokens(), ctx);
  float early = 0, late = 0;
  for (std::size_t i = 0; i < t.Tokens().size(); ++i) {
    const float d = MaxRowDiff(t.Logits(), i, reference, i, config.vocab);
    (i < 8 ? early : late) = std::max(i < 8 ? early : late, d);
  }
  EXPECT_LE(early, kTolerance);  // within the window both see everything
  EXPECT_GT(late, 50 * kTolerance);
}

}  // namespace
}  // namespace ringkv::model::test
