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

#include "context_access.h"
#include "kv_access.h"
#include "ringkv/error.h"
#include "ringkv/kv_cache.h"
#include "ringkv/rotating_kv_cache.h"
#include "ringkv/speculation.h"

namespace ringkv {
namespace {

constexpr std::int64_t kHq = 4, kHkv = 2, kD = 16, kDv = 8;
// Against the float64 reference: the window and relax tests measured <= 3.8e-7
// max abs error (the older tests here keep their 1e-5).
constexpr double kNewTol = 1e-6;

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

// An [L, T] additive mask for the last L of T positions: 0 where visible(p, t)
// for query position p = T - L + i and key position t, else -inf.
template <class Visible>
std::vector<double> VisibilityMask(std::int64_t l, std::int64_t t, Visible visible) {
  std::vector<double> mask(static_cast<std::size_t>(l * t), 0.0);
  for (std::int64_t i = 0; i < l; ++i) {
    for (std::int64_t j = 0; j < t; ++j) {
      if (!visible(t - l + i, j)) mask[static_cast<std::size_t>(i * t + j)] = -INFINITY;
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
  // Head dim 0 (issue 8): an error naming the shapes, not a kernel contract abort.
  const Tensor k0 = Tensor::Zeros(DType::kF32, {1, kHkv, 6, 0});
  expect_error(Tensor::Zeros(DType::kF32, {1, kHq, 1, 0}), k0, v, {},
               "[ScaledDotProductAttention] k shape [1, 2, 6, 0] / v shape [1, 2, 6, 8] has an "
               "empty axis");
  expect_error(Tensor::Zeros(DType::kF32, {1, kHq, 1, 0}), k0, v, AttentionMask::Causal(),
               "has an empty axis");
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

// Defect 1 of issue 8: a sliding-window layer must only hide keys older than its
// window; future keys stay as the model's mask says. With a zero model mask, a
// 6-token prefill into RotatingKVCache(4) lets rows 0-3 see every key (and rows
// 4, 5 the keys after p - 4), as a no-cache float64 computation does.
TEST_F(AttentionTest, ZeroMaskPrefillOnARingHidesOnlyOldKeys) {
  const std::int64_t window = 4;
  const auto in_window = [&](std::int64_t p, std::int64_t t) { return t > p - window; };
  const Tensor keys = Random(rng_, {1, kHkv, 12, kD});
  const Tensor values = Random(rng_, {1, kHkv, 12, kDv});
  RotatingKVCache cache(static_cast<int>(window), 2);
  const Tensor q = Random(rng_, {1, kHq, 6, kD});
  const KVHistory first = cache.Update(keys.Slice(2, 0, 6), values.Slice(2, 0, 6));
  ExpectClose(Attention(q, first, AttentionMask::Zero(), scale_, ctx_),
              ReferenceSdpa(q, keys.Slice(2, 0, 6), values.Slice(2, 0, 6),
                            VisibilityMask(6, 6, in_window), scale_),
              kNewTol);
  // After decodes that wrap the ring, a second prefill (positions 7-11): keys
  // older than the window are gone from the ring, the others stay visible.
  cache.Update(keys.Slice(2, 6, 7), values.Slice(2, 6, 7));
  const Tensor q2 = Random(rng_, {1, kHq, 5, kD});
  const KVHistory second = cache.Update(keys.Slice(2, 7, 12), values.Slice(2, 7, 12));
  ExpectClose(Attention(q2, second, AttentionMask::Zero(), scale_, ctx_),
              ReferenceSdpa(q2, keys, values, VisibilityMask(5, 12, in_window), scale_), kNewTol);
}

// The same through the speculative rotating wrapper (logical order, window applied).
TEST_F(AttentionTest, ZeroMaskDraftsOnARingHideOnlyOldKeys) {
  const std::int64_t window = 4;
  const auto in_window = [&](std::int64_t p, std::int64_t t) { return t > p - window; };
  const Tensor keys = Random(rng_, {1, kHkv, 11, kD});
  const Tensor values = Random(rng_, {1, kHkv, 11, kDv});
  RotatingKVCache cache(static_cast<int>(window), 2);
  for (std::int64_t p = 0; p < 6; ++p) {
    cache.Update(keys.Slice(2, p, p + 1), values.Slice(2, p, p + 1));
  }
  AttentionCache* caches[] = {&cache};
  Speculation spec = BeginSpeculation(caches);
  const KVHistory history = spec.Caches()[0]->Update(keys.Slice(2, 6, 11), values.Slice(2, 6, 11));
  const Tensor q = Random(rng_, {1, kHq, 5, kD});
  ExpectClose(Attention(q, history, AttentionMask::Zero(), scale_, ctx_),
              ReferenceSdpa(q, keys, values, VisibilityMask(5, 11, in_window), scale_), kNewTol);
}

// Relaxed cells (image tokens, a prefix-LM prompt) on a sliding layer: causality
// is lifted inside the rectangles, the window still applies, and the
// rectangles are absolute positions, also after the ring has wrapped.
TEST_F(AttentionTest, RelaxedCausalThroughTheRing) {
  const std::int64_t window = 4;
  const Tensor keys = Random(rng_, {1, kHkv, 14, kD});
  const Tensor values = Random(rng_, {1, kHkv, 14, kDv});
  RotatingKVCache cache(static_cast<int>(window), 2);
  // Positions 0-5 in one prefill, image span [1, 4).
  const AttentionMask first_mask = AttentionMask::Causal().Relax(1, 4, 1, 4);
  const auto first_visible = [&](std::int64_t p, std::int64_t t) {
    const bool relaxed = p >= 1 && p < 4 && t >= 1 && t < 4;
    return t > p - window && (t <= p || relaxed);
  };
  const Tensor q = Random(rng_, {1, kHq, 6, kD});
  const KVHistory first = cache.Update(keys.Slice(2, 0, 6), values.Slice(2, 0, 6));
  ExpectClose(Attention(q, first, first_mask, scale_, ctx_),
              ReferenceSdpa(q, keys.Slice(2, 0, 6), values.Slice(2, 0, 6),
                            VisibilityMask(6, 6, first_visible), scale_),
              kNewTol);
  // A decode (L == 1) with a relaxed mask: not plain causal, so it is
  // materialised and gathered into ring order; at L == 1 nothing is hidden.
  const Tensor q1 = Random(rng_, {1, kHq, 1, kD});
  const KVHistory step = cache.Update(keys.Slice(2, 6, 7), values.Slice(2, 6, 7));
  ExpectClose(
      Attention(q1, step, AttentionMask::Causal().Relax(5, 8, 5, 8), scale_, ctx_),
      ReferenceSdpa(q1, keys.Slice(2, 0, 7), values.Slice(2, 0, 7),
                    VisibilityMask(1, 7, [&](auto p, auto t) { return t > p - window; }), scale_),
      kNewTol);
  // After the wrap, positions 7-11 with span [8, 11): the history's oldest key
  // is position 4, so the rectangle must be placed by absolute position.
  const AttentionMask second_mask = AttentionMask::Causal().Relax(8, 11, 8, 11);
  const auto second_visible = [&](std::int64_t p, std::int64_t t) {
    const bool relaxed = p >= 8 && p < 11 && t >= 8 && t < 11;
    return t > p - window && (t <= p || relaxed);
  };
  const Tensor q2 = Random(rng_, {1, kHq, 5, kD});
  const KVHistory second = cache.Update(keys.Slice(2, 7, 12), values.Slice(2, 7, 12));
  ExpectClose(Attention(q2, second, second_mask, scale_, ctx_),
              ReferenceSdpa(q2, keys.Slice(2, 0, 12), values.Slice(2, 0, 12),
                            VisibilityMask(5, 12, second_visible), scale_),
              kNewTol);
  // The same drafted through the speculative wrapper: positions 12-13, span [12, 14).
  AttentionCache* caches[] = {&cache};
  Speculation spec = BeginSpeculation(caches);
  const KVHistory drafts = spec.Caches()[0]->Update(keys.Slice(2, 12, 14), values.Slice(2, 12, 14));
  const auto draft_visible = [&](std::int64_t p, std::int64_t t) {
    return t > p - window && (t <= p || t >= 12);
  };
  const Tensor q3 = Random(rng_, {1, kHq, 2, kD});
  ExpectClose(Attention(q3, drafts, AttentionMask::Causal().Relax(12, 14, 12, 14), scale_, ctx_),
              ReferenceSdpa(q3, keys, values, VisibilityMask(2, 14, draft_visible), scale_),
              kNewTol);
}

TEST_F(AttentionTest, RelaxedCausalWithoutACache) {
  const Tensor k = Random(rng_, {1, kHkv, 9, kD});
  const Tensor v = Random(rng_, {1, kHkv, 9, kDv});
  const Tensor q = Random(rng_, {1, kHq, 9, kD});
  // A prefix-LM prompt [0, 4) plus an image span [6, 8): a union of two rectangles.
  const AttentionMask mask = AttentionMask::Causal().Relax(0, 4, 0, 4).Relax(6, 8, 6, 8);
  const auto visible = [](std::int64_t p, std::int64_t t) {
    return t <= p || (p < 4 && t < 4) || (p >= 6 && p < 8 && t >= 6 && t < 8);
  };
  ExpectClose(ScaledDotProductAttention(q, k, v, mask, scale_, ctx_),
              ReferenceSdpa(q, k, v, VisibilityMask(9, 9, visible), scale_), kNewTol);
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
  const AttentionMask stored =
      detail::KvAccess::ApplyMask(history, logical, detail::ContextAccess::Kernels(ctx_));
  EXPECT_EQ(stored.Array().ToVector(), (std::vector<float>{4, 5, 2, 3}));
  EXPECT_TRUE(detail::KvAccess::ApplyMask(history, AttentionMask::Causal(),
                                          detail::ContextAccess::Kernels(ctx_))
                  .IsZero());
  EXPECT_TRUE(detail::KvAccess::ApplyMask(history, AttentionMask::Zero(),
                                          detail::ContextAccess::Kernels(ctx_))
                  .IsZero());
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

TEST(AttentionMaskTest, WindowOnlyHidesOnlyOldKeys) {
  const float inf = std::numeric_limits<float>::infinity();
  const AttentionMask window = AttentionMask::WindowOnly(2);
  EXPECT_EQ(window.StructuralKind(), AttentionMask::Kind::kWindow);
  EXPECT_FALSE(window.IsZero());
  EXPECT_FALSE(window.IsCausal());
  // 2 queries over 4 keys: query 0 at position 2 sees keys > 0, query 1 keys > 1.
  EXPECT_EQ(window.AsArray(2, 4).ToVector(), (std::vector<float>{-inf, 0, 0, 0, -inf, -inf, 0, 0}));
  // causal ∩ window-only = sliding window, in either order.
  for (const AttentionMask& sw :
       {AttentionMask::Causal().Intersect(AttentionMask::WindowOnly(3)),
        AttentionMask::WindowOnly(3).Intersect(AttentionMask::Causal())}) {
    EXPECT_EQ(sw.StructuralKind(), AttentionMask::Kind::kSlidingWindow);
    EXPECT_EQ(sw.Window(), 3);
  }
  // Two windows -> the smaller; a zero mask changes nothing.
  const AttentionMask smaller = AttentionMask::WindowOnly(5).Intersect(window);
  EXPECT_EQ(smaller.StructuralKind(), AttentionMask::Kind::kWindow);
  EXPECT_EQ(smaller.Window(), 2);
  const AttentionMask same = window.Intersect(AttentionMask::Zero());
  EXPECT_EQ(same.StructuralKind(), AttentionMask::Kind::kWindow);
  EXPECT_EQ(same.Window(), 2);
  const AttentionMask sliding =
      AttentionMask::SlidingWindow(4).Intersect(AttentionMask::WindowOnly(6));
  EXPECT_EQ(sliding.StructuralKind(), AttentionMask::Kind::kSlidingWindow);
  EXPECT_EQ(sliding.Window(), 4);
  // Arrays keep summing.
  const AttentionMask with_array = window.Intersect(
      AttentionMask::Additive(Tensor::FromVector(std::vector<float>{1, 2}, {1, 1, 2, 1})));
  EXPECT_EQ(with_array.StructuralKind(), AttentionMask::Kind::kWindow);
  EXPECT_EQ(with_array.AsArray(2, 4).ToVector(),
            (std::vector<float>{-inf, 1, 1, 1, -inf, -inf, 2, 2}));
  EXPECT_THROW(AttentionMask::WindowOnly(0), Error);
}

TEST(AttentionMaskTest, RelaxDropsRectanglesThatFreeNothing) {
  const AttentionMask causal = AttentionMask::Causal();
  EXPECT_TRUE(causal.Relax(2, 2, 0, 5).IsCausal());  // no query
  EXPECT_TRUE(causal.Relax(0, 3, 4, 1).IsCausal());  // no key
  EXPECT_TRUE(causal.Relax(3, 5, 0, 4).IsCausal());  // keys <= 3 <= every query: causal shows them
  const AttentionMask kept = causal.Relax(3, 5, 0, 5);  // key 4 for query 3 is freed
  EXPECT_FALSE(kept.IsCausal());
  EXPECT_TRUE(kept.IsRelaxed());
  EXPECT_EQ(kept.Relaxations().size(), 1u);
  EXPECT_EQ(kept.StructuralKind(), AttentionMask::Kind::kCausal);
  // A union: two rectangles; the same one twice counts once.
  const AttentionMask two = kept.Relax(6, 8, 6, 8).Relax(3, 5, 0, 5);
  EXPECT_EQ(two.Relaxations().size(), 2u);
}

TEST(AttentionMaskTest, RelaxNeedsACausalPart) {
  using ::testing::HasSubstr;
  const auto expect_error = [](const AttentionMask& mask, std::int64_t q_lo, const char* what) {
    try {
      (void)mask.Relax(q_lo, 3, 0, 3);
      ADD_FAILURE() << "no error: " << what;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(what));
    }
  };
  const AttentionMask zero = AttentionMask::Zero();
  expect_error(zero, 0, "[AttentionMask::Relax] the mask (zero) has no causal part");
  expect_error(AttentionMask::WindowOnly(3), 0, "the mask (window only) has no causal part");
  expect_error(AttentionMask::Additive(Tensor::Zeros(DType::kF32, {1, 1, 1, 3})), 0,
               "the mask (array only) has no causal part");
  expect_error(AttentionMask::Causal(), -1,
               "[AttentionMask::Relax] rectangle q [-1, 3) x k [0, 3) has a negative position");
  EXPECT_TRUE(zero.IsZero());  // Relax never changes the mask it is called on
  // Causal with an array, or a sliding window, can be relaxed.
  EXPECT_TRUE(AttentionMask::Causal()
                  .Intersect(AttentionMask::Additive(Tensor::Zeros(DType::kF32, {1, 1, 1, 3})))
                  .Relax(0, 3, 0, 3)
                  .IsRelaxed());
  EXPECT_TRUE(AttentionMask::SlidingWindow(2).Relax(0, 3, 0, 3).IsRelaxed());
}

TEST(AttentionMaskTest, RelaxedAsArrayAndIntersect) {
  const float inf = std::numeric_limits<float>::infinity();
  const float x = -inf;
  // 4 queries over 4 keys (positions 0-3), span [1, 3) bidirectional.
  const AttentionMask relaxed = AttentionMask::Causal().Relax(1, 3, 1, 3);
  const std::vector<float> expected{0, x, x, x,  //
                                    0, 0, 0, x,  //
                                    0, 0, 0, x,  //
                                    0, 0, 0, 0};
  EXPECT_EQ(relaxed.AsArray(4, 4).ToVector(), expected);
  // Absolute positions: the same keys as positions 10-13 (first_position 10) with
  // the span at [11, 13) give the same array; at first_position 0 it misses.
  EXPECT_EQ(AttentionMask::Causal().Relax(11, 13, 11, 13).AsArray(4, 4, 10).ToVector(), expected);
  EXPECT_EQ(AttentionMask::Causal().Relax(11, 13, 11, 13).AsArray(4, 4).ToVector(),
            AttentionMask::Causal().AsArray(4, 4).ToVector());
  // The window still hides what is too old, and the array is added last.
  const AttentionMask windowed = relaxed.Intersect(AttentionMask::WindowOnly(2));
  EXPECT_EQ(windowed.StructuralKind(), AttentionMask::Kind::kSlidingWindow);
  EXPECT_TRUE(windowed.IsRelaxed());
  const AttentionMask biased = windowed.Intersect(
      AttentionMask::Additive(Tensor::FromVector(std::vector<float>{1, 2, 3, 4}, {1, 1, 1, 4})));
  EXPECT_EQ(biased.AsArray(4, 4).ToVector(), (std::vector<float>{1, x, x, x,  //
                                                                 1, 2, 3, x,  //
                                                                 x, 2, 3, x,  //
                                                                 x, x, 3, 4}));
  // Intersect: relaxed ∩ zero keeps the cells; ∩ plain causal (which hides them)
  // drops them; relaxed ∩ relaxed keeps the overlap.
  EXPECT_EQ(relaxed.Intersect(AttentionMask::Zero()).AsArray(4, 4).ToVector(), expected);
  EXPECT_TRUE(relaxed.Intersect(AttentionMask::Causal()).IsCausal());
  EXPECT_TRUE(AttentionMask::SlidingWindow(3).Intersect(relaxed).Relaxations().empty());
  const AttentionMask overlap = AttentionMask::Causal()
                                    .Relax(0, 3, 0, 3)
                                    .Intersect(AttentionMask::Causal().Relax(1, 4, 1, 4));
  ASSERT_EQ(overlap.Relaxations().size(), 1u);
  EXPECT_EQ(overlap.Relaxations()[0], (AttentionMask::Rectangle{1, 3, 1, 3}));
  EXPECT_TRUE(AttentionMask::Causal()
                  .Relax(0, 2, 0, 2)
                  .Intersect(AttentionMask::Causal().Relax(2, 4, 2, 4))
                  .IsCausal());  // disjoint: nothing both free
}

}  // namespace
}  // namespace ringkv
