// Bad input to the allocating tensor factories: shapes whose byte count wraps
// or cannot be allocated, and DType values outside the enum. Each must be a
// ringkv::Error naming the values, never a tiny allocation, an abort or a
// std::bad_alloc, and leave the source tensor as it was.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lib_test_util.h"

namespace ringkv {
namespace {

using test::ExpectThrowWith;
using test::Iota;
using test::TensorState;

constexpr std::int64_t kTwoTo62 = std::int64_t{1} << 62;
const DType kBadDType = static_cast<DType>(7);

TEST(TensorLimitsTest, AByteCountThatWrapsSizeTIsAnError) {
  // 2^62 + 1 f32 elements: 2^64 + 4 bytes, which wraps to 4 in size_t.
  const Shape shape{kTwoTo62 + 1};
  ExpectThrowWith<Error>([&] { (void)Tensor::Zeros(DType::kF32, shape); },
                         {"[Tensor::Zeros] shape [4611686018427387905] of f32",
                          "4611686018427387905 elements of 4 bytes"});
  ExpectThrowWith<Error>([&] { (void)Tensor::Uninitialized(DType::kF32, shape); },
                         {"[Tensor::Uninitialized] shape [4611686018427387905] of f32"});
  // 2^62 * 4 bytes is exactly 2^64: wraps to 0.
  ExpectThrowWith<Error>(
      [] {
        (void)Tensor::Zeros(DType::kF32, {2, kTwoTo62 / 2});
      },
      {"[Tensor::Zeros] shape [2, 2305843009213693952] of f32"});
}

TEST(TensorLimitsTest, AByteCountAbovePtrdiffMaxIsAnError) {
  // 2^62 + 1 f16 elements: 2^63 + 2 bytes fit size_t, but no object can be that
  // large (pointer differences would overflow).
  ExpectThrowWith<Error>(
      [] { (void)Tensor::Zeros(DType::kF16, {kTwoTo62 + 1}); },
      {"[Tensor::Zeros] shape [4611686018427387905] of f16", "9223372036854775810 bytes"});
}

TEST(TensorLimitsTest, AnAllocationThatFailsIsAnErrorNamingShapeAndBytes) {
  // 4 PiB: more than any machine here has, and beyond a 47-bit address space.
  const std::int64_t elements = std::int64_t{1} << 50;
  ExpectThrowWith<Error>(
      [&] {
        (void)Tensor::Zeros(DType::kF32, {4, elements / 4});
      },
      {"[Tensor::Zeros] shape [4, 281474976710656] of f32",
       "cannot allocate 4503599627370496 bytes"});
  ExpectThrowWith<Error>([&] { (void)Tensor::Uninitialized(DType::kBF16, {elements}); },
                         {"[Tensor::Uninitialized]", "cannot allocate 2251799813685248 bytes"});
}

TEST(TensorLimitsTest, StorageThatCannotBeAllocatedIsAnError) {
  ExpectThrowWith<Error>([] { const Storage storage(std::size_t{1} << 52); },
                         {"[Storage] cannot allocate 4503599627370496 bytes"});
}

TEST(TensorLimitsTest, ADTypeOutsideTheEnumIsAnError) {
  ExpectThrowWith<Error>(
      [] {
        (void)Tensor::Zeros(kBadDType, {2, 3});
      },
      {"[Tensor::Zeros] dtype 7 is not one of f32, f16, bf16"});
  ExpectThrowWith<Error>([] { (void)Tensor::Uninitialized(kBadDType, {2}); },
                         {"[Tensor::Uninitialized] dtype 7"});
  const std::vector<float> values = Iota(6);
  ExpectThrowWith<Error>(
      [&] {
        (void)Tensor::FromVector(values, {2, 3}, kBadDType);
      },
      {"[Tensor::FromVector] dtype 7"});
  ExpectThrowWith<Error>([] { (void)Tensor::Zeros(static_cast<DType>(255), {}); }, {"dtype 255"});
}

TEST(TensorLimitsTest, AsTypeToABadDTypeIsAnErrorAndChangesNothing) {
  const Tensor t = Tensor::FromVector(Iota(12), {3, 4}).Slice(1, 1, 3);
  const TensorState before(t);
  ExpectThrowWith<Error>([&] { (void)t.AsType(kBadDType); }, {"[Tensor::AsType] dtype 7"});
  EXPECT_EQ(TensorState(t), before);
  // The empty tensor has nothing to convert, but the dtype is still checked.
  ExpectThrowWith<Error>([] { (void)Tensor().AsType(kBadDType); }, {"[Tensor::AsType] dtype 7"});
}

TEST(TensorLimitsTest, EveryDTypeOfTheEnumIsKnown) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_TRUE(IsKnownDType(dtype)) << DTypeName(dtype);
    EXPECT_EQ(Tensor::Zeros(dtype, {3}).Dtype(), dtype);
  }
  EXPECT_FALSE(IsKnownDType(kBadDType));
}

}  // namespace
}  // namespace ringkv
