#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "lib_test_util.h"

namespace ringkv {
namespace {

using test::ExpectThrowWith;
using test::Iota;
using test::TensorState;

std::uintptr_t Address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(TensorTest, EmptyTensor) {
  const Tensor t;
  EXPECT_TRUE(t.Empty());
  EXPECT_EQ(t.Rank(), 0);
  EXPECT_EQ(t.NumElements(), 0);
  EXPECT_EQ(t.NumBytes(), 0u);
  EXPECT_EQ(t.Data(), nullptr);
  EXPECT_TRUE(t.ToVector().empty());
  EXPECT_TRUE(t.Clone().Empty());
  EXPECT_TRUE(t.Contiguous().Empty());
  EXPECT_FALSE(t.SharesStorageWith(Tensor()));
}

TEST(TensorTest, ZerosIsAlignedZeroedAndContiguous) {
  const Tensor t = Tensor::Zeros(DType::kF16, {2, 3, 5, 7});
  EXPECT_FALSE(t.Empty());
  EXPECT_EQ(t.Dtype(), DType::kF16);
  EXPECT_EQ(t.GetShape(), (Shape{2, 3, 5, 7}));
  EXPECT_EQ(t.NumElements(), 210);
  EXPECT_EQ(t.NumBytes(), 420u);
  EXPECT_EQ(Address(t.Data()) % 64, 0u);
  EXPECT_EQ(t.Stride(0), 105);
  EXPECT_EQ(t.Stride(1), 35);
  EXPECT_EQ(t.Stride(2), 7);
  EXPECT_EQ(t.Stride(3), 1);
  EXPECT_EQ(t.Offset(), 0);
  EXPECT_TRUE(t.IsContiguous());
  for (float v : t.ToVector()) ASSERT_EQ(v, 0.0f);

  const Tensor scalar = Tensor::Zeros(DType::kF32, {});
  EXPECT_EQ(scalar.NumElements(), 1);
  EXPECT_EQ(scalar.ToVector(), std::vector<float>{0.0f});
}

TEST(TensorTest, FromVectorRoundTrip) {
  const std::vector<float> values = Iota(24, -5.0f);
  const Tensor t = Tensor::FromVector(values, {2, 3, 4});
  EXPECT_EQ(t.ToVector(), values);
  EXPECT_EQ(std::memcmp(t.Data(), values.data(), values.size() * sizeof(float)), 0);
}

TEST(TensorTest, FromVectorRoundsHalvesToNearestEven) {
  // 1 + 2^-11 is the midpoint of 1 and 1 + 2^-10 in f16: ties to 1. 1 + 3 * 2^-11
  // is the midpoint of 1 + 2^-10 and 1 + 2^-9: ties to the even 1 + 2^-9.
  const std::vector<float> values = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, -2.5f, 65520.0f};
  const Tensor h = Tensor::FromVector(values, {4}, DType::kF16);
  EXPECT_EQ(h.ToVector(), (std::vector<float>{1.0f, 1.0f + 0x1p-9f, -2.5f,
                                              std::numeric_limits<float>::infinity()}));
  const auto* bits = static_cast<const std::uint16_t*>(h.Data());
  EXPECT_EQ(bits[0], 0x3C00u);
  EXPECT_EQ(bits[3], 0x7C00u);
  // bf16 has 7 mantissa bits: 1 + 2^-8 ties to 1, 1 + 3 * 2^-8 ties to 1 + 2^-6.
  const std::vector<float> b = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f};
  EXPECT_EQ(Tensor::FromVector(b, {2}, DType::kBF16).ToVector(),
            (std::vector<float>{1.0f, 1.0f + 0x1p-6f}));
}

TEST(TensorTest, FromVectorSizeMismatchNamesValues) {
  const std::vector<float> values = Iota(5);
  ExpectThrowWith<ShapeError>(
      [&] {
        (void)Tensor::FromVector(values, {2, 3});
      },
      {"[Tensor::FromVector] values.size() 5 != 6 elements of shape [2, 3]"});
}

TEST(TensorTest, SliceIsAViewWithOffsetAndStrides) {
  const Tensor t = Tensor::FromVector(Iota(2 * 3 * 4), {2, 3, 4});
  const Tensor s = t.Slice(1, 1, 3);
  EXPECT_TRUE(s.SharesStorageWith(t));
  EXPECT_EQ(s.GetShape(), (Shape{2, 2, 4}));
  EXPECT_EQ(s.Stride(0), 12);
  EXPECT_EQ(s.Stride(1), 4);
  EXPECT_EQ(s.Stride(2), 1);
  EXPECT_EQ(s.Offset(), 4);
  EXPECT_EQ(static_cast<const float*>(s.Data()), static_cast<const float*>(t.Data()) + 4);
  EXPECT_FALSE(s.IsContiguous());
  EXPECT_EQ(s.ToVector(), (std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11,  //
                                              16, 17, 18, 19, 20, 21, 22, 23}));

  // A slice of a slice: offsets add up, strides stay those of the storage.
  const Tensor ss = s.Slice(2, 1, 3).Slice(0, 1, 2);
  EXPECT_TRUE(ss.SharesStorageWith(t));
  EXPECT_EQ(ss.GetShape(), (Shape{1, 2, 2}));
  EXPECT_EQ(ss.Offset(), 4 + 1 + 12);
  EXPECT_EQ(ss.Stride(0), 12);
  EXPECT_EQ(ss.Stride(1), 4);
  EXPECT_EQ(ss.Stride(2), 1);
  EXPECT_EQ(ss.ToVector(), (std::vector<float>{17, 18, 21, 22}));
}

TEST(TensorTest, EmptySliceHasNoElements) {
  const Tensor t = Tensor::FromVector(Iota(6), {2, 3});
  const Tensor e = t.Slice(1, 3, 3);
  EXPECT_EQ(e.GetShape(), (Shape{2, 0}));
  EXPECT_EQ(e.NumElements(), 0);
  EXPECT_TRUE(e.ToVector().empty());
  EXPECT_EQ(e.Clone().GetShape(), (Shape{2, 0}));
}

// Copies whose coalesced form is a single element or a column of single elements.
TEST(TensorTest, CopiesOfScalarsAndColumns) {
  const Tensor scalar = Tensor::FromVector(std::vector<float>{3.5f}, {});
  EXPECT_EQ(scalar.AsType(DType::kF16).ToVector(), std::vector<float>{3.5f});
  EXPECT_EQ(scalar.Clone().ToVector(), std::vector<float>{3.5f});
  const Tensor t = Tensor::FromVector(Iota(4 * 6), {4, 6});
  EXPECT_EQ(t.Slice(0, 2, 3).Slice(1, 4, 5).Clone().ToVector(), std::vector<float>{16});
  const Tensor column = t.Slice(1, 4, 5);  // [4, 1], stride 6 between elements
  EXPECT_EQ(column.Clone().ToVector(), (std::vector<float>{4, 10, 16, 22}));
  EXPECT_EQ(column.AsType(DType::kBF16).ToVector(), (std::vector<float>{4, 10, 16, 22}));
}

TEST(TensorTest, ContiguityIgnoresUnitDims) {
  const Tensor t = Tensor::Zeros(DType::kF32, {4, 3});
  EXPECT_TRUE(t.Slice(0, 1, 2).IsContiguous());                 // one row
  EXPECT_TRUE(t.Slice(0, 1, 3).IsContiguous());                 // rows 1..2
  EXPECT_FALSE(t.Slice(1, 0, 2).IsContiguous());                // a gap after each row
  EXPECT_TRUE(t.Slice(1, 1, 2).Slice(0, 2, 3).IsContiguous());  // a single element
}

TEST(TensorTest, SliceErrorsNameValuesAndChangeNothing) {
  const Tensor t = Tensor::FromVector(Iota(3 * 8), {3, 8});
  const TensorState before(t);
  ExpectThrowWith<ShapeError>([&] { (void)t.Slice(1, 2, 9); },
                              {"[Tensor::Slice] end 9 exceeds dim 1 of size 8"});
  ExpectThrowWith<ShapeError>([&] { (void)t.Slice(1, -1, 2); },
                              {"[Tensor::Slice] begin -1 is negative (dim 1 of size 8)"});
  ExpectThrowWith<ShapeError>([&] { (void)t.Slice(0, 2, 1); },
                              {"[Tensor::Slice] begin 2 > end 1 on dim 0 of size 3"});
  ExpectThrowWith<ShapeError>([&] { (void)t.Slice(2, 0, 1); },
                              {"[Tensor::Slice] axis 2 outside [0, 2) for shape [3, 8]"});
  ExpectThrowWith<ShapeError>([&] { (void)t.Slice(-1, 0, 1); }, {"[Tensor::Slice] axis -1"});
  ExpectThrowWith<ShapeError>([&] { (void)Tensor().Slice(0, 0, 0); },
                              {"[Tensor::Slice] axis 0 outside [0, 0) for shape []"});
  ExpectThrowWith<ShapeError>([&] { (void)t.Stride(3); }, {"[Tensor::Stride] axis 3"});
  EXPECT_EQ(TensorState(t), before);
}

TEST(TensorTest, ReshapeSharesStorage) {
  const Tensor t = Tensor::FromVector(Iota(24), {2, 3, 4});
  const Tensor r = t.Reshape({6, 4});
  EXPECT_TRUE(r.SharesStorageWith(t));
  EXPECT_EQ(r.Stride(0), 4);
  EXPECT_EQ(r.ToVector(), t.ToVector());
  // A contiguous slice reshapes too and keeps its offset.
  const Tensor rows = t.Slice(0, 1, 2).Reshape({3, 4});
  EXPECT_EQ(rows.Offset(), 12);
  EXPECT_EQ(rows.ToVector(), Iota(12, 12.0f));
}

TEST(TensorTest, ReshapeErrorsNameValuesAndChangeNothing) {
  const Tensor t = Tensor::FromVector(Iota(24), {2, 3, 4});
  const Tensor strided = t.Slice(2, 0, 2);
  const TensorState before(t);
  const TensorState before_strided(strided);
  ExpectThrowWith<ShapeError>(
      [&] {
        (void)t.Reshape({5, 5});
      },
      {"[Tensor::Reshape] shape [5, 5] has 25 elements, tensor [2, 3, 4] "
       "has 24"});
  ExpectThrowWith<ShapeError>([&] { (void)strided.Reshape({12}); },
                              {"[Tensor::Reshape] tensor Tensor(f32, [2, 3, 2], strides [12, 4, "
                               "1], strided) is not contiguous (to shape [12])"});
  EXPECT_EQ(TensorState(t), before);
  EXPECT_EQ(TensorState(strided), before_strided);
}

TEST(TensorTest, ContiguousCopiesOnlyWhenNeeded) {
  const Tensor t = Tensor::FromVector(Iota(2 * 3 * 5 * 8), {2, 3, 5, 8});
  EXPECT_TRUE(t.Contiguous().SharesStorageWith(t));
  const Tensor view = t.Slice(1, 1, 3).Slice(3, 2, 6);  // [2, 2, 5, 4]
  const Tensor c = view.Contiguous();
  EXPECT_FALSE(c.SharesStorageWith(t));
  EXPECT_TRUE(c.IsContiguous());
  EXPECT_EQ(c.Offset(), 0);
  EXPECT_EQ(Address(c.Data()) % 64, 0u);
  ASSERT_EQ(c.GetShape(), (Shape{2, 2, 5, 4}));
  // Element [b, h, l, d] of the view is t[b, h + 1, l, d + 2].
  const auto* data = static_cast<const float*>(c.Data());
  for (int b = 0; b < 2; ++b) {
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 5; ++l) {
        for (int d = 0; d < 4; ++d) {
          const int expected = ((b * 3 + (h + 1)) * 5 + l) * 8 + (d + 2);
          ASSERT_EQ(*data++, static_cast<float>(expected)) << b << h << l << d;
        }
      }
    }
  }
}

TEST(TensorTest, CloneIsIndependent) {
  Tensor t = Tensor::FromVector(Iota(6), {2, 3});
  Tensor c = t.Clone();
  EXPECT_FALSE(c.SharesStorageWith(t));
  EXPECT_NE(c.Data(), t.Data());
  static_cast<float*>(c.MutableData())[0] = 100.0f;
  static_cast<float*>(t.MutableData())[5] = -1.0f;
  EXPECT_EQ(t.ToVector(), (std::vector<float>{0, 1, 2, 3, 4, -1}));
  EXPECT_EQ(c.ToVector(), (std::vector<float>{100, 1, 2, 3, 4, 5}));
}

TEST(TensorTest, CopiesShareWritesClonesDoNot) {
  Tensor t = Tensor::FromVector(Iota(4), {4});
  const Tensor alias = t;  // a view: same storage
  const Tensor view = t.Slice(0, 2, 4);
  static_cast<float*>(t.MutableData())[3] = 42.0f;
  EXPECT_EQ(alias.ToVector(), (std::vector<float>{0, 1, 2, 42}));
  EXPECT_EQ(view.ToVector(), (std::vector<float>{2, 42}));
}

// Values chosen so that f16 must round: compare with the scalar conversion per element.
TEST(TensorTest, AsTypeF32ToF16ToF32) {
  std::vector<float> values;
  // i / 10, not 0.1f * i: GCC contracts a * b - c into an FMA where the target
  // has one (AArch64), and 0.1f * 173 - 17.3f then leaves the product's rounding
  // error, 1e-6, an f16 subnormal whose error the relative bound below does not cover.
  for (int i = 0; i < 3 * 4 * 5 * 6; ++i) values.push_back(static_cast<float>(i) / 10.0f - 17.3f);
  const Tensor t = Tensor::FromVector(values, {3, 4, 5, 6});
  const Tensor h = t.AsType(DType::kF16);
  EXPECT_EQ(h.Dtype(), DType::kF16);
  EXPECT_EQ(h.NumBytes(), values.size() * 2);
  const Tensor back = h.AsType(DType::kF32);
  EXPECT_EQ(back.Dtype(), DType::kF32);
  const std::vector<float> got = back.ToVector();
  ASSERT_EQ(got.size(), values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(got[i], F16ToF32(F32ToF16(values[i]))) << i;
    ASSERT_LE(std::abs(got[i] - values[i]), std::abs(values[i]) * 0x1p-11f) << i;
  }
  // A strided source converts the elements in view only.
  const Tensor sub = t.Slice(3, 1, 4).Slice(1, 2, 3).AsType(DType::kBF16);
  EXPECT_TRUE(sub.IsContiguous());
  ASSERT_EQ(sub.GetShape(), (Shape{3, 1, 5, 3}));
  const std::vector<float> sub_values = sub.ToVector();
  std::size_t k = 0;
  for (int b = 0; b < 3; ++b) {
    for (int l = 0; l < 5; ++l) {
      for (int d = 1; d < 4; ++d) {
        const float source = values[static_cast<std::size_t>(((b * 4 + 2) * 5 + l) * 6 + d)];
        ASSERT_EQ(sub_values[k++], BF16ToF32(F32ToBF16(source)));
      }
    }
  }
}

}  // namespace
}  // namespace ringkv
