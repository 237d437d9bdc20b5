// Attention(q, BatchHistory) over hand-built plans: every row against the
// float64 oracle over exactly the keys written out in hand_plan.h, the layer
// offsets, q and out of any layout, staleness, and every bad input (with out
// left as it was).
#include "ringkv/batch_attention.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "batch/hand_plan.h"
#include "cache/attention_test_util.h"
#include "cache/cache_test_util.h"
#include "ringkv/error.h"
#include "ringkv/kernels/kernel_table.h"

namespace ringkv {
namespace {

using test::Bits;
using test::ExpectRejected;
using test::HandPlan;
using test::RandomTensor;

constexpr std::int64_t kHq = 4;
constexpr float kScale = 0.25f;

// Measured max abs error against the float64 oracle: 4.0e-7 over every tier (f32 accumulation);
// for bf16 K/V on a tier that rounds the softmax weights to bf16 (kernels::RoundsBf16Weights),
// which the oracle does not, 1.9e-3 (AVX-512 with AVX512-BF16).
constexpr double kTol = 1e-6;
constexpr double kBf16WeightsTol = 5e-3;

// out [1, Hq, N, Dv] against the oracle, row by row.
double CheckAgainstOracle(const HandPlan& plan, const Tensor& q, const Tensor& out, int layer) {
  const std::vector<float> q_values = test::QueriesAsAttended(
      q.AsType(DType::kF32).ToVector(), plan.KeyDtype(), kernels::BestKernels().isa);
  const std::vector<float> got = out.ToVector();
  const double tol =
      plan.KeyDtype() == DType::kBF16 && kernels::RoundsBf16Weights(kernels::BestKernels().isa)
          ? kBf16WeightsTol
          : kTol;
  double max_err = 0.0;
  for (std::int64_t r = 0; r < HandPlan::kRows; ++r) {
    const std::vector<double> want = plan.Expected(q_values, kHq, r, layer, kScale);
    for (std::int64_t h = 0; h < kHq; ++h) {
      for (std::int64_t d = 0; d < HandPlan::kDv; ++d) {
        const double g =
            got[static_cast<std::size_t>((h * HandPlan::kRows + r) * HandPlan::kDv + d)];
        const double w = want[static_cast<std::size_t>(h * HandPlan::kDv + d)];
        EXPECT_NEAR(g, w, tol) << "row " << r << " head " << h << " dim " << d;
        max_err = std::max(max_err, std::abs(g - w));
        if (HandPlan::Visible(r).empty()) {
          EXPECT_EQ(g, 0.0) << "row " << r << " sees nothing";
        }
      }
    }
  }
  return max_err;
}

struct Case {
  DType dtype;
  int threads;
};

class BatchAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(BatchAttentionTest, EveryRowMatchesTheOracleOverExactlyItsKeys) {
  const Case c = GetParam();
  const HandPlan plan(c.dtype, 11);
  Context ctx(c.threads);
  std::mt19937 rng(5);
  for (int layer = 0; layer < HandPlan::kLayers; ++layer) {
    const Tensor q = RandomTensor(rng, {1, kHq, HandPlan::kRows, HandPlan::kD});
    const Tensor out = Attention(q, plan.History(layer), kScale, ctx);
    ASSERT_EQ(out.GetShape(), Shape({1, kHq, HandPlan::kRows, HandPlan::kDv}));
    const double err = CheckAgainstOracle(plan, q, out, layer);
    RecordProperty("max_abs_error_layer" + std::to_string(layer), fmt::format("{:.3g}", err));
  }
}

TEST_P(BatchAttentionTest, TheHistoryReportsItsShapeAndEachRowsKeys) {
  const Case c = GetParam();
  const HandPlan plan(c.dtype, 3);
  for (int layer = 0; layer < HandPlan::kLayers; ++layer) {
    const BatchHistory history = plan.History(layer);
    EXPECT_EQ(history.Rows(), HandPlan::kRows);
    EXPECT_EQ(history.Dtype(), c.dtype);
    EXPECT_EQ(history.Heads(), HandPlan::kHkv);
    EXPECT_EQ(history.KeyDim(), HandPlan::kD);
    EXPECT_EQ(history.ValueDim(), HandPlan::kDv);
    for (std::int64_t r = 0; r < HandPlan::kRows; ++r) {
      const std::vector<test::KeyRef> visible = HandPlan::Visible(r);
      const auto n = static_cast<std::int64_t>(visible.size());
      const Tensor k = history.VisibleKeys(r);
      const Tensor v = history.VisibleValues(r);
      ASSERT_EQ(k.GetShape(), Shape({1, HandPlan::kHkv, n, HandPlan::kD})) << "row " << r;
      ASSERT_EQ(v.GetShape(), Shape({1, HandPlan::kHkv, n, HandPlan::kDv})) << "row " << r;
      EXPECT_EQ(k.Dtype(), c.dtype);
      const std::vector<float> kv = k.ToVector(), vv = v.ToVector();
      for (std::int64_t h = 0; h < HandPlan::kHkv; ++h) {
        for (std::int64_t t = 0; t < n; ++t) {
          const test::KeyRef& key = visible[static_cast<std::size_t>(t)];
          for (std::int64_t d = 0; d < HandPlan::kD; ++d) {
            EXPECT_EQ(kv[static_cast<std::size_t>((h * n + t) * HandPlan::kD + d)],
                      plan.Key(layer, key, h, d))
                << "layer " << layer << " row " << r << " key " << t;
          }
          for (std::int64_t d = 0; d < HandPlan::kDv; ++d) {
            EXPECT_EQ(vv[static_cast<std::size_t>((h * n + t) * HandPlan::kDv + d)],
                      plan.Value(layer, key, h, d))
                << "layer " << layer << " row " << r << " value " << t;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DtypesAndThreads, BatchAttentionTest,
                         ::testing::Values(Case{DType::kF32, 1}, Case{DType::kF16, 1},
                                           Case{DType::kBF16, 1}, Case{DType::kF32, 2},
                                           Case{DType::kF16, 3}),
                         [](const ::testing::TestParamInfo<Case>& param_info) {
                           return test::DtypeName(param_info.param.dtype) + "_threads" +
                                  std::to_string(param_info.param.threads);
                         });

TEST(BatchAttentionLayoutTest, ConvertedAndStridedQueriesAndAnyOutGiveTheSameBits) {
  const HandPlan plan(DType::kF16, 2);
  const BatchHistory history = plan.History(1);
  Context ctx(1);
  std::mt19937 rng(9);
  constexpr std::int64_t kN = HandPlan::kRows, kD = HandPlan::kD, kDv = HandPlan::kDv;
  // q as the engine holds it, [1, N, Hq, D], permuted to [1, Hq, N, D] (read in place).
  const Tensor engine_q = RandomTensor(rng, {1, kN, kHq, kD});
  const Tensor q_view = engine_q.Permute({0, 2, 1, 3});
  const Tensor q = q_view.Contiguous();
  const Tensor expected = Attention(q, history, kScale, ctx);
  CheckAgainstOracle(plan, q, expected, 1);
  EXPECT_EQ(Bits(Attention(q_view, history, kScale, ctx)), Bits(expected));

  // bf16 q and a q with a non-unit inner stride: converted into the arena.
  const Tensor q16 = q.AsType(DType::kBF16);
  EXPECT_EQ(Bits(Attention(q16, history, kScale, ctx)),
            Bits(Attention(q16.AsType(DType::kF32), history, kScale, ctx)));
  const Tensor q_strided = RandomTensor(rng, {1, kHq, kD, kN}).Permute({0, 1, 3, 2});
  ASSERT_EQ(q_strided.Stride(3), kN);
  EXPECT_EQ(Bits(Attention(q_strided, history, kScale, ctx)),
            Bits(Attention(q_strided.Contiguous(), history, kScale, ctx)));

  // out as a permuted borrow of an engine's [N, Hq, Dv] buffer, and as a view with gaps.
  std::vector<float> engine_out(static_cast<std::size_t>(kN * kHq * kDv), -7.0f);
  Tensor out = Tensor::Borrow(engine_out.data(), DType::kF32, {kN, kHq, kDv})
                   .Permute({1, 0, 2})
                   .Unsqueeze(0);
  Attention(q, history, kScale, ctx, out);
  EXPECT_EQ(Bits(out), Bits(expected));
  Tensor base = Tensor::Zeros(DType::kF32, {2, kHq + 1, kN + 2, kDv + 3});
  Tensor gappy = base.Slice(0, 1, 2).Slice(1, 1, 1 + kHq).Slice(2, 1, 1 + kN).Slice(3, 2, 2 + kDv);
  Attention(q, history, kScale, ctx, gappy);
  EXPECT_EQ(Bits(gappy), Bits(expected));
  // Only the view was written.
  double outside = 0.0;
  for (const float x : base.ToVector()) outside += std::abs(static_cast<double>(x));
  double inside = 0.0;
  for (const float x : gappy.ToVector()) inside += std::abs(static_cast<double>(x));
  EXPECT_EQ(outside, inside);
}

TEST(BatchAttentionStaleTest, AChangedOwnerMakesEveryAccessorAndAttentionThrow) {
  const HandPlan plan(DType::kF32, 4);
  const BatchHistory history = plan.History(0);
  Context ctx(1);
  std::mt19937 rng(1);
  const Tensor q = RandomTensor(rng, {1, kHq, HandPlan::kRows, HandPlan::kD});
  Tensor out = RandomTensor(rng, {1, kHq, HandPlan::kRows, HandPlan::kDv});
  ++plan.Epoch()->generation;  // what the owning cache does when its tokens change
  const std::string stale = "the batch history is stale";
  ExpectRejected([&] { Attention(q, history, kScale, ctx, out); }, out, {"[Attention] ", stale});
  ExpectRejected([&] { (void)Attention(q, history, kScale, ctx); }, out, {"[Attention] ", stale});
  ExpectRejected([&] { (void)history.Rows(); }, out, {"[BatchHistory::Rows] ", stale});
  ExpectRejected([&] { (void)history.Dtype(); }, out, {"[BatchHistory::Dtype] ", stale});
  ExpectRejected([&] { (void)history.Heads(); }, out, {"[BatchHistory::Heads] ", stale});
  ExpectRejected([&] { (void)history.KeyDim(); }, out, {"[BatchHistory::KeyDim] ", stale});
  ExpectRejected([&] { (void)history.ValueDim(); }, out, {"[BatchHistory::ValueDim] ", stale});
  ExpectRejected([&] { (void)history.VisibleKeys(0); }, out,
                 {"[BatchHistory::VisibleKeys] ", stale, "generation 0, now 1"});
  ExpectRejected([&] { (void)history.VisibleValues(0); }, out,
                 {"[BatchHistory::VisibleValues] ", stale});
  // A history taken after the change is current again.
  EXPECT_THROW((void)plan.History(0).Rows(), Error);
}

TEST(BatchAttentionStaleTest, AnEmptyHistoryHasNoRowsAndNothingToAttendTo) {
  const BatchHistory empty;
  EXPECT_EQ(empty.Rows(), 0);
  EXPECT_EQ(empty.Heads(), 0);
  EXPECT_EQ(empty.KeyDim(), 0);
  EXPECT_EQ(empty.ValueDim(), 0);
  EXPECT_EQ(empty.Dtype(), DType::kF32);
  Tensor out = Tensor::Zeros(DType::kF32, {1, 4, 1, 8});
  ExpectRejected([&] { (void)empty.VisibleKeys(0); }, out,
                 {"[BatchHistory::VisibleKeys] row 0 is outside the history's 0 rows"});
  Context ctx(1);
  const Tensor q = Tensor::Zeros(DType::kF32, {1, 4, 1, 16});
  ExpectRejected([&] { Attention(q, empty, kScale, ctx, out); }, out,
                 {"[Attention] the history has no rows"});
}

TEST(BatchAttentionErrorsTest, EveryBadInputThrowsNamingTheValuesAndWritesNothing) {
  const HandPlan plan(DType::kF32, 6);
  const BatchHistory history = plan.History(0);
  Context ctx(1);
  std::mt19937 rng(2);
  constexpr std::int64_t kN = HandPlan::kRows, kD = HandPlan::kD, kDv = HandPlan::kDv;
  const Tensor q = RandomTensor(rng, {1, kHq, kN, kD});
  Tensor out = RandomTensor(rng, {1, kHq, kN, kDv});
  const auto attend = [&](const Tensor& query) { Attention(query, history, kScale, ctx, out); };

  ExpectRejected([&] { (void)history.VisibleKeys(8); }, out,
                 {"[BatchHistory::VisibleKeys] row 8 is outside the history's 8 rows [0, 8)"});
  ExpectRejected([&] { (void)history.VisibleValues(-1); }, out,
                 {"[BatchHistory::VisibleValues] row -1 is outside"});
  ExpectRejected(
      [&] {
        attend(RandomTensor(rng, {kHq, kN, kD}));
      },
      out, {"[Attention] q has rank 3 (shape [4, 8, 16]), expected 4 [1, Hq, N, D]"});
  ExpectRejected(
      [&] {
        attend(RandomTensor(rng, {2, kHq, kN, kD}));
      },
      out, {"[Attention] q dim 0 is 2, expected 1"});
  ExpectRejected(
      [&] {
        attend(RandomTensor(rng, {1, kHq, kN - 1, kD}));
      },
      out, {"[Attention] q dim 2 (rows) is 7, but the history has 8 rows"});
  ExpectRejected(
      [&] {
        attend(RandomTensor(rng, {1, kHq, kN, kD + 1}));
      },
      out, {"[Attention] q dim 3 (head dim) is 17, but the keys have 16"});
  ExpectRejected(
      [&] {
        attend(RandomTensor(rng, {1, 3, kN, kD}));
      },
      out, {"[Attention] q dim 1 (heads) is 3, not a multiple of 2 kv heads"});
  ExpectRejected(
      [&] {
        (void)Attention(RandomTensor(rng, {1, 3, kN, kD}), history, kScale, ctx);
      },
      out, {"[Attention] q dim 1 (heads) is 3"});

  const auto attend_into = [&](Tensor& o) { Attention(q, history, kScale, ctx, o); };
  Tensor wrong_shape = RandomTensor(rng, {1, kHq, kN, kDv + 1});
  ExpectRejected([&] { attend_into(wrong_shape); }, wrong_shape,
                 {"[Attention] out has shape [1, 4, 8, 9], expected [1, 4, 8, 8]"});
  Tensor wrong_dtype = RandomTensor(rng, {1, kHq, kN, kDv}, DType::kBF16);
  ExpectRejected([&] { attend_into(wrong_dtype); }, wrong_dtype,
                 {"[Attention] out has dtype bf16, expected f32"});
  Tensor empty;
  ExpectRejected([&] { attend_into(empty); }, empty, {"[Attention] out is empty"});
  const std::vector<float> constant(static_cast<std::size_t>(kHq * kN * kDv), 1.5f);
  Tensor read_only = Tensor::Borrow(constant.data(), DType::kF32, {1, kHq, kN, kDv});
  ExpectRejected([&] { attend_into(read_only); }, read_only,
                 {"[Attention] out (shape [1, 4, 8, 8]) is read-only"});
  Tensor shared = RandomTensor(rng, {1, kHq, kN, kD});
  Tensor out_in_q = shared.Slice(3, 0, kDv);
  ExpectRejected([&] { Attention(shared, history, kScale, ctx, out_in_q); }, out_in_q,
                 {"[Attention] out (shape [1, 4, 8, 8]) overlaps q"});
  // out on top of a block the history reads (block 0, f32 [2, 2, 4, 16]: 1 KiB,
  // the same size as out).
  Tensor block = plan.BlockKeys(0);
  Tensor out_in_block =
      Tensor::Borrow(const_cast<void*>(block.Data()), DType::kF32, {1, kHq, kN, kDv});
  const std::vector<float> block_before = block.ToVector();
  ExpectRejected([&] { attend_into(out_in_block); }, out_in_block,
                 {"[Attention] out (shape [1, 4, 8, 8]) overlaps the cached keys or values"});
  EXPECT_EQ(block.ToVector(), block_before);
  // The history is still usable after every refusal.
  CheckAgainstOracle(plan, q, Attention(q, history, kScale, ctx), 0);
}

}  // namespace
}  // namespace ringkv
