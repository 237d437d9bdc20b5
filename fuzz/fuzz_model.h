#pragma once
// The model the loader fuzzer and its seed generator agree on: two layers (0
// sliding with a window of 4, 1 global), one kv head of dim 2, f32. The K/V
// layout comes from the caches (Feed), so the fuzzer primes them before a load:
// files of another layout are then refused, as in a running model.

#include <cstdint>
#include <span>
#include <vector>

#include "ringkv/causal_cache.h"
#include "ringkv/layer_caches.h"
#include "ringkv/prompt_cache.h"

namespace ringkv::fuzz {

inline LayerCaches FuzzCaches() { return LayerCaches::Interleaved(2, 2, 4, 4); }
// The same layers storing K/V quantized (the seeds of quantized files).
inline LayerCaches FuzzCaches(KvStorage storage) {
  std::vector<LayerCaches::Layer> layers;
  layers.emplace_back(RotatingKVCache(4, 4, storage));
  layers.emplace_back(KVCache(4, storage));
  return LayerCaches(std::move(layers));
}

inline PromptCacheOptions FuzzOptions() {
  PromptCacheOptions o;
  o.byte_budget = std::size_t{1} << 20;
  o.fingerprint = "ringkv-fuzz";
  return o;
}

// One forward chunk of K/V derived from the tokens and positions (head dim 2,
// or `dim`: int4 rows need 32 values).
inline void Feed(LayerCaches& caches, std::span<const int> tokens, std::int64_t dim = 2) {
  const auto n = static_cast<std::int64_t>(tokens.size());
  std::vector<float> kv;
  for (std::int64_t i = 0; i < n; ++i) {
    const float code = static_cast<float>(caches[0].Offset() + i) * 100.0f +
                       static_cast<float>(tokens[static_cast<std::size_t>(i)]);
    for (std::int64_t d = 0; d < dim; ++d) kv.push_back(d % 2 == 0 ? code : -code);
  }
  const Tensor t = Tensor::FromVector(kv, {1, 1, n, dim});
  for (std::size_t l = 0; l < caches.Size(); ++l) caches[l].Update(t, t);
}

// The sequence loader's pool: a sliding-window cache of two layers and a
// global one of one layer, f32, 2 kv heads, key dim 8, value dim 4.
inline CausalCacheOptions FuzzSequenceOptions(int layers, Position window) {
  CausalCacheOptions o;
  o.layers = layers;
  o.kv_heads = 2;
  o.key_dim = 8;
  o.value_dim = 4;
  o.dtype = DType::kF32;
  o.capacity_tokens = 4096;
  o.block_tokens = 16;
  o.max_sequences = 2;
  o.window = window;
  return o;
}

// Appends tokens at positions [first, first + n) of `seq` to every cache, with
// K/V derived from the position.
inline void FeedSequence(std::span<CausalCache* const> caches, SequenceId seq, Position first,
                         Position n) {
  std::vector<Position> positions;
  std::vector<SequenceId> sequences;
  std::vector<float> k;
  std::vector<float> v;
  for (Position i = 0; i < n; ++i) {
    positions.push_back(first + i);
    sequences.push_back(seq);
  }
  for (int h = 0; h < 2; ++h) {
    for (Position i = 0; i < n; ++i) {
      for (int d = 0; d < 8; ++d) k.push_back(static_cast<float>((first + i) * 10 + d + h));
    }
  }
  for (int h = 0; h < 2; ++h) {
    for (Position i = 0; i < n; ++i) {
      for (int d = 0; d < 4; ++d) v.push_back(-static_cast<float>((first + i) * 10 + d + h));
    }
  }
  const Tensor keys = Tensor::FromVector(k, {1, 2, n, 8});
  const Tensor values = Tensor::FromVector(v, {1, 2, n, 4});
  for (CausalCache* cache : caches) {
    cache->StartForward(Batch{positions, sequences});
    for (int l = 0; l < cache->Options().layers; ++l) cache->Update(l, keys, values);
  }
}

}  // namespace ringkv::fuzz
