// Sdpa over quantized K/V rows (int8 / int4, and mixed int8 K + int4 V or the
// reverse) on every tier that runs here, against the float64 reference over the
// dequantised values (support/sdpa_reference.cc reads s * q from the stored
// rows). The rows are quantized once by the scalar tier's convert_rows; every
// tier then reads the same bytes, so the error measured is the kernel's own
// (f32 dots with the scales folded in, exp, sums; on the SIMD tiers also the
// int16 rounding of queries and softmax weights for int8 K / V in decode-sized
// tiles), not the quantization's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ringkv/kernels/isa.h"
#include "ringkv/kernels/kernel_table.h"
#include "ringkv/kernels/sdpa.h"
#include "ringkv/kernels/thread_pool.h"
#ifdef RINGKV_HAVE_AVX512
#include "fill_kernels.h"
#endif
#include "sdpa_error.h"
#include "sdpa_run.h"
#include "support/sdpa_reference.h"
#include "tier_name.h"

namespace ringkv::kernels {
namespace {

using test::MaxAbsError;
using test::ReferenceSdpa;
using test::TierName;
using I64 = std::int64_t;
constexpr float kInf = std::numeric_limits<float>::infinity();

struct QCase {
  std::string name{};
  I64 batch = 1, hq = 1, hkv = 1, seq_l = 1, seq_t = 1, d = 64, dv = 64;
  DType k_dtype = DType::kI8;
  DType v_dtype = DType::kI8;
  MaskKind mask = MaskKind::kNone;
  std::vector<I64> segments{};  // lengths; empty = one segment of seq_t
  bool strided = false;         // an extra kv head and padded rows
  // Keys t % 7 == 3 are hidden from every row by a boolean mask, and their K
  // and V rows hold NaN (a NaN scale): nothing of them may reach the output.
  bool nan_hidden = false;
  double tol = 0.0;  // max abs error allowed against the f64 reference
  // ... on the tiers that round to int16 (RoundsQuantizedToInt16), when they
  // take that path for this case; 0: tol.
  double int16_tol = 0.0;
};

struct QProblem {
  std::vector<float> q;
  std::vector<std::vector<std::uint8_t>> k, v;
  std::vector<KvSegment> segs;
  std::vector<std::uint8_t> boolean;
  std::vector<float> out;
  SdpaParams params;
};

// Rows of `n` random values in [-1, 1] (NaN for hidden keys), quantized to
// `dtype` at `row_bytes` apart: [batch, heads, len] rows.
std::vector<std::uint8_t> QuantizedRows(const QCase& c, DType dtype, I64 n, I64 heads, I64 len,
                                        I64 first_key, I64 row_bytes, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const I64 rows = c.batch * heads * len;
  std::vector<float> x(static_cast<std::size_t>(rows * n));
  for (I64 r = 0; r < rows; ++r) {
    const I64 t = first_key + r % len;
    for (I64 e = 0; e < n; ++e) {
      x[static_cast<std::size_t>(r * n + e)] =
          c.nan_hidden && t % 7 == 3 ? std::numeric_limits<float>::quiet_NaN() : dist(rng);
    }
  }
  std::vector<std::uint8_t> out(static_cast<std::size_t>(rows * row_bytes), 0xA5);
  KernelsFor(Isa::kScalar)
      ->convert_rows(DType::kF32, x.data(), n, dtype, out.data(), row_bytes,
                     static_cast<std::size_t>(rows), static_cast<std::size_t>(n));
  return out;
}

void MakeProblem(const QCase& c, std::uint32_t seed, QProblem& p) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> qdist(-1.0f, 1.0f);
  p.q.resize(static_cast<std::size_t>(c.batch * c.hq * c.seq_l * c.d));
  for (float& x : p.q) x = qdist(rng);
  p.params.q = {p.q.data(),
                DType::kF32,
                {c.batch, c.hq, c.seq_l, c.d},
                {c.hq * c.seq_l * c.d, c.seq_l * c.d, c.d, 1}};
  const std::vector<I64> lengths = c.segments.empty() ? std::vector<I64>{c.seq_t} : c.segments;
  const I64 heads = c.strided ? c.hkv + 1 : c.hkv;
  const I64 head_off = c.strided ? 1 : 0;
  const I64 krow = static_cast<I64>(RowBytes(c.k_dtype, c.d)) + (c.strided ? 5 : 0);
  const I64 vrow = static_cast<I64>(RowBytes(c.v_dtype, c.dv)) + (c.strided ? 3 : 0);
  p.k.clear();
  p.v.clear();
  p.segs.clear();
  I64 begin = 0;
  for (I64 len : lengths) {
    p.k.push_back(QuantizedRows(c, c.k_dtype, c.d, heads, len, begin, krow, rng));
    p.v.push_back(QuantizedRows(c, c.v_dtype, c.dv, heads, len, begin, vrow, rng));
    KvSegment seg;
    seg.k = {p.k.back().data() + head_off * len * krow,
             c.k_dtype,
             {c.batch, c.hkv, len, c.d},
             {heads * len * krow, len * krow, krow, 1}};
    seg.v = {p.v.back().data() + head_off * len * vrow,
             c.v_dtype,
             {c.batch, c.hkv, len, c.dv},
             {heads * len * vrow, len * vrow, vrow, 1}};
    p.segs.push_back(seg);
    begin += len;
  }
  p.params.kv = p.segs;
  const I64 orow = c.dv + 5;
  p.out.assign(static_cast<std::size_t>(c.batch * c.hq * c.seq_l * orow), kInf);
  p.params.out = p.out.data();
  p.params.out_strides = {c.hq * c.seq_l * orow, c.seq_l * orow, orow, 1};
  p.params.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  p.params.mask.kind = c.mask;
  if (c.nan_hidden) {
    p.params.mask.kind = MaskKind::kBoolean;
    p.boolean.resize(static_cast<std::size_t>(c.batch * c.seq_l * c.seq_t));
    for (std::size_t i = 0; i < p.boolean.size(); ++i) {
      const I64 t = static_cast<I64>(i) % c.seq_t;
      const I64 row = static_cast<I64>(i) / c.seq_t % c.seq_l;
      // Causal as well, so prefill rows see different key sets.
      p.boolean[i] = t % 7 != 3 && t <= c.seq_t - c.seq_l + row ? 1 : 0;
    }
    p.params.mask.data = p.boolean.data();
    p.params.mask.strides = {c.seq_l * c.seq_t, 0, c.seq_t, 1};
  }
}

// Tolerances: about 3x the worst max abs error measured over the scalar, SSE4.2
// and AVX2 tiers (GCC 12, AMD EPYC, no AVX-512), written next to each; int16_tol
// over SSE4.2 and AVX2, which round the decode-sized tiles' queries and weights
// to int16.
std::vector<QCase> Cases() {
  using enum DType;
  std::vector<QCase> cs;
  auto add = [&cs](QCase c) { cs.push_back(std::move(c)); };
  add({.name = "decode_i8_gqa_d128",
       .batch = 2,
       .hq = 8,
       .hkv = 2,
       .seq_t = 700,
       .d = 128,
       .dv = 128,
       .mask = MaskKind::kCausal,
       .tol = 3e-7 /* measured 1.14e-7 */,
       .int16_tol = 6e-6 /* measured 1.95e-6 */});
  add({.name = "decode_i4_gqa_d64",
       .hq = 8,
       .hkv = 2,
       .seq_t = 333,
       .k_dtype = kI4,
       .v_dtype = kI4,
       .tol = 2e-7 /* measured 6.41e-8 */,
       .int16_tol = 7.5e-6 /* measured 2.44e-6 */});
  // Two blocks of four scale groups per key: the int4 score tile's group sums
  // carried across blocks.
  add({.name = "decode_i4_gqa_d256",
       .hq = 8,
       .hkv = 2,
       .seq_t = 190,
       .d = 256,
       .dv = 256,
       .k_dtype = kI4,
       .v_dtype = kI4,
       .tol = 2.5e-7 /* measured 7.81e-8 */,
       .int16_tol = 1e-5 /* measured 3.54e-6 */});
  add({.name = "decode_i8k_i4v_d128_segments",
       .hq = 4,
       .hkv = 1,
       .seq_t = 300,
       .d = 128,
       .dv = 128,
       .v_dtype = kI4,
       .segments = {5, 130, 165},
       .strided = true,
       .tol = 3e-7 /* measured 9.95e-8 */,
       .int16_tol = 6.5e-6 /* measured 2.12e-6 */});
  add({.name = "prefill_causal_i4k_i8v_d64",
       .hq = 6,
       .hkv = 3,
       .seq_l = 37,
       .seq_t = 90,
       .k_dtype = kI4,
       .mask = MaskKind::kCausal,
       .segments = {40, 50},
       .tol = 3.5e-7 /* measured 1.32e-7 */,
       .int16_tol = 1.4e-5 /* measured 4.53e-6 */});
  add({.name = "prefill_causal_i8_d68_tails",
       .hq = 3,
       .hkv = 1,
       .seq_l = 20,
       .seq_t = 20,
       .d = 68,
       .dv = 68,
       .mask = MaskKind::kCausal,
       .strided = true,
       .tol = 4.5e-7 /* measured 1.60e-7 */});
  add({.name = "prefill_causal_i4_d128_gqa",
       .batch = 2,
       .hq = 8,
       .hkv = 2,
       .seq_l = 9,
       .seq_t = 140,
       .d = 128,
       .dv = 128,
       .k_dtype = kI4,
       .v_dtype = kI4,
       .mask = MaskKind::kCausal,
       .tol = 3e-7 /* measured 1.13e-7 */});
  // int4h: the driver rotates q (K) and the output (V); blocks of 128, 32 (d 96),
  // 256 and 64, split into key chunks on two threads.
  add({.name = "decode_i4h_gqa_d128",
       .hq = 8,
       .hkv = 2,
       .seq_t = 333,
       .d = 128,
       .dv = 128,
       .k_dtype = kI4H,
       .v_dtype = kI4H,
       .tol = 1.5e-7 /* measured 4.84e-8 */,
       .int16_tol = 9e-6 /* measured 3.05e-6 */});
  add({.name = "decode_i4hk_i8v_d96_segments",
       .hq = 4,
       .hkv = 1,
       .seq_t = 300,
       .d = 96,
       .dv = 96,
       .k_dtype = kI4H,
       .segments = {5, 130, 165},
       .strided = true,
       .tol = 2.5e-7 /* measured 7.41e-8 */,
       .int16_tol = 6.5e-6 /* measured 2.15e-6 */});
  add({.name = "prefill_causal_i8k_i4hv_d256",
       .hq = 4,
       .hkv = 2,
       .seq_l = 9,
       .seq_t = 70,
       .d = 256,
       .dv = 256,
       .v_dtype = kI4H,
       .mask = MaskKind::kCausal,
       .tol = 3e-7 /* measured 8.99e-8 */,
       .int16_tol = 2.7e-5 /* measured 8.92e-6 */});
  add({.name = "prefill_causal_i4h_d64_i4v",
       .batch = 2,
       .hq = 6,
       .hkv = 3,
       .seq_l = 21,
       .seq_t = 50,
       .k_dtype = kI4H,
       .v_dtype = kI4,
       .mask = MaskKind::kCausal,
       .tol = 3.5e-7 /* measured 1.20e-7 */});
  const auto short_name = [](DType dtype) {
    return dtype == kI8 ? "i8" : dtype == kI4 ? "i4" : "i4h";
  };
  for (DType kd : {kI8, kI4, kI4H}) {
    for (DType vd : {kI8, kI4, kI4H}) {
      add({.name = std::string("nan_hidden_") + short_name(kd) + "_" + short_name(vd),
           .hq = 4,
           .hkv = 2,
           .seq_l = 5,
           .seq_t = 150,
           .d = 64,
           .dv = 64,
           .k_dtype = kd,
           .v_dtype = vd,
           .segments = {70, 80},
           .nan_hidden = true,
           .tol = 3.5e-7 /* measured 1.21e-7 (int4h 9.72e-8) */,
           .int16_tol = 1.3e-5 /* measured 3.40e-6 - 4.40e-6 */});
    }
  }
  return cs;
}

struct Prepared {
  QCase c;
  QProblem p;
  std::vector<double> ref;
};

std::vector<Prepared>& PreparedCases() {
  static std::vector<Prepared> prepared = [] {
    std::vector<Prepared> out;
    std::uint32_t seed = 100;
    for (const QCase& c : Cases()) {
      Prepared& pc = out.emplace_back();
      pc.c = c;
      MakeProblem(c, seed++, pc.p);
      pc.ref = ReferenceSdpa(pc.p.params);
    }
    return out;
  }();
  return prepared;
}

class SdpaQuantTest : public ::testing::TestWithParam<Isa> {
 protected:
  const KernelTable& Table() const { return *KernelsFor(GetParam()); }
};

TEST_P(SdpaQuantTest, MatchesReferenceOverDequantisedValues) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (Prepared& pc : PreparedCases()) {
      std::fill(pc.p.out.begin(), pc.p.out.end(), kInf);
      test::RunSdpa(pc.p.params, Table(), pool);
      const double err = MaxAbsError(pc.p.params, pc.ref);
      const bool int16 = kernels::RoundsQuantizedToInt16(GetParam()) && pc.c.int16_tol > 0.0;
      EXPECT_LE(err, int16 ? pc.c.int16_tol : pc.c.tol) << pc.c.name << " threads " << threads;
      std::printf("[ %s ] %-32s threads %d max abs error %.3g\n",
                  std::string(IsaName(GetParam())).c_str(), pc.c.name.c_str(), threads, err);
    }
  }
}

// A NaN scale in a visible int4 V row poisons exactly its group's output
// columns, as a NaN element of a float V would (checks the group of each scale
// and the accumulator's span order).
TEST_P(SdpaQuantTest, NanScaleOfAVisibleGroupPoisonsItsColumns) {
  QCase c{.name = "nan_visible",
          .hq = 2,
          .hkv = 1,
          .seq_l = 4,
          .seq_t = 40,
          .v_dtype = DType::kI4,
          .mask = MaskKind::kCausal};
  QProblem p;
  MakeProblem(c, 5, p);
  // Key 0 (seen by every row under the causal mask): its second group's scale.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(p.v[0].data() + c.dv / 2 + 4, &nan, sizeof nan);
  ThreadPool pool(1);
  test::RunSdpa(p.params, Table(), pool);
  for (I64 h = 0; h < c.hq; ++h) {
    for (I64 i = 0; i < c.seq_l; ++i) {
      const float* row = p.out.data() + h * p.params.out_strides[1] + i * p.params.out_strides[2];
      for (I64 e = 0; e < c.dv; ++e) {
        EXPECT_EQ(std::isnan(row[e]), e >= 32 && e < 64) << h << " " << i << " " << e;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, SdpaQuantTest, ::testing::ValuesIn(AvailableIsas()), TierName);

#ifdef RINGKV_HAVE_AVX512
// The AVX-512 tier's attends built with extensions, isa_avx512_vnni.cc and
// isa_avx512_bf16.cc (VNNI, and bf16 dot products that quantized K never
// reaches), only fuse each int16 multiply-add with its accumulation
// (vpdpwssd): the same int32 sums, so every output must be the plain AVX-512
// attend's, bit for bit. SdpaQuantTest holds the one the CPU selects to the
// reference; this holds each that runs here, the plain one included, to the
// others. Instantiated only where the tier runs with VNNI (an empty list elsewhere).
std::vector<Isa> Avx512WithVnni() {
  const KernelTable* t = KernelsFor(Isa::kAvx512);
  if (t == nullptr || !DetectCpu().avx512vnni) return {};
  return {Isa::kAvx512};
}

class Avx512VnniTest : public ::testing::TestWithParam<Isa> {};

TEST_P(Avx512VnniTest, AttendsGiveThePlainAttendsOutputsBitForBit) {
  KernelTable plain;
  plain.isa = Isa::kAvx512;
  FillAvx512Kernels(plain);
  KernelTable vnni = plain;
  FillAvx512VnniAttend(vnni);
  std::vector<const KernelTable*> units{&vnni};
  KernelTable bf16 = plain;
  if (DetectCpu().avx512bf16) {
    FillAvx512Bf16Attend(bf16);
    units.push_back(&bf16);
  }
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (Prepared& pc : PreparedCases()) {
      std::fill(pc.p.out.begin(), pc.p.out.end(), kInf);
      test::RunSdpa(pc.p.params, plain, pool);
      const std::vector<float> expected = pc.p.out;
      for (const KernelTable* unit : units) {
        std::fill(pc.p.out.begin(), pc.p.out.end(), kInf);
        test::RunSdpa(pc.p.params, *unit, pool);
        EXPECT_EQ(std::memcmp(pc.p.out.data(), expected.data(), expected.size() * sizeof(float)), 0)
            << pc.c.name << " threads " << threads
            << (unit->attend_rounds_bf16_queries ? " (vnni + bf16)" : " (vnni)");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, Avx512VnniTest, ::testing::ValuesIn(Avx512WithVnni()), TierName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Avx512VnniTest);
#endif

}  // namespace
}  // namespace ringkv::kernels
