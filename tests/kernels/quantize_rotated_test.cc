// KernelTable::convert_rows with kI4H rows (dtype.h) on every tier that runs
// here, against the float64 rotation by its definition (support/hadamard_reference.h):
// the stored data is the int4 quantization of the rotated row, dequantizing rotates
// back, the rotation block follows the row length, non-finite values poison only
// their block, an outlier channel costs less than in plain kI4, and every tier
// writes and reads the scalar tier's bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ringkv/kernels/dtype.h"
#include "ringkv/kernels/isa.h"
#include "ringkv/kernels/kernel_table.h"
#include "support/hadamard_reference.h"
#include "tier_name.h"

namespace ringkv::kernels {
namespace {

using test::ReferenceRotate;
using test::TierName;

constexpr auto kGroup = static_cast<std::size_t>(kI4Group);

float ScaleOfGroup(const std::vector<std::uint8_t>& row, std::size_t n, std::size_t g) {
  float s;
  std::memcpy(&s, row.data() + n / 2 + 4 * g, sizeof s);
  return s;
}

// The stored value i (of the rotated row) as the float64 s_g * q_i.
double Stored(const std::vector<std::uint8_t>& row, std::size_t n, std::size_t i) {
  const int nibble = i % 2 == 0 ? row[i / 2] & 0xF : row[i / 2] >> 4;
  return static_cast<double>(ScaleOfGroup(row, n, i / kGroup)) *
         (nibble >= 8 ? nibble - 16 : nibble);
}

std::vector<float> Normal(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<double> Widened(const std::vector<float>& x) { return {x.begin(), x.end()}; }

class QuantizeRotatedTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    table_ = KernelsFor(GetParam());
    ASSERT_NE(table_, nullptr);
  }

  std::vector<std::uint8_t> Quantize(const std::vector<float>& x, DType to = DType::kI4H) const {
    std::vector<std::uint8_t> out(RowBytes(to, static_cast<std::int64_t>(x.size())), 0xA5);
    table_->convert_rows(DType::kF32, x.data(), 0, to, out.data(), 0, 1, x.size());
    return out;
  }

  std::vector<float> Dequantize(const std::vector<std::uint8_t>& row, std::size_t n,
                                DType from = DType::kI4H) const {
    std::vector<float> out(n);
    table_->convert_rows(from, row.data(), 0, DType::kF32, out.data(), 0, 1, n);
    return out;
  }

  const KernelTable* table_ = nullptr;
};

TEST(I4HBlock, LargestPowerOfTwoDividingTheRowUpTo256) {
  EXPECT_EQ(I4HBlock(32), 32);
  EXPECT_EQ(I4HBlock(64), 64);
  EXPECT_EQ(I4HBlock(96), 32);
  EXPECT_EQ(I4HBlock(128), 128);
  EXPECT_EQ(I4HBlock(192), 64);
  EXPECT_EQ(I4HBlock(256), 256);
  EXPECT_EQ(I4HBlock(512), 256);
  EXPECT_EQ(RowBytes(DType::kI4H, 128), RowBytes(DType::kI4, 128));
}

// Each group of the rotated row (float64) is quantized symmetrically to [-7, 7]:
// s = max|y| / 7 and |y_i - s q_i| <= s / 2, up to the f32 butterflies' rounding
// of y (log2(b) additions and one multiply; s measured within 1.1e-7 of
// max|y| / 7, relative).
TEST_P(QuantizeRotatedTest, StoresTheInt4RowOfTheRotatedRow) {
  for (const std::size_t n : {32u, 64u, 96u, 128u, 192u, 512u}) {
    const std::vector<float> x = Normal(n, static_cast<std::uint32_t>(n));
    const std::vector<std::uint8_t> row = Quantize(x);
    const std::vector<double> y = ReferenceRotate(Widened(x));
    for (std::size_t g = 0; g < n / kGroup; ++g) {
      double amax = 0.0;
      for (std::size_t i = g * kGroup; i < (g + 1) * kGroup; ++i)
        amax = std::max(amax, std::abs(y[i]));
      const double s = ScaleOfGroup(row, n, g);
      EXPECT_NEAR(s, amax / 7.0, amax / 7.0 * 1e-6) << "n " << n << " group " << g;
      for (std::size_t i = g * kGroup; i < (g + 1) * kGroup; ++i) {
        EXPECT_LE(std::abs(y[i] - Stored(row, n, i)), s * (0.5 + 1e-6))
            << "n " << n << " value " << i;
      }
    }
  }
}

// Dequantizing gives the stored values rotated back (float64 reference), to f32
// rounding of the butterflies (measured: at most 8.6e-8 of the largest stored value).
TEST_P(QuantizeRotatedTest, DequantizeRotatesBack) {
  for (const std::size_t n : {32u, 96u, 128u, 512u}) {
    const std::vector<float> x = Normal(n, static_cast<std::uint32_t>(7 * n));
    const std::vector<std::uint8_t> row = Quantize(x);
    std::vector<double> stored(n);
    for (std::size_t i = 0; i < n; ++i) stored[i] = Stored(row, n, i);
    const std::vector<double> want = ReferenceRotate(stored);
    const std::vector<float> got = Dequantize(row, n);
    double amax = 0.0;
    for (const double v : stored) amax = std::max(amax, std::abs(v));
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(got[i], want[i], amax * 2e-7) << "n " << n << " value " << i;
    }
  }
}

// One channel 40x the others (the outlier channels of real keys): in kI4 it sets
// its group's scale and the group's other values round to 0 or one coarse step;
// rotated, it is spread over the block. RMS error ratio measured: 0.46.
TEST_P(QuantizeRotatedTest, AnOutlierChannelCostsLessThanInPlainInt4) {
  const std::size_t n = 128;
  double plain = 0.0, rotated = 0.0;
  for (std::uint32_t r = 0; r < 16; ++r) {
    std::vector<float> x = Normal(n, 100 + r);
    x[5] = 40.0f;
    const std::vector<float> back4 = Dequantize(Quantize(x, DType::kI4), n, DType::kI4);
    const std::vector<float> back4h = Dequantize(Quantize(x), n);
    for (std::size_t i = 0; i < n; ++i) {
      plain += std::pow(static_cast<double>(back4[i] - x[i]), 2);
      rotated += std::pow(static_cast<double>(back4h[i] - x[i]), 2);
    }
  }
  EXPECT_LT(std::sqrt(rotated / plain), 0.55);
}

// NaN or Inf in one block makes every group of that block's scale NaN (the
// rotation spreads it), so the whole block reads back NaN; other blocks do not.
TEST_P(QuantizeRotatedTest, NonFiniteValuesPoisonTheirBlockOnly) {
  const std::size_t n = 96;  // three blocks of 32
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> x = Normal(n, 5);
    x[40] = bad;
    const std::vector<std::uint8_t> row = Quantize(x);
    for (std::size_t g = 0; g < 3; ++g) EXPECT_EQ(std::isnan(ScaleOfGroup(row, n, g)), g == 1) << g;
    const std::vector<float> back = Dequantize(row, n);
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(std::isnan(back[i]), i / 32 == 1) << i;
  }
}

// f16 / bf16 sources and strided rows: each row equals the row quantized alone
// from f32 (f16 / bf16 values widen exactly), and dequantizing to f16 rounds the
// f32 result once.
TEST_P(QuantizeRotatedTest, HalfSourcesStridesAndHalfTargets) {
  const std::size_t n = 64, rows = 3;
  const auto row_bytes = static_cast<std::ptrdiff_t>(RowBytes(DType::kI4H, n) + 5);
  std::vector<float> x = Normal(n * rows, 9);
  std::vector<std::uint16_t> half(n * rows);
  for (std::size_t i = 0; i < x.size(); ++i) {
    half[i] = F32ToF16(x[i]);
    x[i] = F16ToF32(half[i]);
  }
  std::vector<std::uint8_t> out(static_cast<std::size_t>(row_bytes) * rows, 0xA5);
  table_->convert_rows(DType::kF16, half.data(), static_cast<std::ptrdiff_t>(n), DType::kI4H,
                       out.data(), row_bytes, rows, n);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::vector<float> alone_x(x.begin() + static_cast<std::ptrdiff_t>(r * n),
                                     x.begin() + static_cast<std::ptrdiff_t>((r + 1) * n));
    const std::vector<std::uint8_t> alone = Quantize(alone_x);
    const auto* got = out.data() + static_cast<std::ptrdiff_t>(r) * row_bytes;
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), got)) << "row " << r;
    for (std::size_t i = alone.size(); i < static_cast<std::size_t>(row_bytes); ++i) {
      EXPECT_EQ(got[i], 0xA5) << "gap after row " << r;
    }
    const std::vector<float> f32 = Dequantize(alone, n);
    std::vector<std::uint16_t> f16(n);
    table_->convert_rows(DType::kI4H, alone.data(), 0, DType::kF16, f16.data(), 0, 1, n);
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(f16[i], F32ToF16(f32[i])) << i;
  }
}

// Every tier writes the scalar tier's bytes and reads them back to the same
// floats: the butterflies are the same additions in the same order.
TEST_P(QuantizeRotatedTest, SameBytesAndValuesAsScalarTier) {
  const KernelTable* scalar = KernelsFor(Isa::kScalar);
  ASSERT_NE(scalar, nullptr);
  for (const std::size_t n : {32u, 64u, 96u, 128u, 256u, 512u}) {
    const std::vector<float> x = Normal(n, static_cast<std::uint32_t>(3 * n));
    std::vector<std::uint8_t> want(RowBytes(DType::kI4H, static_cast<std::int64_t>(n)));
    scalar->convert_rows(DType::kF32, x.data(), 0, DType::kI4H, want.data(), 0, 1, n);
    EXPECT_EQ(Quantize(x), want) << "n " << n;
    std::vector<float> back(n);
    scalar->convert_rows(DType::kI4H, want.data(), 0, DType::kF32, back.data(), 0, 1, n);
    const std::vector<float> got = Dequantize(want, n);
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(back[i]))
          << "n " << n << " value " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, QuantizeRotatedTest, ::testing::ValuesIn(AvailableIsas()),
                         TierName);

}  // namespace
}  // namespace ringkv::kernels
