// The caller-output overloads of Attention and ScaledDotProductAttention: out of
// any strides (views with gaps), q that needs converting, a caller's executor,
// and the errors (out keeps its values when the call throws).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "attention_test_util.h"
#include "ringkv/attention.h"
#include "ringkv/error.h"
#include "ringkv/kernels/thread_pool.h"
#include "ringkv/kv_cache.h"
#include "support/own_threads_executor.h"

namespace ringkv {
namespace {

using test::Bits;
using test::ExpectRejected;

constexpr std::int64_t kHq = 4, kHkv = 2, kD = 16, kDv = 8;

Tensor Random(std::mt19937& rng, const Shape& shape, DType dtype = DType::kF32) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(static_cast<std::size_t>(shape.NumElements()));
  for (float& x : values) x = dist(rng);
  return Tensor::FromVector(values, shape, dtype);
}

// Every element of the tensor's storage buffer, gaps included, as raw bits.
std::vector<std::uint32_t> StorageBits(const Tensor& base) {
  std::vector<std::uint32_t> bits(static_cast<std::size_t>(base.NumElements()));
  std::memcpy(bits.data(), base.Data(), bits.size() * sizeof(float));
  return bits;
}

// A [1, kHq, l, kDv] view with gaps on every axis but the innermost, inside a
// buffer filled with a sentinel.
struct GappyOut {
  explicit GappyOut(std::int64_t l)
      : base(Tensor::FromVector(
            std::vector<float>(static_cast<std::size_t>(2 * (kHq + 2) * (l + 3) * (kDv + 5)),
                               kSentinel),
            {2, kHq + 2, l + 3, kDv + 5})),
        view(base.Slice(0, 1, 2).Slice(1, 1, 1 + kHq).Slice(2, 2, 2 + l).Slice(3, 3, 3 + kDv)) {}
  static constexpr float kSentinel = 12345.5f;
  Tensor base;
  Tensor view;
};

class AttentionOutTest : public ::testing::Test {
 protected:
  AttentionOutTest() : cache_(/*block_tokens=*/4) {
    // 11 keys over 3 blocks, f16 storage.
    history_ = cache_.Update(Random(rng_, {1, kHkv, 11, kD}, DType::kF16),
                             Random(rng_, {1, kHkv, 11, kDv}, DType::kF16));
  }
  std::mt19937 rng_{7};
  KVCache cache_;
  KVHistory history_;
};

TEST_F(AttentionOutTest, GappyOutEqualsTheReturningOverloadAndLeavesTheGapsAlone) {
  Context ctx(2);
  for (const std::int64_t l : {1, 3}) {
    const Tensor q = Random(rng_, {1, kHq, l, kD});
    const Tensor expected = Attention(q, history_, AttentionMask::Causal(), 0.25f, ctx);
    GappyOut out(l);
    const std::vector<std::uint32_t> before = StorageBits(out.base);
    Attention(q, history_, AttentionMask::Causal(), 0.25f, ctx, out.view);
    EXPECT_EQ(Bits(out.view), Bits(expected)) << "l " << l;
    // Every element outside the view keeps the sentinel.
    const std::vector<std::uint32_t> after = StorageBits(out.base);
    std::vector<float> in_view(static_cast<std::size_t>(out.base.NumElements()), 0.0f);
    const std::int64_t sh = out.base.Stride(1), sl = out.base.Stride(2), s0 = out.base.Stride(0);
    for (std::int64_t h = 0; h < kHq; ++h) {
      for (std::int64_t i = 0; i < l; ++i) {
        for (std::int64_t c = 0; c < kDv; ++c) {
          in_view[static_cast<std::size_t>(s0 + (h + 1) * sh + (i + 2) * sl + c + 3)] = 1.0f;
        }
      }
    }
    int changed_outside = 0;
    for (std::size_t e = 0; e < after.size(); ++e) {
      if (in_view[e] == 0.0f && after[e] != before[e]) ++changed_outside;
    }
    EXPECT_EQ(changed_outside, 0) << "l " << l;
  }
}

TEST_F(AttentionOutTest, StridedAndConvertedQueriesGiveTheSameBits) {
  Context ctx(1);
  const Tensor q = Random(rng_, {1, kHq, 2, kD});
  // q as a view with gaps (read in place) and as bf16 (converted into the arena).
  Tensor wide = Tensor::Zeros(DType::kF32, {1, kHq + 1, 5, kD + 16});
  const Tensor q_view = wide.Slice(1, 1, 1 + kHq).Slice(2, 1, 3).Slice(3, 16, 16 + kD);
  {
    // Fill the view through a contiguous copy of the same values.
    const std::vector<float> values = q.ToVector();
    auto* data = static_cast<float*>(wide.MutableData());
    for (std::int64_t h = 0; h < kHq; ++h) {
      for (std::int64_t i = 0; i < 2; ++i) {
        for (std::int64_t c = 0; c < kD; ++c) {
          data[(h + 1) * wide.Stride(1) + (i + 1) * wide.Stride(2) + 16 + c] =
              values[static_cast<std::size_t>((h * 2 + i) * kD + c)];
        }
      }
    }
  }
  ASSERT_EQ(q_view.ToVector(), q.ToVector());
  const Tensor expected = Attention(q, history_, AttentionMask::Causal(), 0.25f, ctx);
  Tensor out = Tensor::Zeros(DType::kF32, {1, kHq, 2, kDv});
  Attention(q_view, history_, AttentionMask::Causal(), 0.25f, ctx, out);
  EXPECT_EQ(Bits(out), Bits(expected));

  const Tensor q16 = q.AsType(DType::kBF16);
  const Tensor expected16 =
      Attention(q16.AsType(DType::kF32), history_, AttentionMask::Causal(), 0.25f, ctx);
  Attention(q16, history_, AttentionMask::Causal(), 0.25f, ctx, out);
  EXPECT_EQ(Bits(out), Bits(expected16));
}

TEST_F(AttentionOutTest, ScaledDotProductAttentionIntoAGappyOut) {
  Context ctx(2);
  const Tensor q = Random(rng_, {1, kHq, 3, kD});
  const Tensor k = Random(rng_, {1, kHkv, 9, kD});
  const Tensor v = Random(rng_, {1, kHkv, 9, kDv});
  const Tensor expected =
      ScaledDotProductAttention(q, k, v, AttentionMask::SlidingWindow(4), 0.5f, ctx);
  GappyOut out(3);
  ScaledDotProductAttention(q, k, v, AttentionMask::SlidingWindow(4), 0.5f, ctx, out.view);
  EXPECT_EQ(Bits(out.view), Bits(expected));
}

using CountingExecutor = test::OwnThreadsExecutor<3>;

TEST_F(AttentionOutTest, ACallersExecutorGetsTheWorkAndGivesTheSameBits) {
  CountingExecutor executor;
  Context theirs(executor);
  Context ours(executor.Concurrency());
  EXPECT_EQ(theirs.Threads(), executor.Concurrency());
  EXPECT_EQ(&theirs.GetExecutor(), &executor);
  for (const std::int64_t l : {1, 4}) {
    const Tensor q = Random(rng_, {1, kHq, l, kD});
    const Tensor expected = Attention(q, history_, AttentionMask::Causal(), 0.25f, ours);
    const int runs_before = executor.runs;
    Tensor out = Tensor::Zeros(DType::kF32, {1, kHq, l, kDv});
    Attention(q, history_, AttentionMask::Causal(), 0.25f, theirs, out);
    EXPECT_EQ(Bits(out), Bits(expected)) << "l " << l;
    EXPECT_GE(executor.runs - runs_before, 1) << "l " << l;
  }
  EXPECT_GT(executor.tasks_run, 0);
  EXPECT_EQ(executor.on_caller, 0);  // every task ran on the executor's threads
}

TEST_F(AttentionOutTest, ABadOutThrowsAndStaysUnchanged) {
  Context ctx(1);
  const Tensor q = Random(rng_, {1, kHq, 2, kD});
  const auto attend = [&](Tensor& out) {
    Attention(q, history_, AttentionMask::Causal(), 0.25f, ctx, out);
  };
  Tensor wrong_shape = Random(rng_, {1, kHq, 3, kDv});
  ExpectRejected([&] { attend(wrong_shape); }, wrong_shape,
                 {"[Attention] out has shape [1, 4, 3, 8], expected [1, 4, 2, 8]"});
  Tensor wrong_rank = Random(rng_, {kHq, 2, kDv});
  ExpectRejected([&] { attend(wrong_rank); }, wrong_rank, {"[Attention] out has shape [4, 2, 8]"});
  Tensor wrong_dtype = Random(rng_, {1, kHq, 2, kDv}, DType::kF16);
  ExpectRejected([&] { attend(wrong_dtype); }, wrong_dtype,
                 {"[Attention] out has dtype f16, expected f32"});
  Tensor empty;
  ExpectRejected([&] { attend(empty); }, empty, {"[Attention] out is empty"});
  const std::vector<float> constant(static_cast<std::size_t>(kHq * 2 * kDv), 1.5f);
  Tensor read_only = Tensor::Borrow(constant.data(), DType::kF32, {1, kHq, 2, kDv});
  ExpectRejected([&] { attend(read_only); }, read_only,
                 {"[Attention] out (shape [1, 4, 2, 8]) is read-only"});
}

// An engine's own row-major [L, Hq, Dv] buffer, borrowed and permuted to
// [1, Hq, L, Dv]: attention writes each head's rows where the engine reads them.
TEST_F(AttentionOutTest, APermutedBorrowOfTheEnginesBufferGetsTheSameBits) {
  Context ctx(1);
  constexpr std::int64_t kL = 3;
  const Tensor q = Random(rng_, {1, kHq, kL, kD});
  const Tensor expected = Attention(q, history_, AttentionMask::Causal(), 0.25f, ctx);
  std::vector<float> engine(static_cast<std::size_t>(kL * kHq * kDv), -1.0f);
  Tensor out =
      Tensor::Borrow(engine.data(), DType::kF32, {kL, kHq, kDv}).Permute({1, 0, 2}).Unsqueeze(0);
  Attention(q, history_, AttentionMask::Causal(), 0.25f, ctx, out);
  const std::vector<float> want = expected.ToVector();  // [1, Hq, L, Dv] row-major
  for (std::int64_t l = 0; l < kL; ++l) {
    for (std::int64_t h = 0; h < kHq; ++h) {
      for (std::int64_t d = 0; d < kDv; ++d) {
        EXPECT_EQ(engine[static_cast<std::size_t>((l * kHq + h) * kDv + d)],
                  want[static_cast<std::size_t>((h * kL + l) * kDv + d)])
            << "l " << l << " h " << h << " d " << d;
      }
    }
  }
}

TEST_F(AttentionOutTest, AnOutThatOverlapsItsInputsIsRejected) {
  Context ctx(1);
  // q and out in one buffer: out = q's storage.
  Tensor shared = Random(rng_, {1, kHq, 2, kD});
  const Tensor q = shared;
  Tensor out_in_q = shared.Slice(3, 0, kDv);
  ExpectRejected([&] { Attention(q, history_, AttentionMask::Causal(), 0.25f, ctx, out_in_q); },
                 out_in_q, {"[Attention] out (shape [1, 4, 2, 8]) overlaps q"});

  // out as a view of the cache's own blocks (kHq == kHkv, Dv == D here).
  KVCache cache(4);
  const KVHistory history = cache.Update(Random(rng_, {1, 2, 6, 8}), Random(rng_, {1, 2, 6, 8}));
  const std::vector<float> stored = history.Kv().ConcatKeys().ToVector();
  Tensor block = history.Kv().KeySegments().front().Slice(2, 0, 2);
  const Tensor q2 = Random(rng_, {1, 2, 2, 8});
  ExpectRejected([&] { Attention(q2, history, AttentionMask::Causal(), 0.25f, ctx, block); }, block,
                 {"[Attention] out (shape [1, 2, 2, 8]) overlaps the keys or values"});
  EXPECT_EQ(cache.State().ConcatKeys().ToVector(), stored);
}

}  // namespace
}  // namespace ringkv
