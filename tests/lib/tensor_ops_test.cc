#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "lib_test_util.h"

namespace ringkv {
namespace {

using test::ExpectThrowWith;
using test::Iota;
using test::TensorState;

// Element of a contiguous row-major [d0, d1, d2, d3] vector at [i0, i1, i2, i3].
float At(const std::vector<float>& v, const std::array<int, 4>& dims,
         const std::array<int, 4>& idx) {
  const int flat = ((idx[0] * dims[1] + idx[1]) * dims[2] + idx[2]) * dims[3] + idx[3];
  return v[static_cast<std::size_t>(flat)];
}

TEST(ConcatenateTest, HandWorkedRank2) {
  const Tensor a = Tensor::FromVector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  const Tensor b = Tensor::FromVector(std::vector<float>{5, 6}, {2, 1});
  const Tensor c = Tensor::FromVector(std::vector<float>{7, 8}, {1, 2});
  const Tensor ab[] = {a, b};
  const Tensor cols = Concatenate(ab, 1);
  EXPECT_EQ(cols.GetShape(), (Shape{2, 3}));
  EXPECT_EQ(cols.ToVector(), (std::vector<float>{1, 2, 5, 3, 4, 6}));
  const Tensor ac[] = {a, c, a};
  const Tensor rows = Concatenate(ac, 0);
  EXPECT_EQ(rows.GetShape(), (Shape{5, 2}));
  EXPECT_EQ(rows.ToVector(), (std::vector<float>{1, 2, 3, 4, 7, 8, 1, 2, 3, 4}));
  EXPECT_FALSE(rows.SharesStorageWith(a));
}

// Along every axis of [B, H, L, D], with one contiguous input, one strided view
// and one sliced along a different axis (mixed contiguity), in f32 and f16.
class ConcatenateAxisTest : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(ConcatenateAxisTest, MatchesIndexExpectation) {
  const auto [axis, dtype] = GetParam();
  const std::array<int, 4> base_dims{2, 3, 4, 5};
  // Parts of size 2, 1 and 3 along `axis`; the other dims are base_dims.
  std::array<int, 4> sizes_a = base_dims, sizes_b = base_dims, sizes_c = base_dims;
  sizes_a[static_cast<std::size_t>(axis)] = 2;
  sizes_b[static_cast<std::size_t>(axis)] = 1;
  sizes_c[static_cast<std::size_t>(axis)] = 3;

  // A is contiguous.
  const Shape shape_a{sizes_a[0], sizes_a[1], sizes_a[2], sizes_a[3]};
  const std::vector<float> va = Iota(shape_a.NumElements(), 0.0f);
  const Tensor a = Tensor::FromVector(va, shape_a, dtype);

  // B is a view into a bigger tensor: every dim padded by 2, offset by 1.
  std::array<int, 4> big_dims{};
  for (std::size_t i = 0; i < 4; ++i) big_dims[i] = sizes_b[i] + 2;
  const Shape big_shape{big_dims[0], big_dims[1], big_dims[2], big_dims[3]};
  const std::vector<float> vbig = Iota(big_shape.NumElements(), 300.0f);
  Tensor b = Tensor::FromVector(vbig, big_shape, dtype);
  for (int i = 0; i < 4; ++i) b = b.Slice(i, 1, 1 + sizes_b[static_cast<std::size_t>(i)]);
  ASSERT_FALSE(b.IsContiguous());

  // C is a slice along the last axis of a wider tensor: rows contiguous, gaps between.
  std::array<int, 4> wide_dims = sizes_c;
  wide_dims[3] += 3;
  const Shape wide_shape{wide_dims[0], wide_dims[1], wide_dims[2], wide_dims[3]};
  const std::vector<float> vwide = Iota(wide_shape.NumElements(), 1200.0f);
  const Tensor c = Tensor::FromVector(vwide, wide_shape, dtype).Slice(3, 2, 2 + sizes_c[3]);

  const Tensor parts[] = {a, b, c};
  const Tensor out = Concatenate(parts, axis);
  std::array<int, 4> out_dims = base_dims;
  out_dims[static_cast<std::size_t>(axis)] = 6;
  ASSERT_EQ(out.GetShape(), (Shape{out_dims[0], out_dims[1], out_dims[2], out_dims[3]}));
  ASSERT_EQ(out.Dtype(), dtype);
  EXPECT_TRUE(out.IsContiguous());

  const std::vector<float> got = out.ToVector();
  std::size_t k = 0;
  std::array<int, 4> idx{};
  for (idx[0] = 0; idx[0] < out_dims[0]; ++idx[0]) {
    for (idx[1] = 0; idx[1] < out_dims[1]; ++idx[1]) {
      for (idx[2] = 0; idx[2] < out_dims[2]; ++idx[2]) {
        for (idx[3] = 0; idx[3] < out_dims[3]; ++idx[3]) {
          std::array<int, 4> local = idx;
          int& along = local[static_cast<std::size_t>(axis)];
          float want = 0;
          if (along < 2) {
            want = At(va, sizes_a, local);
          } else if (along < 3) {
            along -= 2;
            for (int& i : local) i += 1;  // B's view starts at 1 on every axis
            want = At(vbig, big_dims, local);
          } else {
            along -= 3;
            local[3] += 2;  // C's view starts at column 2
            want = At(vwide, wide_dims, local);
          }
          // Distinct integers below 2048 (at most 300 + 840 and 1200 + 288): exact in f16.
          ASSERT_EQ(got[k++], want)
              << "at " << idx[0] << "," << idx[1] << "," << idx[2] << "," << idx[3];
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllAxes, ConcatenateAxisTest,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(DType::kF32, DType::kF16)));

TEST(ConcatenateTest, ErrorsNameValuesAndChangeNothing) {
  const Tensor a = Tensor::FromVector(Iota(6), {2, 3});
  const Tensor b = Tensor::FromVector(Iota(4, 10.0f), {2, 2});
  const Tensor h = Tensor::FromVector(Iota(6), {2, 3}, DType::kF16);
  const Tensor r3 = Tensor::FromVector(Iota(6), {1, 2, 3});
  const TensorState before_a(a), before_b(b), before_h(h);

  ExpectThrowWith<ShapeError>([] { (void)Concatenate({}, 0); }, {"[Concatenate] tensors is empty"});
  const Tensor ab[] = {a, b};
  ExpectThrowWith<ShapeError>([&] { (void)Concatenate(ab, 2); },
                              {"[Concatenate] axis 2 outside [0, 2) for tensors[0] shape [2, 3]"});
  ExpectThrowWith<ShapeError>(
      [&] { (void)Concatenate(ab, 0); },
      {"[Concatenate] tensors[1] dim 1 is 2 (shape [2, 2]), expected 3 (shape [2, 3])"});
  const Tensor ah[] = {a, a, h};
  ExpectThrowWith<ShapeError>([&] { (void)Concatenate(ah, 0); },
                              {"[Concatenate] tensors[2] dtype f16 != f32"});
  const Tensor ar[] = {a, r3};
  ExpectThrowWith<ShapeError>(
      [&] { (void)Concatenate(ar, 0); },
      {"[Concatenate] tensors[1] rank 3 (shape [1, 2, 3]) != 2 (shape [2, 3])"});
  const Tensor ae[] = {a, Tensor()};
  ExpectThrowWith<ShapeError>([&] { (void)Concatenate(ae, 0); },
                              {"[Concatenate] tensors[1] rank 0"});

  EXPECT_EQ(TensorState(a), before_a);
  EXPECT_EQ(TensorState(b), before_b);
  EXPECT_EQ(TensorState(h), before_h);
  // Concatenating along the mismatched axis itself is fine.
  const Tensor ok = Concatenate(ab, 1);
  EXPECT_EQ(ok.ToVector(), (std::vector<float>{0, 1, 2, 10, 11, 3, 4, 5, 12, 13}));
}

TEST(SliceUpdateTest, WritesInPlaceVisibleThroughOtherViews) {
  Tensor cache = Tensor::Zeros(DType::kF32, {1, 2, 4, 3});  // [B, H, L, D]
  const Tensor alias = cache;
  const Tensor head1 = cache.Slice(1, 1, 2);
  const Tensor src = Tensor::FromVector(Iota(2 * 2 * 3, 1.0f), {1, 2, 2, 3});
  SliceUpdate(cache, src, 2, 1);  // positions 1 and 2 of every head

  const std::vector<float> want = {0, 0, 0, 1, 2, 3, 4,  5,  6,  0, 0, 0,   // head 0
                                   0, 0, 0, 7, 8, 9, 10, 11, 12, 0, 0, 0};  // head 1
  EXPECT_EQ(cache.ToVector(), want);
  EXPECT_EQ(alias.ToVector(), want);
  EXPECT_EQ(head1.ToVector(), std::vector<float>(want.begin() + 12, want.end()));
  EXPECT_EQ(cache.Data(), alias.Data());
}

TEST(SliceUpdateTest, ThroughAStridedViewFromAStridedSource) {
  const Tensor base = Tensor::FromVector(Iota(4 * 6), {4, 6});
  Tensor dst = base.Slice(1, 2, 4);  // [4, 2], row stride 6
  const Tensor src_base = Tensor::FromVector(Iota(3 * 4, 100.0f), {3, 4});
  const Tensor src = src_base.Slice(1, 1, 3);  // [3, 2]: 101 102 / 105 106 / 109 110
  SliceUpdate(dst, src, 0, 1);
  EXPECT_EQ(base.ToVector(), (std::vector<float>{0,  1,  2,   3,   4,  5,   //
                                                 6,  7,  101, 102, 10, 11,  //
                                                 12, 13, 105, 106, 16, 17,  //
                                                 18, 19, 109, 110, 22, 23}));
  EXPECT_EQ(src_base.ToVector(), Iota(12, 100.0f));  // the source is only read
}

TEST(SliceUpdateTest, HalfPrecisionCopiesBitsUnchanged) {
  Tensor dst = Tensor::Zeros(DType::kBF16, {2, 4});
  const Tensor src =
      Tensor::FromVector(std::vector<float>{1.5f, -3.0f, 0.25f, 7.0f}, {2, 2}, DType::kBF16);
  SliceUpdate(dst, src, 1, 2);
  EXPECT_EQ(dst.ToVector(), (std::vector<float>{0, 0, 1.5f, -3.0f, 0, 0, 0.25f, 7.0f}));
}

// Source and destination overlap in the same storage: the result is as if the
// source had been read completely first (memmove semantics).
TEST(SliceUpdateTest, OverlappingSourceIsReadBeforeWriting) {
  Tensor t = Tensor::FromVector(Iota(6), {6});
  SliceUpdate(t, t.Slice(0, 0, 4), 0, 2);
  EXPECT_EQ(t.ToVector(), (std::vector<float>{0, 1, 0, 1, 2, 3}));
  Tensor u = Tensor::FromVector(Iota(6), {6});
  SliceUpdate(u, u.Slice(0, 2, 6), 0, 0);
  EXPECT_EQ(u.ToVector(), (std::vector<float>{2, 3, 4, 5, 4, 5}));
}

TEST(SliceUpdateTest, ErrorsNameValuesAndChangeNothing) {
  Tensor dst = Tensor::FromVector(Iota(2 * 8 * 4), {2, 8, 4});
  const Tensor view = dst.Slice(1, 2, 6);
  const Tensor src = Tensor::FromVector(Iota(2 * 3 * 4, 500.0f), {2, 3, 4});
  const TensorState before_dst(dst), before_view(view), before_src(src);

  ExpectThrowWith<ShapeError>([&] { SliceUpdate(dst, src, 1, 6); },
                              {"[SliceUpdate] begin 6 + src dim 1 of size 3 exceeds dst dim 1 of "
                               "size 8"});
  ExpectThrowWith<ShapeError>([&] { SliceUpdate(dst, src, 1, -1); },
                              {"[SliceUpdate] begin -1 + src dim 1 of size 3"});
  ExpectThrowWith<ShapeError>([&] { SliceUpdate(dst, src, 3, 0); },
                              {"[SliceUpdate] axis 3 outside [0, 3) for dst shape [2, 8, 4]"});
  const Tensor half = src.AsType(DType::kF16);
  ExpectThrowWith<ShapeError>([&] { SliceUpdate(dst, half, 1, 0); },
                              {"[SliceUpdate] src dtype f16 != f32"});
  const Tensor narrow = src.Slice(2, 0, 3);
  ExpectThrowWith<ShapeError>(
      [&] { SliceUpdate(dst, narrow, 1, 0); },
      {"[SliceUpdate] src dim 2 is 3 (shape [2, 3, 3]), expected 4 (shape [2, 8, 4])"});
  const Tensor flat = src.Reshape({24});
  ExpectThrowWith<ShapeError>([&] { SliceUpdate(dst, flat, 0, 0); },
                              {"[SliceUpdate] src rank 1 (shape [24]) != 3 (shape [2, 8, 4])"});
  Tensor empty;
  ExpectThrowWith<ShapeError>([&] { SliceUpdate(empty, src, 0, 0); },
                              {"[SliceUpdate] axis 0 outside [0, 0) for dst shape []"});

  EXPECT_EQ(TensorState(dst), before_dst);
  EXPECT_EQ(TensorState(view), before_view);
  EXPECT_EQ(TensorState(src), before_src);
  EXPECT_TRUE(empty.Empty());
  // The last position that fits is accepted.
  SliceUpdate(dst, src, 1, 5);
  EXPECT_EQ(dst.Slice(1, 5, 8).ToVector(), src.ToVector());
}

// Rows worked by hand (dtype.h: s = max|x| / 127, q = round half even of x / s):
// row 0 has s = 1, row 1 s = 0.5; a NaN poisons its whole row; zeros stay zeros.
// Read through a transposed view, so the rows are not contiguous in memory.
TEST(AsStoredTest, Int8HandWorkedRows) {
  const std::vector<float> rows = {127, -3.4f, 2.5f, 0.49f, 63.5f, 1.25f, -0.75f, 0.2f,
                                   1,   NAN,   0,    0,     0,     0,     0,      0};
  std::vector<float> columns(16);
  for (std::size_t r = 0; r < 4; ++r) {
    for (std::size_t c = 0; c < 4; ++c) columns[c * 4 + r] = rows[r * 4 + c];
  }
  const Tensor x = Tensor::FromVector(columns, {4, 4}).Transpose(0, 1);
  ASSERT_FALSE(x.IsContiguous());
  const Tensor back = AsStored(x, DType::kI8);
  EXPECT_EQ(back.Dtype(), DType::kF32);
  EXPECT_EQ(back.GetShape(), (Shape{4, 4}));
  const std::vector<float> got = back.ToVector();
  const std::vector<float> want = {127, -3, 2, 0, 63.5f, 1, -1, 0};
  EXPECT_EQ(std::vector<float>(got.begin(), got.begin() + 8), want);
  for (std::size_t i = 8; i < 12; ++i) EXPECT_TRUE(std::isnan(got[i])) << i;
  EXPECT_EQ(std::vector<float>(got.begin() + 12, got.end()), std::vector<float>(4, 0.0f));
}

// int4: groups of 32 with s = max|x| / 7; group 0 has s = 1, group 1 s = 2.
TEST(AsStoredTest, Int4HandWorkedGroups) {
  std::vector<float> row(64, 0.0f);
  row[0] = 7, row[1] = 2.5f, row[2] = 3.5f, row[3] = -6.6f;
  row[32] = 14, row[33] = 5, row[34] = -3, row[35] = 1, row[36] = 0.9f;
  std::vector<float> want(64, 0.0f);
  want[0] = 7, want[1] = 2, want[2] = 4, want[3] = -7;
  want[32] = 14, want[33] = 4, want[34] = -4, want[35] = 0, want[36] = 0;
  const Tensor back = AsStored(Tensor::FromVector(row, {1, 64}, DType::kBF16), DType::kI4);
  EXPECT_EQ(back.Dtype(), DType::kF32);
  EXPECT_EQ(back.ToVector(), want);
}

TEST(AsStoredTest, FloatDtypesRoundLikeAsType) {
  const std::vector<float> values = {1.0f + 0x1p-10f, 3.0f, -0.1f, 65536.0f};
  const Tensor x = Tensor::FromVector(values, {2, 2});
  const Tensor bf16 = AsStored(x, DType::kBF16);
  EXPECT_EQ(bf16.Dtype(), DType::kBF16);
  EXPECT_EQ(bf16.ToVector()[0], 1.0f);  // 8 mantissa bits drop 2^-10
  EXPECT_EQ(bf16.ToVector(), x.AsType(DType::kBF16).ToVector());
  const Tensor f16 = AsStored(x, DType::kF16);
  EXPECT_EQ(f16.Dtype(), DType::kF16);
  EXPECT_EQ(f16.ToVector(), x.AsType(DType::kF16).ToVector());
  EXPECT_EQ(AsStored(x, DType::kF32).ToVector(), values);
  EXPECT_FALSE(AsStored(x, DType::kF32).SharesStorageWith(x));
}

// The point of AsStored: exactly what a quantized cache holds and reads back.
TEST(AsStoredTest, MatchesWhatAQuantizedCacheReadsBack) {
  std::vector<float> k(2 * 5 * 64), v(2 * 5 * 64);
  for (std::size_t i = 0; i < k.size(); ++i) {
    k[i] = std::sin(0.37f * static_cast<float>(i)) * static_cast<float>(1 + i % 7);
    v[i] = std::cos(0.11f * static_cast<float>(i)) - 0.25f;
  }
  const Tensor keys = Tensor::FromVector(k, {1, 2, 5, 64});
  const Tensor values = Tensor::FromVector(v, {1, 2, 5, 64}, DType::kF16);
  KVCache cache(4, KvStorage{DType::kI8, DType::kI4});
  cache.Update(keys, values);
  const KvView view = cache.State();
  EXPECT_EQ(view.ConcatKeys().ToVector(), AsStored(keys, DType::kI8).ToVector());
  EXPECT_EQ(view.ConcatValues().ToVector(), AsStored(values, DType::kI4).ToVector());
  EXPECT_NE(AsStored(keys, DType::kI8).ToVector(), k);  // it did round
}

TEST(AsStoredTest, ErrorsNameValuesAndChangeNothing) {
  const Tensor x = Tensor::FromVector(Iota(2 * 48), {2, 48});
  const TensorState before(x);
  ExpectThrowWith<ShapeError>(
      [&] { (void)AsStored(x, DType::kI4); },
      {"[AsStored]", "[2, 48]", "last dim of 48, not a multiple of 32 (int4 groups)"});
  ExpectThrowWith<Error>([&] { (void)AsStored(x, static_cast<DType>(9)); },
                         {"[AsStored] storage dtype 9 is not one of f32, f16, bf16, int8, int4"});
  const Tensor scalar = Tensor::FromVector(std::vector<float>{2.0f}, Shape{});
  ExpectThrowWith<ShapeError>([&] { (void)AsStored(scalar, DType::kI8); },
                              {"[AsStored]", "no last axis to quantize as int8 rows"});
  EXPECT_EQ(TensorState(x), before);
  EXPECT_TRUE(AsStored(Tensor(), DType::kI8).Empty());
  EXPECT_EQ(AsStored(x, DType::kI8).GetShape(), (Shape{2, 48}));  // int8 takes any width
}

}  // namespace
}  // namespace ringkv
