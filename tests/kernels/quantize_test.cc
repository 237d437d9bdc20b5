// KernelTable::convert_rows with quantized rows (layout in dtype.h) on every tier
// that runs here: the round-trip error against a float64 expectation of the
// scale and of s * q, hand-worked rows (nibble order, scale position), zero and
// non-finite rows, strided and unaligned rows with canaries between them, the
// byte copy of a quantized row, dequantization to f32 / f16 / bf16, and the bytes
// of every tier against the scalar tier's.
#include <gtest/gtest.h>

#include <bit>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ringkv/kernels/dtype.h"
#include "ringkv/kernels/isa.h"
#include "ringkv/kernels/kernel_table.h"
#include "tier_name.h"

namespace ringkv::kernels {
namespace {

using test::TierName;

constexpr std::uint8_t kCanary = 0xA5;

float ScaleAt(const std::uint8_t* p) {
  float s;
  std::memcpy(&s, p, sizeof s);
  return s;
}

int I8At(const std::uint8_t* row, std::size_t i) { return static_cast<std::int8_t>(row[i]); }

int I4At(const std::uint8_t* row, std::size_t i) {
  const int nibble = i % 2 == 0 ? row[i / 2] & 0xF : row[i / 2] >> 4;
  return nibble >= 8 ? nibble - 16 : nibble;
}

// Value i of a stored row of n values, as the float64 s * q.
double Dequant(DType dtype, const std::uint8_t* row, std::size_t n, std::size_t i) {
  if (dtype == DType::kI8) return static_cast<double>(ScaleAt(row + n)) * I8At(row, i);
  const std::size_t g = i / static_cast<std::size_t>(kI4Group);
  return static_cast<double>(ScaleAt(row + n / 2 + 4 * g)) * I4At(row, i);
}

double ScaleOf(DType dtype, const std::uint8_t* row, std::size_t n, std::size_t i) {
  if (dtype == DType::kI8) return ScaleAt(row + n);
  return ScaleAt(row + n / 2 + 4 * (i / static_cast<std::size_t>(kI4Group)));
}

std::vector<float> RandomRows(std::size_t count, std::uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> x(count);
  for (float& v : x) v = dist(rng);
  return x;
}

class QuantizeTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    table_ = KernelsFor(GetParam());
    ASSERT_NE(table_, nullptr);
    ASSERT_NE(table_->convert_rows, nullptr);
  }

  // One f32 row -> one quantized row.
  std::vector<std::uint8_t> Quantize(const std::vector<float>& x, DType to) const {
    std::vector<std::uint8_t> out(RowBytes(to, static_cast<std::int64_t>(x.size())), kCanary);
    table_->convert_rows(DType::kF32, x.data(), 0, to, out.data(), 0, 1, x.size());
    return out;
  }

  const KernelTable* table_ = nullptr;
};

// Per value |x - s q| <= s / 2, up to the rounding of x * (1 / s): 1 / s and the
// product are each rounded once, so |x / s - x * inv| <= qmax * 2^-23 (bound
// below: 127 * 2^-23 ~ 1.5e-5 of s); the scale is max|x| / qmax to f32 rounding; the largest
// |x| of each run maps to +-qmax.
TEST_P(QuantizeTest, RoundTripErrorAgainstFloat64) {
  for (DType dtype : {DType::kI8, DType::kI4}) {
    const double qmax = dtype == DType::kI8 ? 127.0 : 7.0;
    const std::size_t run_len = dtype == DType::kI8 ? 0 : static_cast<std::size_t>(kI4Group);
    for (std::size_t n : {32u, 64u, 128u, 96u}) {
      for (std::uint32_t seed = 0; seed < 20; ++seed) {
        const float range = std::ldexp(1.0f, static_cast<int>(seed % 9) * 4 - 16);
        const std::vector<float> x =
            RandomRows(n, seed * 31 + static_cast<std::uint32_t>(n), -range, range);
        const std::vector<std::uint8_t> row = Quantize(x, dtype);
        const std::size_t len = run_len == 0 ? n : run_len;
        for (std::size_t begin = 0; begin < n; begin += len) {
          double amax = 0.0;
          for (std::size_t i = begin; i < begin + len; ++i)
            amax = std::max(amax, std::fabs(double{x[i]}));
          const double s = ScaleOf(dtype, row.data(), n, begin);
          EXPECT_NEAR(s, amax / qmax, amax / qmax * 0x1p-24) << "n " << n << " seed " << seed;
          bool hit_max = false;
          for (std::size_t i = begin; i < begin + len; ++i) {
            const double err = std::fabs(double{x[i]} - Dequant(dtype, row.data(), n, i));
            EXPECT_LE(err, s * (0.5 + 127 * 0x1p-23))
                << "value " << i << " n " << n << " seed " << seed;
            const int q = dtype == DType::kI8 ? I8At(row.data(), i) : I4At(row.data(), i);
            EXPECT_LE(std::abs(q), static_cast<int>(qmax));
            hit_max |= std::abs(q) == static_cast<int>(qmax);
          }
          EXPECT_TRUE(hit_max);
        }
      }
    }
  }
}

// s = 1: q is x rounded half to even; the scale follows the data, little-endian.
TEST_P(QuantizeTest, HandWorkedInt8Row) {
  const std::vector<float> x = {127.0f, -63.5f, 0.5f, 1.5f, -2.5f};
  const std::vector<std::uint8_t> row = Quantize(x, DType::kI8);
  const std::vector<std::uint8_t> expected = {0x7F, 0xC0, 0x00, 0x02, 0xFE, 0x00, 0x00, 0x80, 0x3F};
  EXPECT_EQ(row, expected);
}

// Value 2i in the low nibble of byte i, 2i + 1 in the high one; group g's scale
// at n / 2 + 4 g.
TEST_P(QuantizeTest, HandWorkedInt4Row) {
  std::vector<float> x(64, 0.0f);
  x[0] = 7.0f;
  x[1] = -7.0f;
  x[2] = 2.5f;    // -> 2
  x[3] = -0.5f;   // -> 0
  x[4] = 3.5f;    // -> 4
  x[32] = 14.0f;  // group 1: s = 2
  x[33] = 3.0f;   // 1.5 -> 2
  x[63] = -5.0f;  // -2.5 -> -2
  const std::vector<std::uint8_t> row = Quantize(x, DType::kI4);
  std::vector<std::uint8_t> expected(40, 0);
  expected[0] = 0x97;
  expected[1] = 0x02;
  expected[2] = 0x04;
  expected[16] = 0x27;
  expected[31] = 0xE0;
  const std::uint8_t one[4] = {0x00, 0x00, 0x80, 0x3F};
  const std::uint8_t two[4] = {0x00, 0x00, 0x00, 0x40};
  std::memcpy(expected.data() + 32, one, 4);
  std::memcpy(expected.data() + 36, two, 4);
  EXPECT_EQ(row, expected);
}

TEST_P(QuantizeTest, ZeroRowsHaveZeroScaleAndReadBackZero) {
  for (DType dtype : {DType::kI8, DType::kI4}) {
    for (std::size_t n : {32u, 64u, 160u}) {
      const std::vector<float> x(n, 0.0f);
      const std::vector<std::uint8_t> row = Quantize(x, dtype);
      for (std::uint8_t b : row) EXPECT_EQ(b, 0);
      std::vector<float> back(n, 1.0f);
      table_->convert_rows(dtype, row.data(), 0, DType::kF32, back.data(), 0, 1, n);
      for (float v : back) EXPECT_EQ(std::bit_cast<std::uint32_t>(v), 0u);
    }
  }
}

// NaN or Inf anywhere in a run gives a NaN scale (and q = 0), so the whole run
// reads back NaN; the other runs of the row are untouched by it.
TEST_P(QuantizeTest, NonFiniteRunsGetNanScale) {
  const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity()};
  for (float bad : bad_values) {
    for (std::size_t at : {0u, 5u, 31u, 40u, 63u}) {
      std::vector<float> x = RandomRows(64, static_cast<std::uint32_t>(at), -3.0f, 3.0f);
      x[at] = bad;
      const std::vector<std::uint8_t> i8 = Quantize(x, DType::kI8);
      EXPECT_TRUE(std::isnan(ScaleAt(i8.data() + 64)));
      for (std::size_t i = 0; i < 64; ++i) EXPECT_EQ(i8[i], 0) << i;
      const std::vector<std::uint8_t> i4 = Quantize(x, DType::kI4);
      const std::size_t bad_group = at / 32;
      EXPECT_TRUE(std::isnan(ScaleAt(i4.data() + 32 + 4 * bad_group)));
      EXPECT_FALSE(std::isnan(ScaleAt(i4.data() + 32 + 4 * (1 - bad_group))));
      std::vector<float> back(64);
      table_->convert_rows(DType::kI4, i4.data(), 0, DType::kF32, back.data(), 0, 1, 64);
      for (std::size_t i = 0; i < 64; ++i) EXPECT_EQ(std::isnan(back[i]), i / 32 == bad_group) << i;
    }
  }
}

// Rows at odd strides from unaligned pointers, f16 and bf16 sources too: each
// row's bytes match the row quantized alone, and the gaps keep their canaries.
TEST_P(QuantizeTest, StridedUnalignedRows) {
  constexpr std::size_t kRows = 3;
  for (DType to : {DType::kI8, DType::kI4}) {
    for (DType from : {DType::kF32, DType::kF16, DType::kBF16}) {
      const std::size_t n = to == DType::kI8 ? 37 : 96;
      const std::size_t row_bytes = RowBytes(to, static_cast<std::int64_t>(n));
      const std::ptrdiff_t src_stride = static_cast<std::ptrdiff_t>(n) + 3;  // elements
      const std::ptrdiff_t dst_stride = static_cast<std::ptrdiff_t>(row_bytes) + 5;
      const std::vector<float> x = RandomRows(kRows * (n + 3), 7, -9.0f, 9.0f);
      // The source in `from`, one element in (unaligned for the batches).
      std::vector<std::uint8_t> src((x.size() + 1) * SizeOf(from));
      table_->convert(DType::kF32, x.data(), from, src.data() + SizeOf(from), x.size());
      std::vector<std::uint8_t> dst(3 + kRows * static_cast<std::size_t>(dst_stride), kCanary);
      table_->convert_rows(from, src.data() + SizeOf(from), src_stride, to, dst.data() + 3,
                           dst_stride, kRows, n);
      for (std::size_t r = 0; r < kRows; ++r) {
        // The same row alone, through f32 (f16 / bf16 -> f32 is exact).
        std::vector<float> one(n);
        table_->convert(from, src.data() + SizeOf(from) * (1 + r * (n + 3)), DType::kF32,
                        one.data(), n);
        const std::vector<std::uint8_t> expected = Quantize(one, to);
        const std::uint8_t* got = dst.data() + 3 + r * static_cast<std::size_t>(dst_stride);
        EXPECT_EQ(std::vector<std::uint8_t>(got, got + row_bytes), expected) << "row " << r;
        for (std::size_t b = row_bytes; b < static_cast<std::size_t>(dst_stride); ++b) {
          EXPECT_EQ(got[b], kCanary);
        }
      }
      for (std::size_t b = 0; b < 3; ++b) EXPECT_EQ(dst[b], kCanary);
    }
  }
}

// A quantized dtype to itself copies each row's bytes, scales included.
TEST_P(QuantizeTest, QuantizedToSameDTypeCopiesRows) {
  for (DType dtype : {DType::kI8, DType::kI4}) {
    const std::size_t n = 64;
    const std::size_t row_bytes = RowBytes(dtype, n);
    std::vector<std::uint8_t> src(4 * (row_bytes + 7));
    std::mt19937 rng(3);
    for (auto& b : src) b = static_cast<std::uint8_t>(rng());
    std::vector<std::uint8_t> dst(1 + 4 * (row_bytes + 2), kCanary);
    table_->convert_rows(dtype, src.data() + 1, static_cast<std::ptrdiff_t>(row_bytes + 7), dtype,
                         dst.data() + 1, static_cast<std::ptrdiff_t>(row_bytes + 2), 4, n);
    for (std::size_t r = 0; r < 4; ++r) {
      for (std::size_t b = 0; b < row_bytes + 2; ++b) {
        const std::uint8_t want = b < row_bytes ? src[1 + r * (row_bytes + 7) + b] : kCanary;
        EXPECT_EQ(dst[1 + r * (row_bytes + 2) + b], want);
      }
    }
    EXPECT_EQ(dst[0], kCanary);
  }
}

// Dequantization gives s * q as one f32 product (the float64 product rounded
// once), then rounded to the target type.
TEST_P(QuantizeTest, DequantizeToEveryFloatType) {
  for (DType from : {DType::kI8, DType::kI4}) {
    for (std::size_t n : {32u, 160u}) {
      const std::vector<float> x = RandomRows(n, 11, -100.0f, 100.0f);
      const std::vector<std::uint8_t> row = Quantize(x, from);
      for (DType to : {DType::kF32, DType::kF16, DType::kBF16}) {
        std::vector<std::uint8_t> out(n * SizeOf(to) + 4, kCanary);
        table_->convert_rows(from, row.data(), 0, to, out.data() + 2, 0, 1, n);
        for (std::size_t i = 0; i < n; ++i) {
          const auto want = static_cast<float>(Dequant(from, row.data(), n, i));
          if (to == DType::kF32) {
            float got;
            std::memcpy(&got, out.data() + 2 + 4 * i, 4);
            EXPECT_EQ(got, want) << i;
          } else {
            std::uint16_t got;
            std::memcpy(&got, out.data() + 2 + 2 * i, 2);
            EXPECT_EQ(got, to == DType::kF16 ? F32ToF16(want) : F32ToBF16(want)) << i;
          }
        }
        EXPECT_EQ(out[0], kCanary);
        EXPECT_EQ(out[n * SizeOf(to) + 3], kCanary);
      }
    }
  }
}

// Every tier writes the scalar tier's bytes: the same scale (an exact max and
// one f32 division), the same x * (1 / s) and the same rounding. Includes rows
// of every length 1..70 for the int8 tails, and tiny rows of denormal scale.
TEST_P(QuantizeTest, SameBytesAsScalarTier) {
  const KernelTable* scalar = KernelsFor(Isa::kScalar);
  ASSERT_NE(scalar, nullptr);
  for (DType to : {DType::kI8, DType::kI4}) {
    for (DType from : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (std::size_t n = to == DType::kI8 ? 1 : 32; n <= 192; n += to == DType::kI8 ? 1 : 32) {
        for (float range : {1.0f, 1e-3f, 3e4f, 1e-39f}) {
          if (from != DType::kF32 && range < 1e-30f) continue;  // f16 has no such values
          const std::vector<float> x =
              RandomRows(4 * n, static_cast<std::uint32_t>(n), -range, range);
          std::vector<std::uint8_t> src(x.size() * SizeOf(from));
          scalar->convert(DType::kF32, x.data(), from, src.data(), x.size());
          const std::size_t row_bytes = RowBytes(to, static_cast<std::int64_t>(n));
          std::vector<std::uint8_t> a(4 * row_bytes, kCanary);
          std::vector<std::uint8_t> b(4 * row_bytes, kCanary);
          const auto stride = static_cast<std::ptrdiff_t>(n);
          const auto dst_stride = static_cast<std::ptrdiff_t>(row_bytes);
          scalar->convert_rows(from, src.data(), stride, to, a.data(), dst_stride, 4, n);
          table_->convert_rows(from, src.data(), stride, to, b.data(), dst_stride, 4, n);
          EXPECT_EQ(a, b) << "n " << n << " range " << range;
          std::vector<float> back_a(4 * n);
          std::vector<float> back_b(4 * n);
          scalar->convert_rows(to, a.data(), dst_stride, DType::kF32, back_a.data(), stride, 4, n);
          table_->convert_rows(to, a.data(), dst_stride, DType::kF32, back_b.data(), stride, 4, n);
          EXPECT_EQ(back_a, back_b) << "n " << n << " range " << range;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, QuantizeTest, ::testing::ValuesIn(AvailableIsas()), TierName);

}  // namespace
}  // namespace ringkv::kernels
