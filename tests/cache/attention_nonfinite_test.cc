// NaN through attention over a RotatingKVCache on every kernel tier: the same
// logical input gives the same answer wherever the ring stores the NaN key. A
// NaN in key P makes exactly the rows whose window holds P NaN (for the query
// heads of that key's kv head); every other row is finite and equals attention
// over the whole uncached sequence (docs/kernels.md, "NaN and Inf").
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ringkv/attention.h"
#include "ringkv/rotating_kv_cache.h"

namespace ringkv {
namespace {

constexpr std::int64_t kHq = 4, kHkv = 2, kD = 16, kDv = 8, kWindow = 8, kTotal = 20;

Tensor Random(std::mt19937& rng, const Shape& shape) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(static_cast<std::size_t>(shape.NumElements()));
  for (float& x : values) x = dist(rng);
  return Tensor::FromVector(values, shape);
}

// Keys [1, Hkv, kTotal, D] with a NaN in element 5 of key nan_pos, kv head 0.
Tensor KeysWithNaN(std::mt19937& rng, std::int64_t nan_pos) {
  std::vector<float> k = Random(rng, {1, kHkv, kTotal, kD}).ToVector();
  k[static_cast<std::size_t>(nan_pos * kD + 5)] = std::numeric_limits<float>::quiet_NaN();
  return Tensor::FromVector(k, {1, kHkv, kTotal, kD});
}

class RingNaNTest : public ::testing::TestWithParam<kernels::Isa> {
 protected:
  // Checks out [1, Hq, L, Dv] for queries at positions first_query + i: heads 0
  // and 1 (kv head 0) NaN exactly where visible(p), the rest equal to `whole`.
  template <class Visible>
  void Expect(const Tensor& out, const Tensor& whole, std::int64_t first_query,
              Visible visible) const {
    const std::vector<float> got = out.ToVector();
    const std::vector<float> want = whole.ToVector();
    const std::int64_t l = out.Dim(2);
    for (std::int64_t h = 0; h < kHq; ++h) {
      for (std::int64_t i = 0; i < l; ++i) {
        const bool nan = h < 2 && visible(first_query + i);
        for (std::int64_t c = 0; c < kDv; ++c) {
          const auto n = static_cast<std::size_t>((h * l + i) * kDv + c);
          if (nan) {
            ASSERT_TRUE(std::isnan(got[n])) << "head " << h << " position " << first_query + i;
          } else {
            ASSERT_TRUE(std::isfinite(got[n])) << "head " << h << " position " << first_query + i;
            // Two f32 computations of the same thing: measured <= 3.6e-7 apart.
            ASSERT_NEAR(got[n], want[n], 1e-6) << "head " << h << " position " << first_query + i;
          }
        }
      }
    }
  }
};

// Decode one token at a time through two wraps, the NaN key at every ring slot.
TEST_P(RingNaNTest, DecodeNaNKeyAtEverySlot) {
  Context ctx(1, GetParam());
  std::mt19937 rng(99);
  for (std::int64_t nan_pos = 0; nan_pos < 12; ++nan_pos) {
    SCOPED_TRACE(testing::Message() << "NaN key at position " << nan_pos);
    const Tensor keys = KeysWithNaN(rng, nan_pos);
    const Tensor values = Random(rng, {1, kHkv, kTotal, kDv});
    RotatingKVCache cache(static_cast<int>(kWindow), 3);
    for (std::int64_t p = 0; p < kTotal; ++p) {
      const KVHistory history = cache.Update(keys.Slice(2, p, p + 1), values.Slice(2, p, p + 1));
      const Tensor q = Random(rng, {1, kHq, 1, kD});
      const Tensor out = Attention(q, history, AttentionMask::Causal(), 0.25f, ctx);
      const Tensor whole =
          ScaledDotProductAttention(q, keys.Slice(2, 0, p + 1), values.Slice(2, 0, p + 1),
                                    AttentionMask::SlidingWindow(kWindow), 0.25f, ctx);
      Expect(out, whole, p,
             [&](std::int64_t pos) { return nan_pos <= pos && nan_pos > pos - kWindow; });
    }
  }
}

// A prefill after the ring wrapped (positions 10-15, zero model mask): the
// window hides only keys older than it, so rows see later keys too.
TEST_P(RingNaNTest, PrefillAfterWrapNaNKey) {
  Context ctx(1, GetParam());
  std::mt19937 rng(7);
  for (std::int64_t nan_pos = 2; nan_pos < 16; ++nan_pos) {
    SCOPED_TRACE(testing::Message() << "NaN key at position " << nan_pos);
    const Tensor keys = KeysWithNaN(rng, nan_pos);
    const Tensor values = Random(rng, {1, kHkv, kTotal, kDv});
    RotatingKVCache cache(static_cast<int>(kWindow), 3);
    for (std::int64_t p = 0; p < 10; ++p) {
      cache.Update(keys.Slice(2, p, p + 1), values.Slice(2, p, p + 1));
    }
    const KVHistory history = cache.Update(keys.Slice(2, 10, 16), values.Slice(2, 10, 16));
    const Tensor q = Random(rng, {1, kHq, 6, kD});
    const Tensor out = Attention(q, history, AttentionMask::Zero(), 0.25f, ctx);
    const Tensor whole = ScaledDotProductAttention(q, keys.Slice(2, 0, 16), values.Slice(2, 0, 16),
                                                   AttentionMask::WindowOnly(kWindow), 0.25f, ctx);
    Expect(out, whole, 10, [&](std::int64_t pos) { return nan_pos > pos - kWindow; });
  }
}

std::string TierName(const ::testing::TestParamInfo<kernels::Isa>& info) {
  std::string name;
  for (char c : kernels::IsaName(info.param)) {
    name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllIsas, RingNaNTest, ::testing::ValuesIn(kernels::AvailableIsas()),
                         TierName);

}  // namespace
}  // namespace ringkv
