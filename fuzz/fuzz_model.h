#pragma once
// The model the loader fuzzer and its seed generator agree on: two layers (0
// sliding with a window of 4, 1 global), one kv head of dim 2, f32. The K/V
// layout comes from the caches (Feed), so the fuzzer primes them before a load:
// files of another layout are then refused, as in a running model.

#include <cstdint>
#include <span>
#include <vector>

#include "ringkv/layer_caches.h"
#include "ringkv/prompt_cache.h"

namespace ringkv::fuzz {

inline LayerCaches FuzzCaches() { return LayerCaches::Interleaved(2, 2, 4, 4); }

inline PromptCacheOptions FuzzOptions() {
  PromptCacheOptions o;
  o.byte_budget = std::size_t{1} << 20;
  o.fingerprint = "ringkv-fuzz";
  return o;
}

// One forward chunk of K/V derived from the tokens and positions.
inline void Feed(LayerCaches& caches, std::span<const int> tokens) {
  const auto n = static_cast<std::int64_t>(tokens.size());
  std::vector<float> kv;
  for (std::int64_t i = 0; i < n; ++i) {
    const float code = static_cast<float>(caches[0].Offset() + i) * 100.0f +
                       static_cast<float>(tokens[static_cast<std::size_t>(i)]);
    kv.push_back(code);
    kv.push_back(-code);
  }
  const Tensor t = Tensor::FromVector(kv, {1, 1, n, 2});
  for (std::size_t l = 0; l < caches.Size(); ++l) caches[l].Update(t, t);
}

}  // namespace ringkv::fuzz
