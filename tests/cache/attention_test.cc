// Attention entry points: ScaledDotProductAttention against a float64 reference,
// and parity of attention over cache histories with attention over the whole
// uncached sequence, at every step across wrap-around, for L = 1 and L > 1,
// with structural and array masks (the array masks exercise the ring gather).
#include "ringkv/attention.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "ringkv/error.h"
#include "ringkv/kv_cache.h"
#include "ringkv/rotating_kv_cache.h"

namespace ringkv {
namespace {

constexpr std::int64_t kHq = 4, kHkv = 2, kD = 16, kDv = 8;

Tensor Random(std::mt19937& rng, const Shape& shape, DType dtype = DType::kF32) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(static_cast<std::size_t>(shape.NumElements()));
  for (float& x : values) x = dist(rng);
  return Tensor::FromVector(values, shape, dtype);
}

// A deterministic bias for query position p and key position t; every 7th
// pair is hidden.
float Bias(std::int64_t p, std::int64_t t) {
  if ((p * 3 + t * 5) % 7 == 0 && t != p) return -std::numeric_limits<float>::infinity();
  return 0.25f *
         static_cast<float>(std::sin(0.7 * static_cast<double>(p) + 1.3 * static_cast<double>(t)));
}

// [1, 1, L, K] with Bias(first_query + i, first_key + j).
Tensor BiasArray(std::int64_t first_query, std::int64_t queries, std::int64_t first_key,
                 std::int64_t keys) {
  std::vector<float> values;
  for (std::int64_t i = 0; i < queries; ++i) {
    for (std::int64_t j = 0; j < keys; ++j) values.push_back(Bias(first_query + i, first_key + j));
  }
  return Tensor::FromVector(values, {1, 1, queries, keys});
}

// out = softmax(scale q k^T + mask) v in float64; mask as an [L, T] additive
// array; query i sits at position T - L + i.
std::vector<double> ReferenceSdpa(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const std::vector<double>& mask, double scale) {
  const std::vector<float> qv = q.ToVector(), kv = k.ToVector(), vv = v.ToVector();
  const std::int64_t hq = q.Dim(1), l = q.Dim(2), d = q.Dim(3), hkv = k.Dim(1), t = k.Dim(2),
                     dv = v.Dim(3);
  std::vector<double> out(static_cast<std::size_t>(hq * l * dv), 0.0);
  for (std::int64_t h = 0; h < hq; ++h) {
    const std::int64_t g = h / (hq / hkv);
    for (std::int64_t i = 0; i < l; ++i) {
      std::vector<double> s(static_cast<std::size_t>(t));
      double m = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < t; ++j) {
        double dot = 0;
        for (std::int64_t x = 0; x < d; ++x) {
          dot += static_cast<double>(qv[static_cast<std::size_t>((h * l + i) * d + x)]) *
                 static_cast<double>(kv[static_cast<std::size_t>((g * t + j) * d + x)]);
        }
        s[static_cast<std::size_t>(j)] = dot * scale + mask[static_cast<std::size_t>(i * t + j)];
        m = std::max(m, s[static_cast<std::size_t>(j)]);
      }
      if (std::isinf(m)) continue;
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - m));
      for (std::int64_t j = 0; j < t; ++j) {
        for (std::int64_t x = 0; x < dv; ++x) {
          out[static_cast<std::size_t>((h * l + i) * dv + x)] +=
              s[static_cast<std::size_t>(j)] / sum *
              static_cast<double>(vv[static_cast<std::size_t>((g * t + j) * dv + x)]);
        }
      }
    }
  }
  return out;
}

std::vector<double> StructuralMask(std::int64_t l, std::int64_t t, std::int64_t window) {
  // window 0: causal; window < 0: none.
  std::vector<double> mask(static_cast<std::size_t>(l * t), 0.0);
  for (std::int64_t i = 0; i < l; ++i) {
    const std::int64_t p = t - l + i;
    for (std::int64_t j = 0; j < t; ++j) {
      const bool hidden = window >= 0 && (j > p || (window > 0 && j <= p - window));
      if (hidden) mask[static_cast<std::size_t>(i * t + j)] = -INFINITY;
    }
  }
  return mask;
}

void ExpectClose(const Tensor& actual, const std::vector<double>& expected, double tol) {
  const std::vector<float> a = actual.ToVector();
  ASSERT_EQ(a.size(), expected.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(static_cast<double>(a[i]), expected[i], tol) << "element " << i;
  }
}

void ExpectClose(const Tensor& actual, const Tensor& expected, double tol) {
  const std::vector<float> e = expected.ToVector();
  ExpectClose(actual, std::vector<double>(e.begin(), e.end()), tol);
}

class AttentionTest : public ::testing::Test {
 protected:
  Context ctx_{1};
  std::mt19937 rng_{2024};
  float scale_ = 1.0f / std::sqrt(static_cast<float>(kD));
};

TEST_F(AttentionTest, SdpaMatchesTheFloat64Reference) {
  const Tensor k = Random(rng_, {1, kHkv, 13, kD});
  const Tensor v = Random(rng_, {1, kHkv, 13, kDv});
  for (std::int64_t l : {1, 5}) {
    const Tensor q = Random(rng_, {1, kHq, l, kD});
    ExpectClose(ScaledDotProductAttention(q, k, v, AttentionMask::Zero(), scale_, ctx_),
                ReferenceSdpa(q, k, v, StructuralMask(l, 13, -1), scale_), 1e-5);
    ExpectClose(ScaledDotProductAttention(q, k, v, AttentionMask::Causal(), scale_, ctx_),
                ReferenceSdpa(q, k, v, StructuralMask(l, 13, 0), scale_), 1e-5);
    ExpectClose(ScaledDotProductAttention(q, k, v, AttentionMask::SlidingWindow(4), scale_, ctx_),
                ReferenceSdpa(q, k, v, StructuralMask(l, 13, 4), scale_), 1e-5);
    std::vector<double> mask = StructuralMask(l, 13, 0);
    for (std::int64_t i = 0; i < l; ++i) {
      for (std::int64_t j = 0; j < 13; ++j) {
        mask[static_cast<std::size_t>(i * 13 + j)] += static_cast<double>(Bias(13 - l + i, j));
      }
    }
    const AttentionMask array =
        AttentionMask::Causal().Intersect(AttentionMask::Additive(BiasArray(13 - l, l, 0, 13)));
    ExpectClose(ScaledDotProductAttention(q, k, v, array, scale_, ctx_),
                ReferenceSdpa(q, k, v, mask, scale_), 1e-5);
  }
}

TEST_F(AttentionTest, SdpaRejectsBadInput) {
  const Tensor k = Random(rng_, {1, kHkv, 6, kD});
  const Tensor v = Random(rng_, {1, kHkv, 6, kDv});
  using ::testing::HasSubstr;
  const auto expect_error = [&](const Tensor& q, const Tensor& kk, const Tensor& vv,
                                const AttentionMask& mask, const char* what) {
    try {
      ScaledDotProductAttention(q, kk, vv, mask, scale_, ctx_);
      ADD_FAILURE() << "no error: " << what;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(what));
    }
  };
  expect_error(Random(rng_, {1, kHq, 1, 8}), k, v, {},
               "[ScaledDotProductAttention] q dim 3 (head dim) is 8, but the keys have 16");
  expect_error(Random(rng_, {1, 3, 1, kD}), k, v, {}, "q dim 1 (heads) is 3, not a multiple of 2");
  expect_error(Random(rng_, {2, kHq, 1, kD}), k, v, {}, "q dim 0 (batch) is 2");
  expect_error(Random(rng_, {1, kHq, 1, kD}), k, v.AsType(DType::kF16), {},
               "k dtype f32 != v dtype f16");
  expect_error(Random(rng_, {1, kHq, 7, kD}), k, v, AttentionMask::Causal(),
               "a causal mask needs L <= K, but L is 7 and K is 6");
  expect_error(Random(rng_, {1, kHq, 2, kD}), k, v,
               AttentionMask::Additive(Tensor::Zeros(DType::kF32, {1, 1, 2, 5})),
               "mask shape [1, 1, 2, 5] does not fit 2 queries over 6 keys");
}

TEST_F(AttentionTest, KVCacheParityWithCausal) {
  const std::int64_t total = 40;
  const Tensor keys = Random(rng_, {1, kHkv, total, kD}, DType::kF16);
  const Tensor values = Random(rng_, {1, kHkv, total, kDv}, DType::kF16);
  KVCache cache(3);
  std::int64_t offset = 0;
  for (std::int64_t l : {1, 1, 4, 1, 7, 1, 1, 2, 9, 1, 1, 11}) {
    const KVHistory history =
        cache.Update(keys.Slice(2, offset, offset + l), values.Slice(2, offset, offset + l));
    offset += l;
    const Tensor q = Random(rng_, {1, kHq, l, kD});
    const Tensor full =
        ScaledDotProductAttention(q, keys.Slice(2, 0, offset), values.Slice(2, 0, offset),
                                  AttentionMask::Causal(), scale_, ctx_);
    ExpectClose(Attention(q, history, AttentionMask::Causal(), scale_, ctx_), full, 1e-5);
    ExpectClose(full,
                ReferenceSdpa(q, keys.Slice(2, 0, offset), values.Slice(2, 0, offset),
                              StructuralMask(l, offset, 0), scale_),
                2e-5);
  }
}

// The rotating cache at every step: decodes and prefills interleaved so the
// ring wraps several times; both a causal and an array logical mask.
TEST_F(AttentionTest, RotatingParityWithSlidingWindow) {
  for (int max_size : {1, 3, 5, 8}) {
    for (bool array_mask : {false, true}) {
      const std::int64_t total = 80;
      const Tensor keys = Random(rng_, {1, kHkv, total, kD});
      const Tensor values = Random(rng_, {1, kHkv, total, kDv});
      RotatingKVCache cache(max_size, 2);
      std::int64_t offset = 0;
      for (std::int64_t l : {1, 1, 1, 1, 1, 1, 1, 3, 1, 1, 1, 1, 1, 1, 1, 6, 1, 1, 1, 1, 1,
                             1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 9, 1, 1, 1, 1, 1, 1, 1, 1}) {
        SCOPED_TRACE(testing::Message() << "max " << max_size << " array " << array_mask
                                        << " offset " << offset << " L " << l);
        const KVHistory history =
            cache.Update(keys.Slice(2, offset, offset + l), values.Slice(2, offset, offset + l));
        offset += l;
        const Tensor q = Random(rng_, {1, kHq, l, kD});
        const std::int64_t k = history.Kv().Length();
        AttentionMask logical = AttentionMask::Causal();
        AttentionMask whole = AttentionMask::SlidingWindow(max_size);
        if (array_mask) {
          // Logical key j of the history is absolute position offset - K + j.
          logical =
              logical.Intersect(AttentionMask::Additive(BiasArray(offset - l, l, offset - k, k)));
          whole = whole.Intersect(AttentionMask::Additive(BiasArray(offset - l, l, 0, offset)));
        }
        const Tensor expected = ScaledDotProductAttention(
            q, keys.Slice(2, 0, offset), values.Slice(2, 0, offset), whole, scale_, ctx_);
        ExpectClose(Attention(q, history, logical, scale_, ctx_), expected, 1e-5);
      }
    }
  }
}

TEST_F(AttentionTest, RingGatherPutsLogicalColumnsIntoSlots) {
  RotatingKVCache cache(4, 2);
  const Tensor keys = Random(rng_, {1, kHkv, 6, kD});
  const Tensor values = Random(rng_, {1, kHkv, 6, kDv});
  KVHistory history;
  for (std::int64_t p = 0; p < 6; ++p) {
    history = cache.Update(keys.Slice(2, p, p + 1), values.Slice(2, p, p + 1));
  }
  // Slots hold positions [4, 5, 2, 3]; logical columns are positions [2, 3, 4, 5].
  const AttentionMask logical =
      AttentionMask::Additive(Tensor::FromVector(std::vector<float>{2, 3, 4, 5}, {1, 1, 1, 4}));
  const AttentionMask stored = history.ApplyMask(logical, ctx_.Kernels());
  EXPECT_EQ(stored.Array().ToVector(), (std::vector<float>{4, 5, 2, 3}));
  EXPECT_TRUE(history.ApplyMask(AttentionMask::Causal(), ctx_.Kernels()).IsZero());
  EXPECT_TRUE(history.ApplyMask(AttentionMask::Zero(), ctx_.Kernels()).IsZero());
}

TEST(AttentionMaskTest, IntersectAndAsArray) {
  const AttentionMask causal = AttentionMask::Causal();
  EXPECT_TRUE(causal.IsCausal());
  EXPECT_FALSE(causal.IsZero());
  EXPECT_TRUE(AttentionMask::Zero().Intersect(AttentionMask::Zero()).IsZero());
  const AttentionMask sw = causal.Intersect(AttentionMask::SlidingWindow(3));
  EXPECT_EQ(sw.StructuralKind(), AttentionMask::Kind::kSlidingWindow);
  EXPECT_EQ(sw.Window(), 3);
  EXPECT_EQ(sw.Intersect(AttentionMask::SlidingWindow(2)).Window(), 2);
  // 2 queries over 4 keys: query 0 at position 2, query 1 at position 3.
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(causal.AsArray(2, 4).ToVector(), (std::vector<float>{0, 0, 0, -inf, 0, 0, 0, 0}));
  EXPECT_EQ(AttentionMask::SlidingWindow(2).AsArray(2, 4).ToVector(),
            (std::vector<float>{-inf, 0, 0, -inf, -inf, -inf, 0, 0}));
  const AttentionMask boolean =
      AttentionMask::Boolean(Tensor::FromVector(std::vector<float>{1, 0, 1, 1}, {1, 1, 1, 4}));
  EXPECT_EQ(boolean.Intersect(causal).AsArray(2, 4).ToVector(),
            (std::vector<float>{0, -inf, 0, -inf, 0, -inf, 0, 0}));
  const AttentionMask sum =
      AttentionMask::Additive(Tensor::FromVector(std::vector<float>{1, 2}, {1, 1, 2, 1}))
          .Intersect(boolean);
  EXPECT_EQ(sum.AsArray(2, 4).ToVector(), (std::vector<float>{1, -inf, 1, 1, 2, -inf, 2, 2}));
  EXPECT_THROW(AttentionMask::SlidingWindow(0), Error);
  EXPECT_THROW(AttentionMask::Additive(Tensor::Zeros(DType::kF32, {1, 4})), Error);
}

}  // namespace
}  // namespace ringkv
