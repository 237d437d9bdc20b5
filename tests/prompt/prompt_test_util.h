#pragma once
// Synthetic forward passes for the prompt cache tests: every layer gets K/V that
// encode (position, token), so a test can read back exactly which tokens at which
// positions the live caches hold after a Lookup.
//   K[0, h, i, d] = 1000 p + t + h / 4       V = -K - 1      (f32, exact)

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "ringkv/layer_caches.h"
#include "ringkv/prompt_cache.h"

namespace ringkv::test {

inline constexpr std::int64_t kHeads = 1;
inline constexpr std::int64_t kDim = 2;
// Bytes one token takes in one layer: heads * (key_dim + value_dim) * sizeof(f32).
inline constexpr std::size_t kTokenBytes = kHeads * (kDim + kDim) * 4;

inline float Code(int position, int token, std::int64_t head) {
  // In double: tokens may be any int (INT_MAX + 1000 p must not overflow).
  return static_cast<float>(1000.0 * position + token) + static_cast<float>(head) / 4.0f;
}

inline PromptCacheOptions Options(std::size_t budget, const char* fingerprint = "test-model") {
  PromptCacheOptions o;
  o.byte_budget = budget;
  o.fingerprint = fingerprint;
  return o;
}

// Appends `tokens` to every layer in one Update (one prefill chunk).
inline void FakeForward(LayerCaches& caches, std::span<const int> tokens) {
  const int offset = caches[0].Offset();
  const auto n = static_cast<std::int64_t>(tokens.size());
  std::vector<float> k, v;
  for (std::int64_t h = 0; h < kHeads; ++h) {
    for (std::int64_t i = 0; i < n; ++i) {
      const float code = Code(offset + static_cast<int>(i), tokens[static_cast<std::size_t>(i)], h);
      for (std::int64_t d = 0; d < kDim; ++d) {
        k.push_back(code);
        v.push_back(-code - 1.0f);
      }
    }
  }
  const Tensor keys = Tensor::FromVector(k, {1, kHeads, n, kDim});
  const Tensor values = Tensor::FromVector(v, {1, kHeads, n, kDim});
  for (std::size_t l = 0; l < caches.Size(); ++l) caches[l].Update(keys, values);
}

// Feeds tokens one at a time (decode steps).
inline void FakeDecode(LayerCaches& caches, std::span<const int> tokens) {
  for (std::size_t i = 0; i < tokens.size(); ++i) FakeForward(caches, tokens.subspan(i, 1));
}

// The (position, token) codes of a layer's keys, in logical order: the whole
// history of a KVCache, the last max_size - 1 tokens of a RotatingKVCache.
inline std::vector<float> HeldCodes(LayerCaches& caches, std::size_t layer) {
  KvView view;
  if (auto* ring = dynamic_cast<RotatingKVCache*>(&caches[layer])) {
    view = ring->View().Kv();
  } else {
    view = dynamic_cast<KVCache&>(caches[layer]).View().Kv();
  }
  std::vector<float> codes;
  if (view.Empty()) return codes;
  const std::vector<float> k = view.ConcatKeys().ToVector();
  const std::vector<float> v = view.ConcatValues().ToVector();
  for (std::size_t i = 0; i < k.size(); i += kDim) {
    if (i < k.size() / kHeads) codes.push_back(k[i]);  // head 0
    EXPECT_EQ(v[i], -k[i] - 1.0f) << "layer " << layer << " element " << i;
  }
  return codes;
}

// Every layer holds exactly `prefix` (as far as its kind keeps history).
inline void ExpectHolds(LayerCaches& caches, std::span<const int> prefix) {
  const int n = static_cast<int>(prefix.size());
  for (std::size_t l = 0; l < caches.Size(); ++l) {
    ASSERT_EQ(caches[l].Offset(), n) << "layer " << l;
    int first = 0;
    if (auto* ring = dynamic_cast<RotatingKVCache*>(&caches[l])) {
      first = std::max(0, n - (ring->MaxSize() - 1));
    }
    std::vector<float> expected;
    for (int p = first; p < n; ++p)
      expected.push_back(Code(p, prefix[static_cast<std::size_t>(p)], 0));
    EXPECT_EQ(HeldCodes(caches, l), expected) << "layer " << l;
  }
}

// The byte accounting invariant, checked after every operation.
inline void ExpectBytes(const PromptCache& pc) {
  const PromptCacheStats stats = pc.Stats();
  EXPECT_EQ(stats.bytes, pc.SnapshotBytes());
  EXPECT_LE(stats.bytes, pc.Options().byte_budget);
}

// Lookup, prefill through Prefill() (stopping at the checkpoints), commit.
inline PrefixMatch Serve(PromptCache& pc, LayerCaches& caches, const std::vector<int>& tokens) {
  const PrefixMatch match = pc.Lookup(tokens);
  ExpectBytes(pc);
  pc.Prefill(tokens, match, [&](std::span<const int> chunk) { FakeForward(caches, chunk); });
  ExpectBytes(pc);
  pc.Commit(tokens);
  ExpectBytes(pc);
  return match;
}

inline std::vector<int> Seq(int first, int count) {
  std::vector<int> out;
  for (int i = 0; i < count; ++i) out.push_back(first + i);
  return out;
}

inline std::vector<int> Cat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace ringkv::test
