// KernelTable::ring_gather on every tier that runs here: a hand-worked case,
// then many shapes against the index formula dst[s] = src[(s - ring_idx) mod k].
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "ringkv/kernels/isa.h"
#include "ringkv/kernels/kernel_table.h"
#include "tier_name.h"

namespace ringkv::kernels {
namespace {

using test::TierName;

class RingGatherTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    table_ = KernelsFor(GetParam());
    ASSERT_NE(table_, nullptr);
    ASSERT_NE(table_->ring_gather, nullptr);
  }
  const KernelTable* table_ = nullptr;
};

// k = 5, ring_idx = 2: logical column j sits in slot (2 + j) mod 5, so slots
// 0..4 hold logical [3, 4, 0, 1, 2].
TEST_P(RingGatherTest, HandWorkedFiveColumnsRingIndexTwo) {
  const std::int32_t src[2][5] = {{10, 11, 12, 13, 14}, {20, 21, 22, 23, 24}};
  std::int32_t dst[2][5] = {};
  table_->ring_gather(src, 5, dst, 5, 2, 5, 2, sizeof(std::int32_t));
  const std::int32_t want[2][5] = {{13, 14, 10, 11, 12}, {23, 24, 20, 21, 22}};
  for (int r = 0; r < 2; ++r) {
    for (int s = 0; s < 5; ++s) EXPECT_EQ(dst[r][s], want[r][s]) << "row " << r << " slot " << s;
  }
}

TEST_P(RingGatherTest, HandWorkedHalfAndByteElements) {
  const std::uint16_t src16[5] = {0x100, 0x101, 0x102, 0x103, 0x104};
  std::uint16_t dst16[5] = {};
  table_->ring_gather(src16, 5, dst16, 5, 1, 5, 2, sizeof(std::uint16_t));
  const std::uint16_t want16[5] = {0x103, 0x104, 0x100, 0x101, 0x102};
  for (int s = 0; s < 5; ++s) EXPECT_EQ(dst16[s], want16[s]) << "slot " << s;

  const std::uint8_t src8[5] = {'a', 'b', 'c', 'd', 'e'};
  std::uint8_t dst8[5] = {};
  table_->ring_gather(src8, 5, dst8, 5, 1, 5, 2, 1);
  EXPECT_EQ(std::string(dst8, dst8 + 5), "deabc");
}

// Fills rows x row_stride elements of elem_size bytes with distinct values.
std::vector<std::uint8_t> Pattern(std::size_t bytes, std::uint8_t seed) {
  std::vector<std::uint8_t> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    v[i] = static_cast<std::uint8_t>(seed + i * 131u + (i >> 8));
  return v;
}

// Runs one case and checks every destination element against the formula, and
// that the padding between destination rows is untouched.
void CheckCase(const KernelTable& table, std::size_t rows, std::size_t k, std::size_t ring_idx,
               std::size_t elem_size, std::size_t src_stride, std::size_t dst_stride,
               std::size_t dst_misalign) {
  const std::vector<std::uint8_t> src = Pattern(rows * src_stride * elem_size + 1, 7);
  std::vector<std::uint8_t> dst(rows * dst_stride * elem_size + dst_misalign + 1, 0xEE);
  // src + 1 element-misaligns nothing (elements are bytes) but shifts it off any vector boundary.
  table.ring_gather(src.data() + 1, static_cast<std::ptrdiff_t>(src_stride),
                    dst.data() + dst_misalign, static_cast<std::ptrdiff_t>(dst_stride), rows, k,
                    ring_idx, elem_size);
  const std::size_t r = ring_idx % k;
  for (std::size_t row = 0; row < rows; ++row) {
    for (std::size_t s = 0; s < dst_stride; ++s) {
      for (std::size_t b = 0; b < elem_size; ++b) {
        const std::size_t at = dst_misalign + (row * dst_stride + s) * elem_size + b;
        if (s < k) {
          const std::size_t logical = (s + k - r) % k;
          const std::uint8_t want = src[1 + (row * src_stride + logical) * elem_size + b];
          ASSERT_EQ(dst[at], want)
              << "rows " << rows << " k " << k << " ring_idx " << ring_idx << " elem " << elem_size
              << " strides " << src_stride << "/" << dst_stride << ": row " << row << " slot " << s;
        } else {
          ASSERT_EQ(dst[at], 0xEE) << "padding written: row " << row << " slot " << s;
        }
      }
    }
  }
  for (std::size_t i = 0; i < dst_misalign; ++i) ASSERT_EQ(dst[i], 0xEE);
  ASSERT_EQ(dst.back(), 0xEE);
}

TEST_P(RingGatherTest, MatchesIndexFormulaOverManyShapes) {
  for (std::size_t elem_size : {1u, 2u, 4u}) {
    for (std::size_t k : {1u, 2u, 3u, 5u, 7u, 8u, 15u, 16u, 17u, 31u, 33u, 64u, 100u, 257u}) {
      for (std::size_t ring_idx :
           {std::size_t{0}, std::size_t{1}, k / 2, k - 1, k, k + 3, 3 * k + 1}) {
        CheckCase(*table_, 3, k, ring_idx, elem_size, k, k, 0);          // packed rows
        CheckCase(*table_, 2, k, ring_idx, elem_size, k + 3, k + 5, 1);  // padded, misaligned dst
      }
    }
  }
}

TEST_P(RingGatherTest, WidthOneRowsPassThrough) {
  const std::uint16_t src[4] = {1, 2, 3, 4};
  std::uint16_t dst[4] = {};
  table_->ring_gather(src, 1, dst, 1, 4, 1, 0, 2);
  EXPECT_EQ(std::vector<std::uint16_t>(dst, dst + 4), (std::vector<std::uint16_t>{1, 2, 3, 4}));
  std::uint16_t dst2[4] = {};
  table_->ring_gather(src, 1, dst2, 1, 4, 1, 5, 2);  // any ring_idx is 0 mod 1
  EXPECT_EQ(std::vector<std::uint16_t>(dst2, dst2 + 4), (std::vector<std::uint16_t>{1, 2, 3, 4}));
}

TEST_P(RingGatherTest, RingIndexPastWidthWrapsModuloK) {
  const float src[6] = {0, 1, 2, 3, 4, 5};
  float a[6] = {};
  float b[6] = {};
  table_->ring_gather(src, 6, a, 6, 1, 6, 2, 4);
  table_->ring_gather(src, 6, b, 6, 1, 6, 14, 4);  // 14 mod 6 == 2
  const float want[6] = {4, 5, 0, 1, 2, 3};
  for (int s = 0; s < 6; ++s) {
    EXPECT_EQ(a[s], want[s]) << "slot " << s;
    EXPECT_EQ(b[s], want[s]) << "slot " << s;
  }
}

TEST_P(RingGatherTest, LongRowsOfHalves) {
  // A realistic cache row: 4096 f16 keys, to exercise the unrolled vector body.
  CheckCase(*table_, 2, 4096, 1234, 2, 4096, 4096, 0);
  CheckCase(*table_, 2, 4096, 4095, 4, 4100, 4096, 3);
}

INSTANTIATE_TEST_SUITE_P(Tiers, RingGatherTest, ::testing::ValuesIn(AvailableIsas()), TierName);

}  // namespace
}  // namespace ringkv::kernels
