// The model's building blocks against independent expectations: a float64 matmul,
// hand-worked RMSNorm and rotary values, sampling rules, and input errors.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "matmul.h"
#include "model_caches.h"
#include "model_test_util.h"
#include "ringkv/context.h"
#include "ringkv/error.h"
#include "ringkv/kernels/thread_pool.h"
#include "ringkv/kv_cache.h"
#include "rms_norm.h"
#include "rope.h"
#include "sampling.h"
#include "tiny_transformer.h"

namespace ringkv::model::test {
namespace {

std::vector<float> Values(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Shapes with tails on every axis: rows not a multiple of the row tile, outputs
// not a multiple of the output tile, `in` not a multiple of the vector width.
TEST(MatMul, MatchesFloat64Reference) {
  kernels::ThreadPool pool(2);
  for (const auto& [rows, in, out] :
       std::vector<std::array<std::int64_t, 3>>{{1, 8, 4}, {5, 13, 7}, {70, 64, 33}, {3, 1, 1}}) {
    Matrix w{out, in, Values(static_cast<std::size_t>(out * in), 1)};
    const std::vector<float> x = Values(static_cast<std::size_t>(rows * in), 2);
    std::vector<float> y(static_cast<std::size_t>(rows * out), 0.5f);
    MatMul(x, rows, w, y, pool, Accumulate::kAdd);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t o = 0; o < out; ++o) {
        double expect = 0.5;
        for (std::int64_t k = 0; k < in; ++k) {
          expect += static_cast<double>(x[static_cast<std::size_t>(r * in + k)]) *
                    static_cast<double>(w.data[static_cast<std::size_t>(o * in + k)]);
        }
        EXPECT_NEAR(y[static_cast<std::size_t>(r * out + o)], expect, 1e-5)
            << rows << "x" << in << "x" << out << " at " << r << "," << o;
      }
    }
  }
}

// The property the cached-vs-recompute tests lean on: a row's result does not
// depend on how many rows are computed with it.
TEST(MatMul, RowAloneEqualsRowInABatchBitForBit) {
  kernels::ThreadPool pool(2);
  const std::int64_t rows = 67, in = 45, out = 38;
  Matrix w{out, in, Values(static_cast<std::size_t>(out * in), 3)};
  const std::vector<float> x = Values(static_cast<std::size_t>(rows * in), 4);
  std::vector<float> batch(static_cast<std::size_t>(rows * out));
  MatMul(x, rows, w, batch, pool);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::vector<float> alone(static_cast<std::size_t>(out));
    MatMul(std::span<const float>(x).subspan(static_cast<std::size_t>(r * in),
                                             static_cast<std::size_t>(in)),
           1, w, alone, pool);
    for (std::int64_t o = 0; o < out; ++o) {
      ASSERT_EQ(alone[static_cast<std::size_t>(o)], batch[static_cast<std::size_t>(r * out + o)])
          << "row " << r << " out " << o;
    }
  }
}

TEST(RmsNorm, HandWorked) {
  // rms([3, 4]) = sqrt((9 + 16) / 2) = sqrt(12.5); eps negligible.
  const std::vector<float> x = {3.0f, 4.0f, 0.0f, -2.0f};
  const std::vector<float> w = {1.0f, 2.0f};
  std::vector<float> y(4);
  RmsNorm(x, w, 1e-12f, y);
  const double r1 = std::sqrt(12.5), r2 = std::sqrt(2.0);
  EXPECT_NEAR(y[0], 3.0 / r1, 1e-6);
  EXPECT_NEAR(y[1], 8.0 / r1, 1e-6);
  EXPECT_NEAR(y[2], 0.0, 1e-6);
  EXPECT_NEAR(y[3], -4.0 / r2, 1e-6);
}

TEST(Rope, RotatesPairsByPositionTimesFrequency) {
  const int d = 4;  // pairs (0, 2) with frequency 1, (1, 3) with 100^(-1/2) = 0.1 (theta 100)
  const RopeTable rope(5, 2, d, 100.0f);  // positions 5 and 6
  std::vector<float> x = {1, 0, 0, 1, /* position 6: */ 2, 3, -1, 4};
  rope.Apply(x, 1);
  const auto rotated = [](double a, double b, double angle) {
    return std::array<double, 2>{a * std::cos(angle) - b * std::sin(angle),
                                 a * std::sin(angle) + b * std::cos(angle)};
  };
  const std::array<std::array<double, 4>, 2> in = {{{1, 0, 0, 1}, {2, 3, -1, 4}}};
  for (std::size_t p = 0; p < 2; ++p) {
    const double pos = 5.0 + static_cast<double>(p);
    const auto pair0 = rotated(in[p][0], in[p][2], pos * 1.0);
    const auto pair1 = rotated(in[p][1], in[p][3], pos * 0.1);
    const std::size_t base = p * static_cast<std::size_t>(d);
    EXPECT_NEAR(x[base + 0], pair0[0], 1e-6);
    EXPECT_NEAR(x[base + 2], pair0[1], 1e-6);
    EXPECT_NEAR(x[base + 1], pair1[0], 1e-6);
    EXPECT_NEAR(x[base + 3], pair1[1], 1e-6);
  }
}

TEST(Rope, PositionZeroIsIdentity) {
  const RopeTable rope(0, 1, 8, 10000.0f);
  std::vector<float> x = Values(16, 5);
  const std::vector<float> before = x;
  rope.Apply(x, 2);
  EXPECT_EQ(x, before);
}

TEST(Sampling, GreedyTakesTheFirstMaximum) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(Greedy(logits), 1);
  Sampler greedy(0.0f, 1);
  EXPECT_EQ(greedy.Next(logits), 1);
}

TEST(Sampling, SeededSamplingFollowsTheSoftmax) {
  // p = softmax([0, log 3]) = [0.25, 0.75]; 20000 draws: 3 sigma is about 0.9 %.
  const std::vector<float> logits = {0.0f, std::log(3.0f)};
  Sampler sampler(1.0f, 42);
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += sampler.Next(logits);
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.75, 0.01);
  // The same seed gives the same sequence.
  Sampler a(1.0f, 9), b(1.0f, 9);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.Next(logits), b.Next(logits));
}

TEST(ModelConfig, PatternAndValidation) {
  ModelConfig c = TinyConfig(2);
  EXPECT_EQ(c.KindOf(0), LayerKind::kSliding);
  EXPECT_EQ(c.KindOf(1), LayerKind::kGlobal);
  EXPECT_EQ(c.KindOf(2), LayerKind::kSliding);
  c.global_every = 0;
  EXPECT_EQ(c.GlobalLayers(), 0);
  c.global_every = 1;
  EXPECT_EQ(c.GlobalLayers(), 3);
  c.kv_heads = 3;
  try {
    c.Validate();
    FAIL() << "expected ringkv::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[ModelConfig] q_heads 4 is not a multiple of kv_heads 3");
  }
}

TEST(TinyTransformer, RejectsBadInput) {
  Context ctx(1);
  const ModelConfig config = TinyConfig();
  const TinyTransformer model(config, ctx);
  ModelCaches caches(config);
  const std::vector<int> bad = {1, 97};
  try {
    (void)model.Forward(bad, caches.Layers(), ctx);
    FAIL() << "expected ringkv::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[TinyTransformer::Forward] token 97 at index 1 is outside [0, vocab 97)");
  }
  EXPECT_EQ(caches.Offset(), 0);
  const std::vector<int> good = {1, 2};
  try {
    (void)model.Forward(good, caches.Layers().first(2), ctx);
    FAIL() << "expected ringkv::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[TinyTransformer::Forward] 2 caches for 3 layers");
  }
  EXPECT_EQ(caches.Offset(), 0);
  // The model hands over f32 views: a cache without the model's storage dtype
  // would keep f32 and disagree with the recompute, so it is refused up front.
  std::vector<AttentionCache*> layers(caches.Layers().begin(), caches.Layers().end());
  KVCache plain;
  layers.back() = &plain;
  try {
    (void)model.Forward(good, layers, ctx);
    FAIL() << "expected ringkv::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[TinyTransformer::Forward] cache 2 stores its first input's dtype, but the "
                 "model's K/V dtype is f16 (build the caches with that storage dtype, as "
                 "ModelCaches does)");
  }
  EXPECT_EQ(caches.Offset(), 0);
  EXPECT_EQ(plain.Offset(), 0);
}

// Random weights must give usable logits: O(1) spread, not all equal, not one-hot.
TEST(TinyTransformer, LogitsAreNotDegenerate) {
  Context ctx(2);
  const ModelConfig config = TinyConfig();
  const TinyTransformer model(config, ctx);
  ModelCaches caches(config);
  const std::vector<float> logits =
      model.Forward(RandomTokens(16, config.vocab, 1), caches.Layers(), ctx, LogitRows::kAll);
  double sum = 0, sq = 0;
  for (float v : logits) {
    sum += static_cast<double>(v);
    sq += static_cast<double>(v) * static_cast<double>(v);
  }
  const double n = static_cast<double>(logits.size());
  const double stddev = std::sqrt(sq / n - (sum / n) * (sum / n));
  EXPECT_GT(stddev, 0.5);
  EXPECT_LT(stddev, 8.0);
}

}  // namespace
}  // namespace ringkv::model::test
