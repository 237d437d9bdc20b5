// The padded dense batch without a cache: each entry against the float64
// oracle with a dense boolean mask built here from the PaddedBatch conventions
// (query padding, key lengths, offsets, causal, window), for q and out of every
// layout, and every bad input (named, with out left as it was).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "batch/hand_plan.h"
#include "cache/attention_test_util.h"
#include "cache/cache_test_util.h"
#include "ringkv/batch_attention.h"
#include "ringkv/error.h"
#include "ringkv/kernels/kernel_table.h"
#include "support/sdpa_reference.h"

namespace ringkv {
namespace {

using test::Bits;
using test::ExpectRejected;
using test::RandomTensor;

constexpr std::int64_t kB = 3, kHq = 4, kHkv = 2, kL = 5, kT = 9, kD = 16, kDv = 8;
constexpr float kScale = 0.3f;
// Measured max abs error against the float64 oracle: 4.0e-7 over every tier;
// for bf16 K/V on a tier that rounds the softmax weights to bf16
// (kernels::RoundsBf16Weights), which the oracle does not, 3.3e-3 (AVX-512
// with AVX512-BF16; T <= 9 keys average little of the rounding away).
constexpr double kTol = 1e-6;
constexpr double kBf16WeightsTol = 8e-3;

struct Entries {
  std::array<std::int64_t, kB> q_len, k_len;
  std::vector<std::int64_t> offsets;  // empty: the default
  bool causal;
  std::int64_t window;
  const char* name;
};

// Whether entry b's query i sees key t, by the documented rule.
bool Visible(const Entries& e, std::int64_t b, std::int64_t i, std::int64_t t) {
  const auto ub = static_cast<std::size_t>(b);
  if (i >= e.q_len[ub] || t >= e.k_len[ub]) return false;
  const std::int64_t p = (e.offsets.empty() ? e.k_len[ub] - e.q_len[ub] : e.offsets[ub]) + i;
  if (e.causal && t > p) return false;
  if (e.window > 0 && t <= p - e.window) return false;
  return true;
}

// The oracle's [B, Hq, L, Dv]: one dense-masked SDPA per entry.
std::vector<double> Expected(const Entries& e, const Tensor& q, const Tensor& k, const Tensor& v) {
  std::vector<double> out;
  for (std::int64_t b = 0; b < kB; ++b) {
    const std::vector<float> qb =
        test::QueriesAsAttended(q.Slice(0, b, b + 1).Contiguous().AsType(DType::kF32).ToVector(),
                                k.Dtype(), kernels::BestKernels().isa);
    const std::vector<float> kb = k.Slice(0, b, b + 1).AsType(DType::kF32).ToVector();
    const std::vector<float> vb = v.Slice(0, b, b + 1).AsType(DType::kF32).ToVector();
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(kL * kT));
    for (std::int64_t i = 0; i < kL; ++i) {
      for (std::int64_t t = 0; t < kT; ++t) {
        mask[static_cast<std::size_t>(i * kT + t)] = Visible(e, b, i, t) ? 1 : 0;
      }
    }
    kernels::SdpaParams params;
    params.q = {qb.data(), DType::kF32, {1, kHq, kL, kD}, {kHq * kL * kD, kL * kD, kD, 1}};
    const kernels::KvSegment segment{
        {kb.data(), DType::kF32, {1, kHkv, kT, kD}, {kHkv * kT * kD, kT * kD, kD, 1}},
        {vb.data(), DType::kF32, {1, kHkv, kT, kDv}, {kHkv * kT * kDv, kT * kDv, kDv, 1}}};
    params.kv = std::span<const kernels::KvSegment>(&segment, 1);
    params.scale = kScale;
    params.mask.kind = kernels::MaskKind::kBoolean;
    params.mask.data = mask.data();
    params.mask.strides = {0, 0, kT, 1};
    const std::vector<double> entry = test::ReferenceSdpa(params);
    out.insert(out.end(), entry.begin(), entry.end());
  }
  return out;
}

double ExpectMatches(const Entries& e, const Tensor& out, const std::vector<double>& want,
                     double tol) {
  const std::vector<float> got = out.ToVector();
  EXPECT_EQ(got.size(), want.size());
  double max_err = 0.0;
  for (std::size_t x = 0; x < got.size() && x < want.size(); ++x) {
    const auto b = static_cast<std::int64_t>(x) / (kHq * kL * kDv);
    const auto i = static_cast<std::int64_t>(x) / kDv % kL;
    EXPECT_NEAR(got[x], want[x], tol) << e.name << ": entry " << b << " query " << i;
    if (i >= e.q_len[static_cast<std::size_t>(b)]) {
      EXPECT_EQ(got[x], 0.0f) << "padding row";
    }
    max_err = std::max(max_err, std::abs(static_cast<double>(got[x]) - want[x]));
  }
  return max_err;
}

std::vector<Entries> Cases() {
  return {
      {{5, 2, 0}, {9, 4, 7}, {}, true, 0, "causal"},
      {{5, 2, 3}, {9, 4, 7}, {}, true, 3, "causal_window3"},
      {{5, 2, 3}, {9, 4, 7}, {}, false, 0, "no_mask"},
      {{5, 2, 3}, {9, 4, 7}, {}, false, 2, "window_only"},
      {{4, 5, 1}, {6, 2, 9}, {0, 6, 20}, true, 0, "offsets"},
      {{4, 5, 1}, {6, 2, 9}, {1, 0, 3}, true, 2, "offsets_window"},
      {{5, 3, 2}, {0, 9, 1}, {}, false, 0, "no_keys"},
      {{1, 1, 1}, {9, 1, 5}, {}, true, 1, "decode_window1"},
      {{5, 5, 5}, {9, 9, 9}, {}, true, 100, "dense_wide_window"},
  };
}

class PaddedBatchTest : public ::testing::TestWithParam<DType> {};

TEST_P(PaddedBatchTest, EachEntryMatchesTheOracleWithItsDenseMask) {
  std::mt19937 rng(21);
  Context ctx(2);
  const Tensor q = RandomTensor(rng, {kB, kHq, kL, kD});
  const Tensor k = RandomTensor(rng, {kB, kHkv, kT, kD}, GetParam());
  const Tensor v = RandomTensor(rng, {kB, kHkv, kT, kDv}, GetParam());
  const double tol =
      GetParam() == DType::kBF16 && kernels::RoundsBf16Weights(kernels::BestKernels().isa)
          ? kBf16WeightsTol
          : kTol;
  double max_err = 0.0;
  for (const Entries& e : Cases()) {
    const PaddedBatch batch{e.q_len, e.k_len, e.offsets, e.causal, e.window};
    const Tensor out = ScaledDotProductAttention(q, k, v, batch, kScale, ctx);
    ASSERT_EQ(out.GetShape(), Shape({kB, kHq, kL, kDv}));
    max_err = std::max(max_err, ExpectMatches(e, out, Expected(e, q, k, v), tol));
  }
  RecordProperty("max_abs_error", fmt::format("{:.3g}", max_err));
}

INSTANTIATE_TEST_SUITE_P(KvDtypes, PaddedBatchTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& param_info) {
                           return test::DtypeName(param_info.param);
                         });

// q and out in the engine's [B, L, H, D] layout fold into the kernel's rows in
// place; contiguous [B, H, L, D] ones go through the arena; f16 q and strided k
// are converted. All give the same bits.
TEST(PaddedBatchLayoutTest, EveryLayoutOfQOutAndKvGivesTheSameBits) {
  std::mt19937 rng(8);
  Context ctx(1);
  const Entries e = Cases()[1];
  const PaddedBatch batch{e.q_len, e.k_len, e.offsets, e.causal, e.window};
  const Tensor engine_q = RandomTensor(rng, {kB, kL, kHq, kD});
  const Tensor q_view = engine_q.Permute({0, 2, 1, 3});
  const Tensor q = q_view.Contiguous();
  const Tensor k = RandomTensor(rng, {kB, kHkv, kT, kD}, DType::kF16);
  const Tensor v = RandomTensor(rng, {kB, kHkv, kT, kDv}, DType::kF16);
  const Tensor expected = ScaledDotProductAttention(q, k, v, batch, kScale, ctx);
  ExpectMatches(e, expected, Expected(e, q, k, v), kTol);
  EXPECT_EQ(Bits(ScaledDotProductAttention(q_view, k, v, batch, kScale, ctx)), Bits(expected));

  std::vector<float> engine_out(static_cast<std::size_t>(kB * kL * kHq * kDv), -3.0f);
  Tensor out =
      Tensor::Borrow(engine_out.data(), DType::kF32, {kB, kL, kHq, kDv}).Permute({0, 2, 1, 3});
  ScaledDotProductAttention(q, k, v, batch, kScale, ctx, out);
  EXPECT_EQ(Bits(out), Bits(expected));
  Tensor base = Tensor::Zeros(DType::kF32, {kB + 1, kHq + 1, kL + 2, kDv + 3});
  Tensor gappy =
      base.Slice(0, 1, 1 + kB).Slice(1, 1, 1 + kHq).Slice(2, 1, 1 + kL).Slice(3, 2, 2 + kDv);
  ScaledDotProductAttention(q_view, k, v, batch, kScale, ctx, gappy);
  EXPECT_EQ(Bits(gappy), Bits(expected));

  // A k with its head dim strided (copied), a bf16 q (converted).
  const Tensor k_strided =
      k.Permute({0, 1, 3, 2}).Contiguous().Permute({0, 1, 3, 2});  // [B, Hkv, T, D], stride(3) = T
  ASSERT_NE(k_strided.Stride(3), 1);
  EXPECT_EQ(Bits(ScaledDotProductAttention(q, k_strided, v, batch, kScale, ctx)), Bits(expected));
  const Tensor q16 = q.AsType(DType::kBF16);
  EXPECT_EQ(Bits(ScaledDotProductAttention(q16, k, v, batch, kScale, ctx)),
            Bits(ScaledDotProductAttention(q16.AsType(DType::kF32), k, v, batch, kScale, ctx)));
}

TEST(PaddedBatchErrorsTest, EveryBadInputThrowsNamingTheValuesAndWritesNothing) {
  std::mt19937 rng(5);
  Context ctx(1);
  const Tensor q = RandomTensor(rng, {kB, kHq, kL, kD});
  const Tensor k = RandomTensor(rng, {kB, kHkv, kT, kD});
  const Tensor v = RandomTensor(rng, {kB, kHkv, kT, kDv});
  Tensor out = RandomTensor(rng, {kB, kHq, kL, kDv});
  const std::array<std::int64_t, kB> q_len{5, 2, 0}, k_len{9, 4, 7};
  const std::array<std::int64_t, 2> two{1, 1};
  const auto run = [&](const PaddedBatch& batch) {
    ScaledDotProductAttention(q, k, v, batch, kScale, ctx, out);
  };
  const std::string fn = "[ScaledDotProductAttention] ";

  ExpectRejected(
      [&] {
        run({two, k_len, {}, true, 0});
      },
      out, {fn + "batch.query_lengths has 2 entries, expected B = 3"});
  ExpectRejected(
      [&] {
        run({q_len, two, {}, true, 0});
      },
      out, {fn + "batch.key_lengths has 2 entries, expected B = 3"});
  ExpectRejected(
      [&] {
        run({q_len, k_len, two, true, 0});
      },
      out, {fn + "batch.offsets has 2 entries, expected B = 3"});
  const std::array<std::int64_t, kB> q_long{5, 6, 0}, q_negative{5, -1, 0};
  ExpectRejected(
      [&] {
        run({q_long, k_len, {}, false, 0});
      },
      out, {fn + "batch.query_lengths[1] is 6, outside [0, L = 5]"});
  ExpectRejected(
      [&] {
        run({q_negative, k_len, {}, false, 0});
      },
      out, {fn + "batch.query_lengths[1] is -1, outside [0, L = 5]"});
  const std::array<std::int64_t, kB> k_long{9, 4, 10}, k_negative{-2, 4, 7};
  ExpectRejected(
      [&] {
        run({q_len, k_long, {}, true, 0});
      },
      out, {fn + "batch.key_lengths[2] is 10, outside [0, T = 9]"});
  ExpectRejected(
      [&] {
        run({q_len, k_negative, {}, true, 0});
      },
      out, {fn + "batch.key_lengths[0] is -2, outside [0, T = 9]"});
  const std::array<std::int64_t, kB> offsets{0, -4, 1};
  ExpectRejected(
      [&] {
        run({q_len, k_len, offsets, true, 0});
      },
      out, {fn + "batch.offsets[1] is -4, expected >= 0"});
  ExpectRejected(
      [&] {
        run({q_len, k_len, {}, true, -1});
      },
      out, {fn + "batch.window is -1, expected >= 0"});
  const std::array<std::int64_t, kB> few_keys{9, 1, 7};
  ExpectRejected(
      [&] {
        run({q_len, few_keys, {}, true, 0});
      },
      out, {fn + "batch.query_lengths[1] is 2 > batch.key_lengths[1] = 1"});
  // Without causality or a window the offsets do not matter: accepted.
  run({q_len, few_keys, {}, false, 0});

  const PaddedBatch ok{q_len, k_len, {}, true, 0};
  ExpectRejected(
      [&] { ScaledDotProductAttention(q, k, v.AsType(DType::kF16), ok, kScale, ctx, out); }, out,
      {fn + "k dtype f32 != v dtype f16"});
  ExpectRejected(
      [&] { ScaledDotProductAttention(q, k.Slice(0, 0, 2), v, ok, kScale, ctx, out); }, out,
      {fn + "q shape [3, 4, 5, 16], k shape [2, 2, 9, 16] and v shape [3, 2, 9, 8] must be"});
  ExpectRejected([&] { ScaledDotProductAttention(q, k.Slice(3, 0, 8), v, ok, kScale, ctx, out); },
                 out, {fn + "q dim 3 (head dim) is 16, but the keys have 8"});
  ExpectRejected([&] { ScaledDotProductAttention(q.Slice(1, 0, 3), k, v, ok, kScale, ctx, out); },
                 out, {fn + "q dim 1 (heads) is 3, not a multiple of 2 kv heads"});
  ExpectRejected([&] { ScaledDotProductAttention(q.Slice(0, 0, 1), k, v, ok, kScale, ctx, out); },
                 out, {fn + "q shape [1, 4, 5, 16], k shape [3, 2, 9, 16]"});
  Tensor small = RandomTensor(rng, {kB, kHq, kL - 1, kDv});
  ExpectRejected([&] { ScaledDotProductAttention(q, k, v, ok, kScale, ctx, small); }, small,
                 {fn + "out has shape [3, 4, 4, 8], expected [3, 4, 5, 8]"});
  // out over the storage k reads: k is a view of the same buffer.
  Tensor kv_out = RandomTensor(rng, {kB, kHq, kL, kD});
  Tensor out_over_k = kv_out.Slice(3, 0, kDv);
  const Tensor k_over_out = kv_out.Slice(1, 0, kHkv);
  const std::array<std::int64_t, kB> short_keys{5, 4, 5};
  const PaddedBatch five{q_len, short_keys, {}, true, 0};
  ExpectRejected(
      [&] {
        ScaledDotProductAttention(q, k_over_out, v.Slice(2, 0, kL), five, kScale, ctx, out_over_k);
      },
      out_over_k, {fn + "out (shape [3, 4, 5, 8]) overlaps k (shape [3, 2, 5, 16])"});
}

}  // namespace
}  // namespace ringkv
