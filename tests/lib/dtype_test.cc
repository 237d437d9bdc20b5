// f16 and bf16 conversions: exhaustive over every bit pattern, against an
// expectation computed from the bit fields in double.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "lib_test_util.h"
#include "ringkv/kernels/kernel_table.h"

namespace ringkv {
namespace {

constexpr int kPatterns = 1 << 16;

// The value of a binary16 pattern: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
double ExpectedF16(std::uint16_t bits) {
  const double sign = (bits & 0x8000u) != 0 ? -1.0 : 1.0;
  const int exponent = (bits >> 10) & 0x1F;
  const int mantissa = bits & 0x3FF;
  if (exponent == 0x1F) {
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// The value of a bfloat16 pattern: 1 sign, 8 exponent (bias 127), 7 mantissa bits.
double ExpectedBF16(std::uint16_t bits) {
  const double sign = (bits & 0x8000u) != 0 ? -1.0 : 1.0;
  const int exponent = (bits >> 7) & 0xFF;
  const int mantissa = bits & 0x7F;
  if (exponent == 0xFF) {
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -133);
  return sign * std::ldexp(128 + mantissa, exponent - 134);
}

bool IsNanF16(std::uint16_t bits) { return (bits & 0x7C00u) == 0x7C00u && (bits & 0x3FFu) != 0; }
bool IsNanBF16(std::uint16_t bits) { return (bits & 0x7F80u) == 0x7F80u && (bits & 0x7Fu) != 0; }

using ToF32 = float (*)(std::uint16_t) noexcept;
using FromF32 = std::uint16_t (*)(float) noexcept;

// Every pattern decodes to the value its bit fields give and encodes back to itself.
void CheckAllPatterns(ToF32 to_f32, FromF32 from_f32, double (*expected)(std::uint16_t),
                      bool (*is_nan)(std::uint16_t)) {
  int failures = 0;
  for (int i = 0; i < kPatterns && failures < 10; ++i) {
    const auto bits = static_cast<std::uint16_t>(i);
    const float value = to_f32(bits);
    const bool negative = (bits & 0x8000u) != 0;
    if (is_nan(bits)) {
      const std::uint16_t back = from_f32(value);
      const bool ok = std::isnan(value) && std::signbit(value) == negative && is_nan(back) &&
                      ((back & 0x8000u) != 0) == negative;
      if (!ok) {
        ADD_FAILURE() << "NaN pattern 0x" << std::hex << i << " -> " << value << " -> 0x" << back;
        ++failures;
      }
      continue;
    }
    const double want = expected(bits);
    // float(want) is exact: every f16 and bf16 value is an f32 value.
    const bool value_ok = static_cast<double>(value) == want && std::signbit(value) == negative;
    const std::uint16_t back = from_f32(value);
    if (!value_ok || back != bits) {
      ADD_FAILURE() << "pattern 0x" << std::hex << i << std::dec << ": got " << value
                    << ", expected " << want << ", round trip 0x" << std::hex << back;
      ++failures;
    }
  }
}

TEST(DTypeTest, Names) {
  EXPECT_EQ(DTypeName(DType::kF32), "f32");
  EXPECT_EQ(DTypeName(DType::kF16), "f16");
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_EQ(SizeOf(DType::kF32), 4u);
  EXPECT_EQ(SizeOf(DType::kF16), 2u);
  EXPECT_EQ(SizeOf(DType::kBF16), 2u);
}

TEST(DTypeTest, F16AllPatternsDecodeAndRoundTrip) {
  CheckAllPatterns(F16ToF32, F32ToF16, ExpectedF16, IsNanF16);
}

TEST(DTypeTest, BF16AllPatternsDecodeAndRoundTrip) {
  CheckAllPatterns(BF16ToF32, F32ToBF16, ExpectedBF16, IsNanBF16);
}

// For adjacent finite patterns lo and lo + 1 (same sign), the exact midpoint must
// round to the one with an even mantissa, and its f32 neighbours to the nearer one.
void CheckMidpoints(ToF32 to_f32, FromF32 from_f32, std::uint16_t last_finite, int step) {
  int failures = 0;
  for (const std::uint16_t sign : {std::uint16_t{0}, std::uint16_t{0x8000}}) {
    for (int k = 0; k < last_finite && failures < 10; k += step) {
      const auto lo = static_cast<std::uint16_t>(sign | k);
      const auto hi = static_cast<std::uint16_t>(sign | (k + 1));
      const double mid = (static_cast<double>(to_f32(lo)) + static_cast<double>(to_f32(hi))) / 2.0;
      const auto mid_f32 = static_cast<float>(mid);
      ASSERT_EQ(static_cast<double>(mid_f32), mid) << "midpoint not exact in f32";
      const std::uint16_t even = (lo & 1u) == 0 ? lo : hi;
      const float toward_lo = std::nextafter(mid_f32, 0.0f);
      const float toward_hi =
          std::nextafter(mid_f32, sign != 0 ? -std::numeric_limits<float>::infinity()
                                            : std::numeric_limits<float>::infinity());
      const std::uint16_t got_mid = from_f32(mid_f32);
      const std::uint16_t got_lo = from_f32(toward_lo);
      const std::uint16_t got_hi = from_f32(toward_hi);
      if (got_mid != even || got_lo != lo || got_hi != hi) {
        ADD_FAILURE() << std::hex << "pair 0x" << lo << "/0x" << hi << ": midpoint -> 0x" << got_mid
                      << " (want 0x" << even << "), below -> 0x" << got_lo << ", above -> 0x"
                      << got_hi;
        ++failures;
      }
    }
  }
}

TEST(DTypeTest, F32ToF16RoundsMidpointsToEvenForEveryAdjacentPair) {
  // 0x7BFF is the largest finite half; pairs run over subnormals and normals.
  CheckMidpoints(F16ToF32, F32ToF16, 0x7BFF, 1);
}

TEST(DTypeTest, F32ToBF16RoundsMidpointsToEven) {
  // Every pair: a few hundred thousand conversions, well under a second.
  CheckMidpoints(BF16ToF32, F32ToBF16, 0x7F7F, 1);
}

TEST(DTypeTest, F16OverflowThreshold) {
  // 65504 is the largest half; 65520 is the midpoint to the next (virtual) 65536,
  // and a tie rounds to the even pattern 0x7C00 = Inf.
  EXPECT_EQ(F32ToF16(65504.0f), 0x7BFFu);
  EXPECT_EQ(F32ToF16(std::nextafter(65520.0f, 0.0f)), 0x7BFFu);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7C00u);
  EXPECT_EQ(F32ToF16(-65520.0f), 0xFC00u);
  EXPECT_EQ(F32ToF16(1.0e9f), 0x7C00u);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::max()), 0x7C00u);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::infinity()), 0x7C00u);
  EXPECT_EQ(F32ToF16(-std::numeric_limits<float>::infinity()), 0xFC00u);
}

TEST(DTypeTest, BF16OverflowThreshold) {
  const float largest = BF16ToF32(0x7F7F);  // (2 - 2^-7) * 2^127
  EXPECT_EQ(static_cast<double>(largest), std::ldexp(255.0, 120));
  // Midpoint to 2^128 is (2 - 2^-8) * 2^127, exact in f32; a tie goes to 0x7F80 = Inf.
  const auto mid = static_cast<float>(std::ldexp(511.0, 119));
  EXPECT_EQ(F32ToBF16(std::nextafter(mid, 0.0f)), 0x7F7Fu);
  EXPECT_EQ(F32ToBF16(mid), 0x7F80u);
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::max()), 0x7F80u);
  EXPECT_EQ(F32ToBF16(-std::numeric_limits<float>::infinity()), 0xFF80u);
}

TEST(DTypeTest, F16Subnormals) {
  const auto smallest = static_cast<float>(std::ldexp(1.0, -24));
  EXPECT_EQ(F32ToF16(smallest), 0x0001u);
  EXPECT_EQ(F32ToF16(-smallest), 0x8001u);
  // Half the smallest subnormal ties to even (zero); just above it rounds up.
  const auto half_smallest = static_cast<float>(std::ldexp(1.0, -25));
  EXPECT_EQ(F32ToF16(half_smallest), 0x0000u);
  EXPECT_EQ(F32ToF16(std::nextafter(half_smallest, 1.0f)), 0x0001u);
  // Far below the range: signed zero.
  EXPECT_EQ(F32ToF16(static_cast<float>(std::ldexp(1.0, -40))), 0x0000u);
  EXPECT_EQ(F32ToF16(static_cast<float>(std::ldexp(-1.0, -40))), 0x8000u);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::denorm_min()), 0x0000u);
  // Largest subnormal and smallest normal.
  EXPECT_EQ(F32ToF16(static_cast<float>(std::ldexp(1023.0, -24))), 0x03FFu);
  EXPECT_EQ(F32ToF16(static_cast<float>(std::ldexp(1.0, -14))), 0x0400u);
  // An f32 subnormal survives bf16, which has f32's exponent range.
  EXPECT_EQ(F32ToBF16(static_cast<float>(std::ldexp(1.0, -133))), 0x0001u);
}

// The bulk path that Tensor::AsType and FromVector use must agree with the
// scalar functions bit for bit (NaNs: both NaN with the same sign).
bool SameF32(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) {
    return std::isnan(a) && std::isnan(b) && std::signbit(a) == std::signbit(b);
  }
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

void CheckBulkDecode(DType dtype, ToF32 scalar) {
  std::vector<std::uint16_t> bits(kPatterns);
  for (int i = 0; i < kPatterns; ++i)
    bits[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(i);
  std::vector<float> out(kPatterns);
  kernels::BestKernels().convert(dtype, bits.data(), DType::kF32, out.data(), bits.size());
  int failures = 0;
  for (std::size_t i = 0; i < bits.size() && failures < 10; ++i) {
    if (!SameF32(out[i], scalar(bits[i]))) {
      ADD_FAILURE() << DTypeName(dtype) << " pattern 0x" << std::hex << i << ": bulk " << out[i];
      ++failures;
    }
  }
}

// Every half value, every midpoint and its neighbours, specials, and a spread
// of arbitrary f32 bit patterns.
std::vector<float> NarrowingInputs(ToF32 to_f32) {
  std::vector<float> inputs;
  for (int i = 0; i < kPatterns; ++i) {
    const float value = to_f32(static_cast<std::uint16_t>(i));
    inputs.push_back(value);
    if (std::isfinite(value)) {
      inputs.push_back(std::nextafter(value, 0.0f));
      inputs.push_back(std::nextafter(value, std::numeric_limits<float>::infinity()));
    }
  }
  std::uint32_t state = 0x9E3779B9u;
  for (int i = 0; i < kPatterns; ++i) {
    state = state * 1664525u + 1013904223u;  // LCG: fixed, reproducible spread
    inputs.push_back(std::bit_cast<float>(state));
  }
  return inputs;
}

void CheckBulkEncode(DType dtype, ToF32 to_f32, FromF32 scalar) {
  const std::vector<float> inputs = NarrowingInputs(to_f32);
  std::vector<std::uint16_t> out(inputs.size());
  kernels::BestKernels().convert(DType::kF32, inputs.data(), dtype, out.data(), inputs.size());
  int failures = 0;
  for (std::size_t i = 0; i < inputs.size() && failures < 10; ++i) {
    const std::uint16_t want = scalar(inputs[i]);
    const bool ok = std::isnan(inputs[i]) ? SameF32(to_f32(out[i]), to_f32(want)) : out[i] == want;
    if (!ok) {
      ADD_FAILURE() << DTypeName(dtype) << " input " << inputs[i] << ": bulk 0x" << std::hex
                    << out[i] << ", scalar 0x" << want;
      ++failures;
    }
  }
}

TEST(DTypeTest, BulkConvertMatchesScalarF16) {
  CheckBulkDecode(DType::kF16, F16ToF32);
  CheckBulkEncode(DType::kF16, F16ToF32, F32ToF16);
}

TEST(DTypeTest, BulkConvertMatchesScalarBF16) {
  CheckBulkDecode(DType::kBF16, BF16ToF32);
  CheckBulkEncode(DType::kBF16, BF16ToF32, F32ToBF16);
}

// The tensor path end to end: AsType over a tensor holding every f16 pattern.
TEST(DTypeTest, AsTypeDecodesEveryF16Pattern) {
  Tensor halves = Tensor::Zeros(DType::kF16, {kPatterns});
  auto* bits = static_cast<std::uint16_t*>(halves.MutableData());
  for (int i = 0; i < kPatterns; ++i) bits[i] = static_cast<std::uint16_t>(i);
  const std::vector<float> values = halves.ToVector();
  ASSERT_EQ(values.size(), static_cast<std::size_t>(kPatterns));
  int failures = 0;
  for (int i = 0; i < kPatterns && failures < 10; ++i) {
    const auto pattern = static_cast<std::uint16_t>(i);
    const double want = ExpectedF16(pattern);
    const float got = values[static_cast<std::size_t>(i)];
    const bool ok = IsNanF16(pattern) ? std::isnan(got) : static_cast<double>(got) == want;
    if (!ok) {
      ADD_FAILURE() << "pattern 0x" << std::hex << i << ": " << got;
      ++failures;
    }
  }
}

}  // namespace
}  // namespace ringkv
