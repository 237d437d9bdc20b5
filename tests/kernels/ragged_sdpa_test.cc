// RaggedSdpa on every kernel tier that runs here, against the float64 oracle run
// per row over exactly the keys that row sees (ragged_problem.h). The cases
// together cover: several groups of different lengths and row counts, rows in
// shuffled q rows and rows in no group, causal, windowed, empty, full and
// out-of-list ranges, shared prefixes covered fully, partly or not at all, runs
// of 0, 1 and many keys with their own strides, GQA 1/2/4/8, D != Dv, f32 / f16 /
// bf16, the layer byte offsets, 1 and 2 worker threads, and a workspace of
// exactly RaggedSdpaWorkspaceBytes followed by a guard region. Quantized K/V
// (int8, int4, int4h and mixed pairs) are checked against the same oracle over
// the values the rows store.
#include "ringkv/kernels/ragged_sdpa.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "ragged_plan.h"
#include "ragged_problem.h"
#include "ringkv/kernels/isa.h"
#include "ringkv/kernels/kernel_table.h"
#include "ringkv/kernels/sdpa.h"
#include "sdpa_error.h"
#include "sdpa_run.h"
#include "support/own_threads_executor.h"

namespace ringkv::kernels {
namespace {

using test::GroupSpec;
using test::I64;
using test::RaggedCase;
using test::RaggedProblem;
using test::Ranges;

constexpr std::size_t kGuard = 256;
constexpr unsigned char kPoison = 0xA5;

// Runs RaggedSdpa with a poisoned workspace of exactly the reported size plus a
// guard region, and checks the guard afterwards.
void RunRagged(const RaggedSdpaParams& params, const KernelTable& table, Executor& executor) {
  const std::size_t bytes = RaggedSdpaWorkspaceBytes(ShapeOf(params), executor.Concurrency());
  test::AlignedBytes workspace(bytes + kGuard);
  std::memset(workspace.Span().data(), kPoison, bytes + kGuard);
  RaggedSdpa(params, table, executor, workspace.Span().first(bytes));
  const std::byte* guard = workspace.Span().data() + bytes;
  for (std::size_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(static_cast<unsigned char>(guard[i]), kPoison) << "workspace overrun at +" << i;
  }
}

// Tolerances: about 3x the worst max abs error measured over the four tiers
// (GCC 12, AMD EPYC with AVX-512), written next to each.
std::vector<RaggedCase> Cases() {
  std::vector<RaggedCase> cs;
  // Three groups over one prefix and none: causal prefill with a prefix, windows
  // that start inside the prefix, a 1-key group, an empty row, loose rows.
  cs.push_back(
      {.name = "mixed_gqa4_f16",
       .hq = 8,
       .hkv = 2,
       .d = 64,
       .dv = 48,
       .dtype = DType::kF16,
       .prefixes = {{70, 1}},
       .groups = {{.prefix = 0, .own = {33, 0, 5}, .rows = 5},
                  {.prefix = 0, .own = {200}, .rows = 3, .ranges = Ranges::kWindow, .window = 150},
                  {.own = {1}, .rows = 2, .ranges = Ranges::kFull},
                  {.own = {9, 4}, .rows = 2, .ranges = Ranges::kEmpty}},
       .loose_rows = 2,
       .tol = 3e-7});
  // MHA, odd dims (scalar tails on D and Dv), ranges outside the list, one row
  // seeing only its prefix and one only its own keys.
  cs.push_back({.name = "mha_odd_dims_f32",
                .hq = 3,
                .hkv = 3,
                .d = 33,
                .dv = 20,
                .prefixes = {{17, 0, 30}},
                .groups = {{.prefix = 0, .own = {12}, .rows = 2, .ranges = Ranges::kOutside},
                           {.prefix = 0,
                            .own = {25},
                            .rows = 3,
                            .ranges = Ranges::kExplicit,
                            .explicit_ranges = {{0, 47}, {47, 72}, {40, 60}}}},
                .tol = 3e-7});
  // GQA 8, a long prefill group with several row tiles and a decode row.
  cs.push_back({.name = "gqa8_prefill_bf16",
                .hq = 8,
                .hkv = 1,
                .d = 128,
                .dv = 64,
                .dtype = DType::kBF16,
                .groups = {{.own = {600, 900}, .rows = 20},
                           {.own = {300}, .rows = 1},
                           {.own = {}, .rows = 1}},
                .loose_rows = 1,
                .tol = 3e-7});
  // Decode of many groups sharing a prefix (the cascade shape): each group one
  // row, windows covering the prefix fully, partly and not at all.
  {
    RaggedCase c{.name = "decode_shared_prefix_gqa2_f16",
                 .hq = 4,
                 .hkv = 2,
                 .d = 64,
                 .dv = 64,
                 .dtype = DType::kF16,
                 .prefixes = {{256, 256, 88}, {40}}};
    for (I64 g = 0; g < 12; ++g) {
      GroupSpec spec{.prefix = g % 4 == 3 ? 1 : 0, .own = {g * 9 + 1}, .rows = 1};
      if (g % 3 == 1) {
        spec.ranges = Ranges::kWindow;
        spec.window = g * 60;  // 60 .. 600: partly inside the prefix
      } else if (g % 3 == 2) {
        spec.ranges = Ranges::kWindow;
        spec.window = g * 9 + 1;  // only the group's own keys
      }
      c.groups.push_back(spec);
    }
    c.groups.push_back({.prefix = 0, .own = {}, .rows = 0});  // names the prefix, no rows
    c.groups.push_back({.prefix = 0, .own = {}, .rows = 2, .ranges = Ranges::kFull});
    c.tol = 3e-7;
    cs.push_back(c);
  }
  // GQA 1 with several kv heads, a long group whose keys split into chunks.
  cs.push_back(
      {.name = "long_group_mha_f32",
       .hq = 2,
       .hkv = 2,
       .d = 64,
       .dv = 32,
       .prefixes = {{1500}},
       .groups = {{.prefix = 0, .own = {2100}, .rows = 1},
                  {.prefix = 0, .own = {3}, .rows = 2, .ranges = Ranges::kWindow, .window = 1000}},
       .tol = 3e-7});
  return cs;
}

class RaggedSdpaTest : public ::testing::TestWithParam<Isa> {};

// bf16 attention on a table that rounds the softmax weights to bf16
// (kernel_table.h), which no float64 reference reproduces: about 2.5x the max
// abs error measured on this file's bf16 cases (5.9e-4 in
// NaNOnlyReachesRowsThatSeeIt, 2.0e-4 in gqa8_prefill_bf16).
constexpr double kBf16WeightsTol = 1.5e-3;

double ToleranceFor(const RaggedCase& c, const KernelTable& table, double tol) {
  return c.dtype == DType::kBF16 && table.attend_rounds_bf16_weights ? kBf16WeightsTol : tol;
}

template <int kWorkers>
void CheckCases(Isa isa) {
  const KernelTable& table = *KernelsFor(isa);
  test::OwnThreadsExecutor<kWorkers> executor;
  std::uint32_t seed = 11;
  for (const RaggedCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    RaggedProblem p;
    test::MakeRaggedProblem(c, seed++, p);
    RunRagged(p.params, table, executor);
    const double err = test::RaggedMaxError(p, test::RaggedExpected(p, table));
    std::printf("[ %s x%d ] %-32s max abs error %.3g\n", std::string(IsaName(isa)).c_str(),
                kWorkers, c.name.c_str(), err);
    EXPECT_LE(err, ToleranceFor(c, table, c.tol));
  }
}

TEST_P(RaggedSdpaTest, MatchesReferenceOneThread) { CheckCases<1>(GetParam()); }
TEST_P(RaggedSdpaTest, MatchesReferenceTwoThreads) { CheckCases<2>(GetParam()); }

// The layout the NaN tests poison: one group of 4 rows (G 4) over a 50-key
// prefix and 30 own keys, the rows seeing [0, 20), [20, 40), [40, 80), [0, 80).
RaggedCase NaNCase(const char* name, DType k, std::optional<DType> v, I64 dv) {
  return RaggedCase{.name = name,
                    .hq = 4,
                    .hkv = 1,
                    .d = 32,
                    .dv = dv,
                    .dtype = k,
                    .v_dtype = v,
                    .prefixes = {{50}},
                    .groups = {{.prefix = 0,
                                .own = {30},
                                .rows = 4,
                                .ranges = Ranges::kExplicit,
                                .explicit_ranges = {{0, 20}, {20, 40}, {40, 80}, {0, 80}}}}};
}

// NaNCase's rows once prefix key 10 (its K) and own key 65 (some V columns)
// hold NaN: rows 0 and 3 see both (NaN), row 1 neither (finite), row 2 only key
// 65 (NaN exactly in the columns where nan_in_row2(column)).
template <class Columns>
void ExpectNaNRows(const RaggedProblem& p, const RaggedCase& c, const Columns& nan_in_row2) {
  const RaggedGroup& g = p.groups[0];
  const auto at = [&](I64 h, I64 row, I64 e) {
    const I64 r = p.rows[static_cast<std::size_t>(g.first_row + row)];
    return p.out[static_cast<std::size_t>(h * p.params.out_strides[1] +
                                          r * p.params.out_strides[2] + e)];
  };
  for (I64 h = 0; h < c.hq; ++h) {
    for (I64 e = 0; e < c.dv; ++e) {
      EXPECT_TRUE(std::isnan(at(h, 0, e)));
      EXPECT_TRUE(std::isfinite(at(h, 1, e)));
      EXPECT_EQ(std::isnan(at(h, 2, e)), nan_in_row2(e));
      EXPECT_TRUE(std::isnan(at(h, 3, e)));
    }
  }
}

// NaN follows Sdpa's rule per row: a NaN in a key a row sees poisons that row
// (or the column, for V), a NaN in a key it does not see changes nothing, even
// when another row of the same group (and tile) sees that key.
TEST_P(RaggedSdpaTest, NaNOnlyReachesRowsThatSeeIt) {
  const KernelTable& table = *KernelsFor(GetParam());
  const RaggedCase c = NaNCase("nan", DType::kBF16, std::nullopt, 16);
  RaggedProblem p;
  test::MakeRaggedProblem(c, 3, p);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const I64 elem = 2;
  const RaggedGroup& g = p.groups[0];
  // K of prefix key 10 (rows 0 and 3 see it), V column 5 of own key 65 (rows 2, 3).
  const auto [kr, kt] = test::Locate(p, g, 10);
  const RaggedRun& krun = p.runs[static_cast<std::size_t>(kr)];
  const auto kat = (p.k_layer_bytes + (static_cast<const std::byte*>(krun.k) -
                                       reinterpret_cast<const std::byte*>(p.k_pool.data()))) /
                       elem +
                   kt * krun.k_row_stride + 3;
  test::PoolStore(p.k_pool, c.dtype, static_cast<std::size_t>(kat), nan);
  const auto [vr, vt] = test::Locate(p, g, 65);
  const RaggedRun& vrun = p.runs[static_cast<std::size_t>(vr)];
  const auto vat = (p.v_layer_bytes + (static_cast<const std::byte*>(vrun.v) -
                                       reinterpret_cast<const std::byte*>(p.v_pool.data()))) /
                       elem +
                   vt * vrun.v_row_stride + 5;
  test::PoolStore(p.v_pool, c.dtype, static_cast<std::size_t>(vat), nan);
  test::OwnThreadsExecutor<2> executor;
  RunRagged(p.params, table, executor);
  const std::vector<double> want = test::RaggedExpected(p, table);
  EXPECT_LE(test::RaggedMaxError(p, want), ToleranceFor(c, table, 3e-7));
  // The oracle agrees with the rule: row 1 finite, rows 0 and 3 NaN, row 2 NaN in column 5 only.
  ExpectNaNRows(p, c, [](I64 e) { return e == 5; });
}

// The same rule for quantized rows, poisoned through a NaN scale: K's row scale
// (int8) or first group's (int4h) makes key 10 NaN for the rows that see it; V's
// first group scale of key 65 makes row 2 NaN in that group's columns (int4), or
// in its whole rotation block (int4h: rotating back mixes the block).
TEST_P(RaggedSdpaTest, NaNScaleOnlyReachesRowsThatSeeIt) {
  const KernelTable& table = *KernelsFor(GetParam());
  for (const auto& [k_dtype, v_dtype, nan_columns] :
       {std::tuple{DType::kI8, DType::kI4, I64{32}},
        std::tuple{DType::kI4H, DType::kI4H, I64{64}}}) {
    SCOPED_TRACE(static_cast<int>(k_dtype));
    const RaggedCase c = NaNCase("nan_scale", k_dtype, v_dtype, 64);
    RaggedProblem p;
    test::MakeRaggedProblem(c, 3, p);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const RaggedGroup& g = p.groups[0];
    const auto row_at = [&](std::vector<std::uint32_t>& pool, std::ptrdiff_t layer, const void* run,
                            I64 t, I64 row_stride) {
      return reinterpret_cast<std::byte*>(pool.data()) + layer +
             (static_cast<const std::byte*>(run) -
              reinterpret_cast<const std::byte*>(pool.data())) +
             t * row_stride;
    };
    const auto [kr, kt] = test::Locate(p, g, 10);
    const RaggedRun& krun = p.runs[static_cast<std::size_t>(kr)];
    std::memcpy(row_at(p.k_pool, p.k_layer_bytes, krun.k, kt, krun.k_row_stride) +
                    (k_dtype == DType::kI8 ? c.d : c.d / 2),
                &nan, sizeof nan);
    const auto [vr, vt] = test::Locate(p, g, 65);
    const RaggedRun& vrun = p.runs[static_cast<std::size_t>(vr)];
    std::memcpy(row_at(p.v_pool, p.v_layer_bytes, vrun.v, vt, vrun.v_row_stride) + c.dv / 2, &nan,
                sizeof nan);
    test::OwnThreadsExecutor<2> executor;
    RunRagged(p.params, table, executor);
    // Those tiers round the queries and weights (measured 2.93e-6).
    const bool int16 = kernels::RoundsQuantizedToInt16(GetParam());
    EXPECT_LE(test::RaggedMaxError(p, test::RaggedExpected(p, table)), int16 ? 9e-6 : 3.5e-7);
    ExpectNaNRows(p, c, [&](I64 e) { return e < nan_columns; });
  }
}

// No groups at all: every row is zero, and a call with no rows does nothing.
TEST_P(RaggedSdpaTest, RowsInNoGroupAreZero) {
  const KernelTable& table = *KernelsFor(GetParam());
  RaggedCase c{.name = "loose", .hq = 2, .hkv = 1, .d = 16, .dv = 8, .loose_rows = 3};
  RaggedProblem p;
  test::MakeRaggedProblem(c, 4, p);
  test::OwnThreadsExecutor<2> executor;
  RunRagged(p.params, table, executor);
  EXPECT_EQ(test::RaggedMaxError(p, test::RaggedExpected(p, table)), 0.0);
}

// Quantized K/V, each pair on one problem: GQA 4, a shared prefix of two runs
// read by three groups (causal prefill, windows starting inside it, empty
// ranges), a group without prefix, a loose row. The prefix and the long group
// are long enough that two threads split both phases into key chunks (checked
// on the plan). D and Dv vary so int4h rotates blocks of 128, 64 and 32.
// Tolerances: those of sdpa_quant_test.cc for the same pair (its decode cases),
// not widened for the ragged driver; the worst measured error is next to each.
// int16_tol: on the tiers that round decode tiles to int16 (RoundsQuantizedToInt16).
struct QuantPair {
  const char* name;
  DType k, v;
  I64 d, dv;
  double tol;
  double int16_tol;
};

RaggedCase QuantCase(const QuantPair& q) {
  return {
      .name = q.name,
      .hq = 8,
      .hkv = 2,
      .d = q.d,
      .dv = q.dv,
      .dtype = q.k,
      .v_dtype = q.v,
      .prefixes = {{600, 500}},
      .groups =
          {{.prefix = 0, .own = {700}, .rows = 3},
           {.prefix = 0, .own = {40, 0, 9}, .rows = 2, .ranges = Ranges::kWindow, .window = 300},
           {.prefix = 0, .own = {30}, .rows = 2, .ranges = Ranges::kEmpty},
           {.own = {1200}, .rows = 1, .ranges = Ranges::kFull}},
      .loose_rows = 1};
}

std::vector<QuantPair> QuantPairs() {
  using enum DType;
  // Measured over the scalar, SSE4.2 and AVX2 tiers (GCC 12, AMD EPYC, no AVX-512).
  return {{"i8_i8_d128", kI8, kI8, 128, 128, 3e-7 /* measured 8.54e-8 */,
           7.5e-6 /* measured 2.48e-6 */},
          {"i4_i4_d64", kI4, kI4, 64, 64, 2e-7 /* measured 7.50e-8 */, 7e-6 /* measured 2.39e-6 */},
          {"i4h_i4h_d128_dv64", kI4H, kI4H, 128, 64, 1.5e-7 /* measured 1.02e-7 */,
           9e-6 /* measured 3.06e-6 */},
          {"i8k_i4v_d64_dv96", kI8, kI4, 64, 96, 3e-7 /* measured 1.07e-7 */,
           7e-6 /* measured 2.28e-6 */},
          {"i4hk_i8v_d96_dv64", kI4H, kI8, 96, 64, 2.5e-7 /* measured 7.14e-8 */,
           6.6e-6 /* measured 2.22e-6 */}};
}

struct PreparedQuant {
  QuantPair pair;
  RaggedProblem p;
  std::vector<double> want;
};

// Built and run through the oracle once for every tier (the int4h oracle sums
// over each block per element).
std::vector<PreparedQuant>& PreparedQuantCases() {
  static std::vector<PreparedQuant> prepared = [] {
    std::vector<PreparedQuant> out(QuantPairs().size());
    std::uint32_t seed = 40;
    for (std::size_t i = 0; i < out.size(); ++i) {
      out[i].pair = QuantPairs()[i];
      test::MakeRaggedProblem(QuantCase(out[i].pair), seed++, out[i].p);
      // Quantized K: every table reads the queries as given.
      out[i].want = test::RaggedExpected(out[i].p, *KernelsFor(Isa::kScalar));
    }
    return out;
  }();
  return prepared;
}

template <int kWorkers>
void CheckQuantCases(Isa isa) {
  const KernelTable& table = *KernelsFor(isa);
  test::OwnThreadsExecutor<kWorkers> executor;
  for (PreparedQuant& pc : PreparedQuantCases()) {
    SCOPED_TRACE(pc.pair.name);
    if (kWorkers > 1) {
      // The chunk merge (and Finish after it) is exercised in both phases.
      const ragged::Dims dims = ragged::DimsOf(ShapeOf(pc.p.params));
      const ragged::Layout layout = ragged::MakeLayout(dims, SdpaTuning{}, kWorkers);
      test::AlignedBytes plan_space(static_cast<std::size_t>(layout.total_bytes));
      const ragged::Plan plan =
          ragged::BuildPlan(pc.p.params, dims, SdpaTuning{}, kWorkers, layout, plan_space.Span());
      EXPECT_TRUE(plan.phase_split[0] && plan.phase_split[1]);
    }
    std::fill(pc.p.out.begin(), pc.p.out.end(), test::kOutSentinel);
    RunRagged(pc.p.params, table, executor);
    const double err = test::RaggedMaxError(pc.p, pc.want);
    std::printf("[ %s x%d ] %-32s max abs error %.3g\n", std::string(IsaName(isa)).c_str(),
                kWorkers, pc.pair.name, err);
    EXPECT_LE(err, kernels::RoundsQuantizedToInt16(isa) ? pc.pair.int16_tol : pc.pair.tol);
  }
}

TEST_P(RaggedSdpaTest, QuantizedKvOneThread) { CheckQuantCases<1>(GetParam()); }
TEST_P(RaggedSdpaTest, QuantizedKvTwoThreads) { CheckQuantCases<2>(GetParam()); }

std::string IsaParamName(const ::testing::TestParamInfo<Isa>& info) {
  return std::string(IsaKey(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllIsas, RaggedSdpaTest, ::testing::ValuesIn(AvailableIsas()),
                         IsaParamName);

}  // namespace
}  // namespace ringkv::kernels
