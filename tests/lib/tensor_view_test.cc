// Tensor::Borrow (a caller's buffer, no copy) and the no-copy views Permute,
// Transpose and Unsqueeze.

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "lib_test_util.h"

namespace ringkv {
namespace {

using test::ExpectThrowWith;
using test::Iota;
using test::TensorState;

// Element (i, j, k) of a row-major [d0, d1, d2] buffer.
float At3(const std::vector<float>& v, std::int64_t d1, std::int64_t d2, std::int64_t i,
          std::int64_t j, std::int64_t k) {
  return v[static_cast<std::size_t>((i * d1 + j) * d2 + k)];
}

TEST(BorrowTest, ReadsTheCallersBufferInPlace) {
  std::vector<float> buffer = Iota(6);
  const Tensor t = Tensor::Borrow(buffer.data(), DType::kF32, {2, 3});
  EXPECT_EQ(t.Data(), buffer.data());
  EXPECT_EQ(t.GetShape(), (Shape{2, 3}));
  EXPECT_EQ(t.Stride(0), 3);
  EXPECT_EQ(t.Stride(1), 1);
  EXPECT_TRUE(t.IsContiguous());
  EXPECT_TRUE(t.IsWritable());
  EXPECT_EQ(t.ToVector(), buffer);
  buffer[4] = 40.0f;  // no copy was made: the tensor sees the caller's change
  EXPECT_EQ(t.ToVector(), (std::vector<float>{0, 1, 2, 3, 40, 5}));
  EXPECT_EQ(t.Slice(1, 1, 2).ToVector(), (std::vector<float>{1, 40}));
}

TEST(BorrowTest, ExplicitStridesPickTheRightElements) {
  const std::vector<float> buffer = Iota(12);
  // Rows of 5 with the last 2 unused (a padded row pitch).
  const std::array<std::int64_t, 2> padded{5, 1};
  const Tensor rows = Tensor::Borrow(buffer.data(), DType::kF32, {2, 3}, padded);
  EXPECT_FALSE(rows.IsContiguous());
  EXPECT_EQ(rows.ToVector(), (std::vector<float>{0, 1, 2, 5, 6, 7}));
  // Every other element, as [3, 2].
  const std::array<std::int64_t, 2> every_other{4, 2};
  const Tensor sparse = Tensor::Borrow(buffer.data(), DType::kF32, {3, 2}, every_other);
  EXPECT_EQ(sparse.ToVector(), (std::vector<float>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(sparse.Contiguous().ToVector(), sparse.ToVector());
  EXPECT_EQ(sparse.AsType(DType::kF16).ToVector(), sparse.ToVector());
  // A half-precision buffer is read as stored.
  const Tensor halves = Tensor::FromVector(Iota(4, 0.5f), {4}, DType::kBF16);
  const Tensor borrowed = Tensor::Borrow(halves.Data(), DType::kBF16, {2, 2});
  EXPECT_EQ(borrowed.ToVector(), Iota(4, 0.5f));
}

TEST(BorrowTest, SliceUpdateWritesIntoTheCallersBuffer) {
  std::vector<float> buffer(8, 0.0f);
  Tensor t = Tensor::Borrow(buffer.data(), DType::kF32, {2, 4});
  SliceUpdate(t, Tensor::FromVector(std::vector<float>{7, 8}, {2, 1}), 1, 2);
  EXPECT_EQ(buffer, (std::vector<float>{0, 0, 7, 0, 0, 0, 8, 0}));
}

TEST(BorrowTest, CloneOwnsACopy) {
  std::vector<float> buffer = Iota(4);
  const Tensor t = Tensor::Borrow(buffer.data(), DType::kF32, {4});
  const Tensor clone = t.Clone();
  EXPECT_NE(clone.Data(), t.Data());
  EXPECT_FALSE(clone.SharesStorageWith(t));
  EXPECT_TRUE(clone.IsWritable());
  buffer[0] = 100.0f;
  EXPECT_EQ(clone.ToVector(), Iota(4));
  EXPECT_EQ(t.Contiguous().Data(), buffer.data());  // already contiguous: the view itself
}

TEST(BorrowTest, ReadOnlyBorrowRefusesEveryWrite) {
  const std::vector<float> buffer = Iota(8);
  const Tensor ro = Tensor::Borrow(buffer.data(), DType::kF32, {2, 4});
  EXPECT_FALSE(ro.IsWritable());
  EXPECT_EQ(ro.ToVector(), buffer);
  const TensorState before(ro);
  const Tensor src = Tensor::FromVector(std::vector<float>{7, 8}, {2, 1});

  Tensor target = ro;
  ExpectThrowWith<Error>([&] { SliceUpdate(target, src, 1, 2); },
                         {"[SliceUpdate] dst Tensor(f32, [2, 4]", "borrowed read-only"});
  ExpectThrowWith<Error>([&] { (void)target.MutableData(); },
                         {"[Tensor::MutableData] tensor Tensor(f32, [2, 4]", "read-only"});
  // Views of it are read-only too.
  Tensor slice = ro.Slice(1, 1, 3);
  EXPECT_FALSE(slice.IsWritable());
  ExpectThrowWith<Error>([&] { SliceUpdate(slice, src, 1, 0); }, {"borrowed read-only"});
  Tensor transposed = ro.Transpose(0, 1);
  EXPECT_FALSE(transposed.IsWritable());
  ExpectThrowWith<Error>([&] { (void)transposed.MutableData(); }, {"read-only"});

  EXPECT_EQ(buffer, Iota(8));
  EXPECT_EQ(TensorState(ro), before);
  // Reading and copying still work; a copy is writable.
  Tensor copy = ro.Clone();
  SliceUpdate(copy, src, 1, 2);
  EXPECT_EQ(copy.ToVector(), (std::vector<float>{0, 1, 7, 3, 4, 5, 8, 7}));
  EXPECT_EQ(buffer, Iota(8));
}

TEST(BorrowTest, ReadOnlyMayBroadcastWritableMayNot) {
  const std::vector<float> row{1, 2, 3};
  const std::array<std::int64_t, 2> broadcast{0, 1};
  const Tensor ro = Tensor::Borrow(row.data(), DType::kF32, {4, 3}, broadcast);
  EXPECT_EQ(ro.ToVector(), (std::vector<float>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(ro.Clone().ToVector(), ro.ToVector());

  std::vector<float> buffer = Iota(6);
  ExpectThrowWith<ShapeError>(
      [&] {
        (void)Tensor::Borrow(buffer.data(), DType::kF32, {4, 3}, broadcast);
      },
      {"[Tensor::Borrow] strides [0, 1] for shape [4, 3] give elements one address (dim 0 of size "
       "4 has stride 0",
       "borrow through a const pointer to broadcast"});
  // Overlapping without a zero stride: [3, 3] with strides [1, 2] puts (0, 1) and (2, 0) at 2.
  const std::array<std::int64_t, 2> overlapping{1, 2};
  ExpectThrowWith<ShapeError>(
      [&] {
        (void)Tensor::Borrow(buffer.data(), DType::kF32, {3, 3}, overlapping);
      },
      {"strides [1, 2] for shape [3, 3] give elements one address (dim 1 of size 3 has stride 2, "
       "within the 3 elements the smaller strides span)"});
  // Interleaved but disjoint: [2, 3] with strides [1, 2] is offsets 0 2 4 / 1 3 5.
  const Tensor interleaved = Tensor::Borrow(buffer.data(), DType::kF32, {2, 3}, overlapping);
  EXPECT_EQ(interleaved.ToVector(), (std::vector<float>{0, 2, 4, 1, 3, 5}));
  // A zero stride on a size-1 dim is no overlap.
  const std::array<std::int64_t, 2> unit{0, 1};
  EXPECT_EQ(Tensor::Borrow(buffer.data(), DType::kF32, {1, 3}, unit).ToVector(),
            (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(buffer, Iota(6));
}

TEST(BorrowTest, BadInputsThrowNamingTheArgument) {
  std::vector<float> buffer = Iota(16);
  float* data = buffer.data();
  ExpectThrowWith<Error>(
      [&] {
        (void)Tensor::Borrow(static_cast<float*>(nullptr), DType::kF32, {2, 3});
      },
      {"[Tensor::Borrow] data is null for shape [2, 3] (6 elements)"});
  ExpectThrowWith<Error>([&] { (void)Tensor::Borrow(data, static_cast<DType>(7), {2}); },
                         {"[Tensor::Borrow] dtype 7"});
  const std::array<std::int64_t, 1> one{1};
  ExpectThrowWith<ShapeError>(
      [&] {
        (void)Tensor::Borrow(data, DType::kF32, {2, 3}, one);
      },
      {"[Tensor::Borrow] strides [1] has 1 entries, shape [2, 3] has "
       "rank 2"});
  const std::array<std::int64_t, 2> negative{-3, 1};
  ExpectThrowWith<ShapeError>(
      [&] {
        (void)Tensor::Borrow(data, DType::kF32, {2, 3}, negative);
      },
      {"[Tensor::Borrow] strides [-3, 1] for shape [2, 3]: strides[0] is "
       "-3, negative strides are not supported"});
  auto* bytes = reinterpret_cast<std::byte*>(data);
  ExpectThrowWith<Error>([&] { (void)Tensor::Borrow(bytes + 2, DType::kF32, {2}); },
                         {"[Tensor::Borrow] data 0x", "is not aligned to the 4 bytes of a f32"});
  ExpectThrowWith<Error>([&] { (void)Tensor::Borrow(bytes + 1, DType::kF16, {2}); },
                         {"is not aligned to the 2 bytes of a f16"});
  EXPECT_EQ(Tensor::Borrow(bytes + 2, DType::kBF16, {2}).Data(), bytes + 2);

  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const std::array<std::int64_t, 2> overflowing{kMax / 2, 1};
  ExpectThrowWith<Error>(
      [&] {
        (void)Tensor::Borrow(data, DType::kF32, {3, 1}, overflowing);
      },
      {"[Tensor::Borrow] shape [3, 1] with strides [4611686018427387903, 1] of f32 spans more "
       "than 2^63 - 1 bytes"});
  const std::array<std::int64_t, 1> huge{std::int64_t{1} << 61};
  ExpectThrowWith<Error>([&] { (void)Tensor::Borrow(data, DType::kF32, {2}, huge); },
                         {"spans more than 2^63 - 1 bytes"});
  // In range as a count, but past the top of the address space from there.
  const auto* top = reinterpret_cast<const float*>(std::uintptr_t{0} - 64);
  ExpectThrowWith<Error>([&] { (void)Tensor::Borrow(top, DType::kF32, {32}); },
                         {"[Tensor::Borrow] data 0xffffffffffffffc0 + 128 bytes (shape [32], "
                          "strides [1]) passes the end of the address space"});
  EXPECT_EQ(buffer, Iota(16));

  // Nothing to read: null is fine.
  const Tensor none = Tensor::Borrow(static_cast<float*>(nullptr), DType::kF32, {0, 3});
  EXPECT_FALSE(none.Empty());
  EXPECT_EQ(none.NumElements(), 0);
  EXPECT_TRUE(none.ToVector().empty());
  EXPECT_TRUE(none.Clone().ToVector().empty());
}

TEST(PermuteTest, MapsEveryElementAndCopiesNothing) {
  const std::vector<float> values = Iota(2 * 3 * 4);
  const Tensor t = Tensor::FromVector(values, {2, 3, 4});
  const Tensor p = t.Permute({2, 0, 1});  // p(i, j, k) = t(j, k, i)
  EXPECT_EQ(p.GetShape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.Stride(0), 1);
  EXPECT_EQ(p.Stride(1), 12);
  EXPECT_EQ(p.Stride(2), 4);
  EXPECT_TRUE(p.SharesStorageWith(t));
  EXPECT_EQ(p.Data(), t.Data());
  EXPECT_FALSE(p.IsContiguous());
  std::vector<float> want;
  for (std::int64_t i = 0; i < 4; ++i) {
    for (std::int64_t j = 0; j < 2; ++j) {
      for (std::int64_t k = 0; k < 3; ++k) want.push_back(At3(values, 3, 4, j, k, i));
    }
  }
  EXPECT_EQ(p.ToVector(), want);
  EXPECT_EQ(p.Contiguous().ToVector(), want);
  EXPECT_TRUE(p.Contiguous().IsContiguous());
  EXPECT_EQ(p.AsType(DType::kBF16).ToVector(), want);  // small integers: exact in bf16
  // Permuting back is the original layout.
  const Tensor back = p.Permute({1, 2, 0});
  EXPECT_TRUE(back.IsContiguous());
  EXPECT_EQ(back.ToVector(), values);
  // The identity permutation.
  EXPECT_EQ(t.Permute({0, 1, 2}).ToVector(), values);
}

// The embedding case: a model's K is a row-major [L, Hkv, D] buffer, the cache
// takes [1, Hkv, L, D].
TEST(PermuteTest, LhdBufferAsOneHldView) {
  constexpr std::int64_t kL = 3, kH = 2, kD = 4;
  std::vector<float> k = Iota(kL * kH * kD);
  const Tensor view = Tensor::Borrow(k.data(), DType::kF32, {kL, kH, kD}).Permute({1, 0, 2});
  const Tensor bhld = view.Unsqueeze(0);
  EXPECT_EQ(bhld.GetShape(), (Shape{1, kH, kL, kD}));
  EXPECT_EQ(bhld.Data(), k.data());
  std::vector<float> want;
  for (std::int64_t h = 0; h < kH; ++h) {
    for (std::int64_t l = 0; l < kL; ++l) {
      for (std::int64_t d = 0; d < kD; ++d) want.push_back(At3(k, kH, kD, l, h, d));
    }
  }
  EXPECT_EQ(bhld.ToVector(), want);
  EXPECT_EQ(bhld.AsType(DType::kF16).ToVector(), want);
  // Writes through the view land at the caller's [l, h, d].
  Tensor writable = bhld;
  const Tensor row =
      Tensor::FromVector(std::vector<float>{-1, -2, -3, -4, -5, -6, -7, -8}, {1, kH, 1, kD});
  SliceUpdate(writable, row, 2, 1);  // token l = 1 of both heads
  for (std::int64_t h = 0; h < kH; ++h) {
    for (std::int64_t d = 0; d < kD; ++d) {
      EXPECT_EQ(At3(k, kH, kD, 1, h, d), static_cast<float>(-(h * kD + d + 1)));
      EXPECT_EQ(At3(k, kH, kD, 0, h, d), static_cast<float>(h * kD + d));
    }
  }
}

TEST(TransposeTest, SwapsTwoAxes) {
  const std::vector<float> values = Iota(2 * 3 * 4);
  const Tensor t = Tensor::FromVector(values, {2, 3, 4});
  const Tensor x = t.Transpose(0, 2);  // x(i, j, k) = t(k, j, i)
  EXPECT_EQ(x.GetShape(), (Shape{4, 3, 2}));
  std::vector<float> want;
  for (std::int64_t i = 0; i < 4; ++i) {
    for (std::int64_t j = 0; j < 3; ++j) {
      for (std::int64_t k = 0; k < 2; ++k) want.push_back(At3(values, 3, 4, k, j, i));
    }
  }
  EXPECT_EQ(x.ToVector(), want);
  EXPECT_EQ(t.Transpose(1, 1).ToVector(), values);
  EXPECT_TRUE(t.Transpose(1, 1).IsContiguous());
  // A transposed slice: strides and offset both carry over.
  const Tensor part =
      t.Slice(2, 1, 3).Transpose(1, 2);  // [2, 2, 3]: part(a, b, c) = t(a, c, 1 + b)
  std::vector<float> part_want;
  for (std::int64_t a = 0; a < 2; ++a) {
    for (std::int64_t b = 0; b < 2; ++b) {
      for (std::int64_t c = 0; c < 3; ++c) part_want.push_back(At3(values, 3, 4, a, c, 1 + b));
    }
  }
  EXPECT_EQ(part.ToVector(), part_want);
}

TEST(UnsqueezeTest, InsertsASizeOneAxisAnywhere) {
  const Tensor t = Tensor::FromVector(Iota(6), {2, 3});
  EXPECT_EQ(t.Unsqueeze(0).GetShape(), (Shape{1, 2, 3}));
  EXPECT_EQ(t.Unsqueeze(1).GetShape(), (Shape{2, 1, 3}));
  EXPECT_EQ(t.Unsqueeze(2).GetShape(), (Shape{2, 3, 1}));
  for (int axis = 0; axis <= 2; ++axis) {
    const Tensor u = t.Unsqueeze(axis);
    EXPECT_TRUE(u.IsContiguous()) << axis;
    EXPECT_TRUE(u.SharesStorageWith(t));
    EXPECT_EQ(u.ToVector(), Iota(6)) << axis;
    EXPECT_EQ(u.Reshape({6}).ToVector(), Iota(6)) << axis;
  }
  // A strided view stays strided, with its element order.
  const Tensor x = t.Transpose(0, 1).Unsqueeze(1);  // [3, 1, 2]
  EXPECT_FALSE(x.IsContiguous());
  EXPECT_EQ(x.ToVector(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  const Tensor scalar = Tensor::FromVector(std::vector<float>{5}, {});
  EXPECT_EQ(scalar.Unsqueeze(0).GetShape(), (Shape{1}));
  EXPECT_EQ(scalar.Unsqueeze(0).ToVector(), (std::vector<float>{5}));
  EXPECT_TRUE(Tensor().Unsqueeze(0).Empty());
}

TEST(ViewErrorsTest, NameTheAxesAndChangeNothing) {
  const Tensor t = Tensor::FromVector(Iota(24), {2, 3, 4});
  const TensorState before(t);
  ExpectThrowWith<ShapeError>(
      [&] {
        (void)t.Permute({1, 0});
      },
      {"[Tensor::Permute] axes (1, 0) has 2 entries, shape [2, 3, 4] has "
       "rank 3"});
  ExpectThrowWith<ShapeError>(
      [&] {
        (void)t.Permute({0, 3, 1});
      },
      {"[Tensor::Permute] axes (0, 3, 1): axis 3 outside [0, 3) for shape "
       "[2, 3, 4]"});
  ExpectThrowWith<ShapeError>([&] { (void)t.Permute({-1, 0, 1}); }, {"axis -1 outside [0, 3)"});
  ExpectThrowWith<ShapeError>(
      [&] {
        (void)t.Permute({2, 0, 2});
      },
      {"[Tensor::Permute] axes (2, 0, 2): axis 2 appears twice (shape [2, "
       "3, 4])"});
  ExpectThrowWith<ShapeError>([&] { (void)t.Transpose(0, 3); },
                              {"[Tensor::Transpose] axis 3 outside [0, 3) for shape [2, 3, 4]"});
  ExpectThrowWith<ShapeError>([&] { (void)t.Transpose(-1, 0); },
                              {"[Tensor::Transpose] axis -1 outside [0, 3)"});
  ExpectThrowWith<ShapeError>([&] { (void)t.Unsqueeze(4); },
                              {"[Tensor::Unsqueeze] axis 4 outside [0, 3] for shape [2, 3, 4]"});
  ExpectThrowWith<ShapeError>([&] { (void)t.Unsqueeze(-1); }, {"axis -1 outside [0, 3]"});
  const Tensor full = t.Unsqueeze(0);
  ExpectThrowWith<ShapeError>([&] { (void)full.Unsqueeze(0); },
                              {"[Tensor::Unsqueeze] shape [1, 2, 3, 4] already has the maximum "
                               "rank 4"});
  ExpectThrowWith<ShapeError>(
      [&] {
        (void)t.Permute({1, 0, 2}).Reshape({24});
      },
      {"[Tensor::Reshape] tensor Tensor(f32, [3, 2, 4]", "not contiguous"});
  EXPECT_EQ(TensorState(t), before);
  EXPECT_EQ(TensorState(full.Reshape({2, 3, 4})), before);
}

// Two borrows of one buffer are different tensors over the same bytes: a copy
// between them must read the source before writing (memmove semantics), as it
// does between two views of one owned tensor.
TEST(BorrowTest, SliceUpdateBetweenOverlappingBorrowsReadsFirst) {
  std::vector<float> buffer = Iota(8);                                                // [4, 2]
  Tensor column = Tensor::Borrow(buffer.data(), DType::kF32, {4, 2}).Slice(1, 0, 1);  // [4, 1]
  const std::array<std::int64_t, 2> strides{2, 1};
  const Tensor first_three = Tensor::Borrow(buffer.data(), DType::kF32, {3, 1}, strides);
  SliceUpdate(column, first_three, 0, 1);  // column rows 1..3 = old rows 0..2
  EXPECT_EQ(buffer, (std::vector<float>{0, 1, 0, 3, 2, 5, 4, 7}));
}

}  // namespace
}  // namespace ringkv
