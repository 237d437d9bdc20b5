#include <fmt/format.h>
#include <gtest/gtest.h>

#include "lib_test_util.h"

namespace ringkv {
namespace {

TEST(FormatTest, DType) {
  EXPECT_EQ(fmt::format("{}", DType::kF32), "f32");
  EXPECT_EQ(fmt::format("{}", DType::kF16), "f16");
  EXPECT_EQ(fmt::format("{}", DType::kBF16), "bf16");
  // The string_view base parses format specs.
  EXPECT_EQ(fmt::format("[{:>5}]", DType::kBF16), "[ bf16]");
}

TEST(FormatTest, Shape) {
  EXPECT_EQ(fmt::format("{}", Shape{1, 8, 16, 64}), "[1, 8, 16, 64]");
  EXPECT_EQ(fmt::format("{}", Shape{}), "[]");
  EXPECT_EQ(fmt::format("{:<8}|", Shape{3}), "[3]     |");
}

TEST(FormatTest, ContiguousTensor) {
  const Tensor t = Tensor::Zeros(DType::kF16, {1, 8, 16, 64});
  EXPECT_EQ(fmt::format("{}", t),
            "Tensor(f16, [1, 8, 16, 64], strides [8192, 1024, 64, 1], contiguous)");
  EXPECT_EQ(Summary(t), fmt::format("{}", t));
}

TEST(FormatTest, StridedViewShowsOffset) {
  const Tensor t = Tensor::Zeros(DType::kF32, {3, 4});
  EXPECT_EQ(fmt::format("{}", t.Slice(1, 1, 3)),
            "Tensor(f32, [3, 2], strides [4, 1], offset 1, strided)");
  // A row slice of a contiguous tensor is still contiguous.
  EXPECT_EQ(fmt::format("{}", t.Slice(0, 2, 3)),
            "Tensor(f32, [1, 4], strides [4, 1], offset 8, contiguous)");
}

TEST(FormatTest, EmptyAndScalar) {
  EXPECT_EQ(fmt::format("{}", Tensor()), "Tensor(empty)");
  EXPECT_EQ(fmt::format("{}", Tensor::Zeros(DType::kBF16, {})),
            "Tensor(bf16, [], strides [], contiguous)");
}

}  // namespace
}  // namespace ringkv
