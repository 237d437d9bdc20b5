#include <gtest/gtest.h>

#include "lib_test_util.h"

namespace ringkv {
namespace {

using test::ExpectThrowWith;

TEST(ShapeTest, DimsRankAndCount) {
  const Shape shape{1, 8, 256, 128};
  EXPECT_EQ(shape.Rank(), 4);
  EXPECT_EQ(shape.Dim(0), 1);
  EXPECT_EQ(shape[1], 8);
  EXPECT_EQ(shape.Dim(2), 256);
  EXPECT_EQ(shape.Dim(3), 128);
  EXPECT_EQ(shape.NumElements(), 1 * 8 * 256 * 128);
}

TEST(ShapeTest, ScalarAndZeroSized) {
  const Shape scalar;
  EXPECT_EQ(scalar.Rank(), 0);
  EXPECT_EQ(scalar.NumElements(), 1);  // the empty product
  EXPECT_EQ(ToString(scalar), "[]");
  const Shape empty{4, 0, 3};
  EXPECT_EQ(empty.Rank(), 3);
  EXPECT_EQ(empty.NumElements(), 0);
}

TEST(ShapeTest, WithReplacesOneDim) {
  const Shape shape{2, 3, 4};
  const Shape wider = shape.With(1, 7);
  EXPECT_EQ(wider, (Shape{2, 7, 4}));
  EXPECT_EQ(shape, (Shape{2, 3, 4}));  // the original is unchanged
  EXPECT_FALSE(shape == wider);
  EXPECT_FALSE((Shape{2, 3}) == (Shape{2, 3, 0}));  // rank matters, not only dims
}

TEST(ShapeTest, ToStringIsBracketed) {
  EXPECT_EQ(ToString(Shape{1, 8, 256, 128}), "[1, 8, 256, 128]");
  EXPECT_EQ(ToString(Shape{5}), "[5]");
}

TEST(ShapeTest, RejectsBadInputNamingTheValues) {
  ExpectThrowWith<ShapeError>(
      [] {
        Shape({1, 2, 3, 4, 5});
      },
      {"[Shape]", "rank 5 exceeds 4", "[1, 2, 3, 4, 5]"});
  ExpectThrowWith<ShapeError>([] { Shape({2, -3}); }, {"[Shape]", "dim 1 is negative: -3"});
  const Shape shape{2, 3};
  ExpectThrowWith<ShapeError>([&] { (void)shape.Dim(2); },
                              {"[Shape::Dim] axis 2 outside [0, 2) for shape [2, 3]"});
  ExpectThrowWith<ShapeError>([&] { (void)shape[-1]; }, {"[Shape::Dim] axis -1"});
  ExpectThrowWith<ShapeError>([&] { (void)shape.With(5, 1); }, {"[Shape::With] axis 5"});
  ExpectThrowWith<ShapeError>([&] { (void)shape.With(0, -1); },
                              {"[Shape::With] size -1 for axis 0 is negative"});
  EXPECT_EQ(shape, (Shape{2, 3}));
}

TEST(ShapeTest, RejectsElementCountOverflow) {
  constexpr std::int64_t kBig = std::int64_t{1} << 32;
  ExpectThrowWith<ShapeError>(
      [] {
        Shape({kBig, kBig});
      },
      {"[Shape] dims [4294967296, 4294967296] have more than 2^63 - 1"});
  const Shape shape{kBig, 1};
  EXPECT_EQ(shape.NumElements(), kBig);
  ExpectThrowWith<ShapeError>([&] { (void)shape.With(1, kBig); }, {"[Shape::With] dims"});
  EXPECT_EQ(shape.With(1, (std::int64_t{1} << 31) - 1).NumElements(), kBig * ((kBig >> 1) - 1));
}

TEST(ShapeTest, ErrorsAreRingkvErrors) { EXPECT_THROW(Shape({-1}), Error); }

}  // namespace
}  // namespace ringkv
