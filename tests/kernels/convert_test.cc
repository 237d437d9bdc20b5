// KernelTable::convert on every tier that runs here, against the scalar
// single-value conversions of dtype.h (themselves checked against a float64
// reference in the dtype tests): exhaustive over the 65536 f16 and bf16 bit
// patterns, a large random sample of f32 bit patterns plus the edge cases, and
// every length 0..70 at unaligned offsets for the tails.
#include <gtest/gtest.h>

#include <bit>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
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

constexpr std::uint32_t kCanary32 = 0xA5A5A5A5u;
constexpr std::uint16_t kCanary16 = 0xA5A5u;
constexpr std::uint32_t kF32Quiet = 0x00400000u;  // the quiet bit of an f32 NaN

bool IsF16Nan(std::uint16_t h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0; }
bool IsBF16Nan(std::uint16_t h) { return (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu) != 0; }

// A converted element as raw bits, and what the scalar conversions give for it.
std::uint32_t ScalarConvert(DType from, std::uint32_t bits, DType to) {
  if (from == to) return bits;
  float value = 0.0f;
  switch (from) {
    case DType::kF32:
      value = std::bit_cast<float>(bits);
      break;
    case DType::kF16:
      value = F16ToF32(static_cast<std::uint16_t>(bits));
      break;
    case DType::kBF16:
      value = BF16ToF32(static_cast<std::uint16_t>(bits));
      break;
    case DType::kI8:
    case DType::kI4:
    case DType::kI4H:
      break;  // element types only: quantization has its own tests
  }
  switch (to) {
    case DType::kF32:
      return std::bit_cast<std::uint32_t>(value);
    case DType::kF16:
      return F32ToF16(value);
    case DType::kBF16:
      return F32ToBF16(value);
    case DType::kI8:
    case DType::kI4:
    case DType::kI4H:
      break;
  }
  return 0;
}

// A buffer of n elements of `dtype` with `offset` leading elements (so the
// data pointer is not vector-aligned) and canaries around the data.
struct Buffer {
  Buffer(DType dtype, std::size_t n, std::size_t offset)
      : dtype_(dtype),
        offset_(offset),
        words_(n + offset + 8, kCanary32),
        halves_(n + offset + 8, kCanary16) {}
  void* Data() {
    return dtype_ == DType::kF32 ? static_cast<void*>(words_.data() + offset_)
                                 : static_cast<void*>(halves_.data() + offset_);
  }
  std::uint32_t Get(std::size_t i) const {
    return dtype_ == DType::kF32 ? words_[offset_ + i] : halves_[offset_ + i];
  }
  void Set(std::size_t i, std::uint32_t bits) {
    if (dtype_ == DType::kF32) {
      words_[offset_ + i] = bits;
    } else {
      halves_[offset_ + i] = static_cast<std::uint16_t>(bits);
    }
  }
  // Whether every element outside [offset, offset + n) still holds the canary.
  bool CanariesIntact(std::size_t n) const {
    for (std::size_t i = 0; i < words_.size(); ++i) {
      if (i >= offset_ && i < offset_ + n) continue;
      const bool intact = dtype_ == DType::kF32 ? words_[i] == kCanary32 : halves_[i] == kCanary16;
      if (!intact) return false;
    }
    return true;
  }

  DType dtype_;
  std::size_t offset_;
  std::vector<std::uint32_t> words_;   // [offset + n + 8], used when dtype is f32
  std::vector<std::uint16_t> halves_;  // [offset + n + 8], used when dtype is f16/bf16
};

class ConvertTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    table_ = KernelsFor(GetParam());
    ASSERT_NE(table_, nullptr);
    ASSERT_NE(table_->convert, nullptr);
  }
  const KernelTable* table_ = nullptr;
};

std::vector<std::uint16_t> AllHalfPatterns() {
  std::vector<std::uint16_t> bits(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) bits[i] = static_cast<std::uint16_t>(i);
  return bits;
}

TEST_P(ConvertTest, EveryF16PatternToF32AndBack) {
  const std::vector<std::uint16_t> src = AllHalfPatterns();
  std::vector<float> wide(src.size());
  std::vector<std::uint16_t> back(src.size());
  table_->convert(DType::kF16, src.data(), DType::kF32, wide.data(), src.size());
  table_->convert(DType::kF32, wide.data(), DType::kF16, back.data(), wide.size());
  int failures = 0;
  for (std::size_t i = 0; i < src.size() && failures < 10; ++i) {
    const float want = F16ToF32(src[i]);
    const auto got_bits = std::bit_cast<std::uint32_t>(wide[i]);
    if (IsF16Nan(src[i])) {
      // NaN stays NaN with its sign and payload; F16C may also set the quiet bit.
      EXPECT_TRUE(std::isnan(wide[i])) << "f16 0x" << std::hex << src[i];
      EXPECT_EQ(got_bits | kF32Quiet, std::bit_cast<std::uint32_t>(want) | kF32Quiet)
          << "f16 0x" << std::hex << src[i];
    } else {
      EXPECT_EQ(got_bits, std::bit_cast<std::uint32_t>(want)) << "f16 0x" << std::hex << src[i];
    }
    // Back to f16: the identity except that a NaN comes back quiet.
    const std::uint16_t want_back = IsF16Nan(src[i]) ? (src[i] | 0x200u) : src[i];
    EXPECT_EQ(back[i], want_back) << "f16 0x" << std::hex << src[i];
    EXPECT_EQ(back[i], F32ToF16(wide[i])) << "f16 0x" << std::hex << src[i];
    failures += ::testing::Test::HasFailure() ? 1 : 0;
  }
}

TEST_P(ConvertTest, EveryBF16PatternToF32AndBack) {
  const std::vector<std::uint16_t> src = AllHalfPatterns();
  std::vector<float> wide(src.size());
  std::vector<std::uint16_t> back(src.size());
  table_->convert(DType::kBF16, src.data(), DType::kF32, wide.data(), src.size());
  table_->convert(DType::kF32, wide.data(), DType::kBF16, back.data(), wide.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(wide[i]),
              std::bit_cast<std::uint32_t>(BF16ToF32(src[i])))
        << "bf16 0x" << std::hex << src[i];
    // bf16 -> f32 is exact, so the way back is the identity, NaNs made quiet.
    const std::uint16_t want_back = IsBF16Nan(src[i]) ? (src[i] | 0x40u) : src[i];
    ASSERT_EQ(back[i], want_back) << "bf16 0x" << std::hex << src[i];
    ASSERT_EQ(back[i], F32ToBF16(wide[i])) << "bf16 0x" << std::hex << src[i];
  }
}

TEST_P(ConvertTest, EveryHalfPatternBetweenF16AndBF16) {
  const std::vector<std::uint16_t> src = AllHalfPatterns();
  std::vector<std::uint16_t> out(src.size());
  for (const auto& [from, to] :
       {std::pair{DType::kF16, DType::kBF16}, std::pair{DType::kBF16, DType::kF16}}) {
    table_->convert(from, src.data(), to, out.data(), src.size());
    for (std::size_t i = 0; i < src.size(); ++i) {
      ASSERT_EQ(out[i], ScalarConvert(from, src[i], to)) << "0x" << std::hex << src[i];
    }
  }
}

// f32 bit patterns: uniform over all 2^32 (mostly huge, tiny or NaN), uniform
// over the f16 range's exponents, and hand-picked edges.
std::vector<std::uint32_t> F32Sample() {
  std::vector<std::uint32_t> bits = {
      0x00000000u, 0x80000000u,                            // +-0
      0x7F800000u, 0xFF800000u,                            // +-Inf
      0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFBFFFFFu,  // quiet and signalling NaNs
      0x7FFFFFFFu, 0x7F802000u, 0x7FA00000u,               // NaN payloads f16 keeps or drops
      0x00000001u, 0x807FFFFFu,                            // f32 subnormals
      0x477FE000u,                                         // 65504, f16 max
      0x477FEFFFu, 0x477FF000u, 0x477FF001u,               // just below/at/above the Inf tie
      0x47800000u, 0x7F7FFFFFu,                            // 65536, f32 max
      0x38800000u, 0x387FFFFFu, 0x387FF000u,               // 2^-14 and just below
      0x33800000u, 0x33000000u, 0x33000001u, 0x32FFFFFFu,  // 2^-24, its half-ulp tie, around
      0x33C00000u, 0x34200000u, 0x34300000u,               // 1.5, 2.5, 2.75 x 2^-24 (even ties)
      0x3F801000u, 0x3F803000u, 0x3F801001u,               // f16 ties to even at 1.0
      0x3F808000u, 0x3F818000u, 0x3F808001u,               // bf16 ties to even at 1.0
      0x7F7F8000u, 0x7F7FFFFFu,                            // bf16 overflow on rounding
  };
  std::mt19937 rng(20240611u);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  for (int i = 0; i < 100000; ++i) bits.push_back(any_bits(rng));
  std::uniform_int_distribution<std::uint32_t> exponent(100, 145);  // 2^-27 .. 2^18
  for (int i = 0; i < 100000; ++i) {
    bits.push_back((any_bits(rng) & 0x807FFFFFu) | (exponent(rng) << 23));
  }
  return bits;
}

TEST_P(ConvertTest, F32SampleToF16AndBF16) {
  const std::vector<std::uint32_t> src = F32Sample();
  std::vector<std::uint16_t> out(src.size());
  for (DType to : {DType::kF16, DType::kBF16}) {
    table_->convert(DType::kF32, src.data(), to, out.data(), src.size());
    for (std::size_t i = 0; i < src.size(); ++i) {
      ASSERT_EQ(out[i], ScalarConvert(DType::kF32, src[i], to))
          << "f32 0x" << std::hex << src[i] << " to " << (to == DType::kF16 ? "f16" : "bf16");
    }
  }
}

// Every pair, including same-type copies, at every length 0..70 (vector body,
// partial batches and scalar tails) and misaligned source and destination.
TEST_P(ConvertTest, EveryPairEveryLengthUnaligned) {
  const std::vector<std::uint32_t> sample = F32Sample();
  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  std::size_t next = 0;
  for (DType from : dtypes) {
    for (DType to : dtypes) {
      for (std::size_t n = 0; n <= 70; ++n) {
        const std::size_t src_offset = n % 4;
        const std::size_t dst_offset = (n / 4) % 3;
        Buffer src(from, n, src_offset);
        Buffer dst(to, n, dst_offset);
        for (std::size_t i = 0; i < n; ++i) {
          const std::uint32_t bits = sample[next++ % sample.size()];
          // Half sources take patterns from both halves of the sample word.
          src.Set(i, from == DType::kF32 ? bits : (i % 2 == 0 ? bits & 0xFFFFu : bits >> 16));
        }
        table_->convert(from, src.Data(), to, dst.Data(), n);
        for (std::size_t i = 0; i < n; ++i) {
          if (from == DType::kF16 && to == DType::kF32 &&
              IsF16Nan(static_cast<std::uint16_t>(src.Get(i)))) {
            // A tier may quieten the NaN (F16C does); sign and payload stay.
            ASSERT_EQ(dst.Get(i) | kF32Quiet, ScalarConvert(from, src.Get(i), to) | kF32Quiet);
            continue;
          }
          ASSERT_EQ(dst.Get(i), ScalarConvert(from, src.Get(i), to))
              << "element " << i << " of " << n << ", 0x" << std::hex << src.Get(i);
        }
        ASSERT_TRUE(dst.CanariesIntact(n)) << "wrote outside [0, " << n << ")";
        ASSERT_TRUE(src.CanariesIntact(n));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, ConvertTest, ::testing::ValuesIn(AvailableIsas()), TierName);

}  // namespace
}  // namespace ringkv::kernels
