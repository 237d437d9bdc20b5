#pragma once
// Shared set-up for the model tests: a tiny configuration that runs in
// milliseconds (also under ASan/UBSan), token streams from a seed, and the
// comparison of cached logits with the no-cache recompute.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "model_config.h"

namespace ringkv::model::test {

// 3 layers, d_model 64, 4 q heads / 2 kv heads x 16, window 8. global_every 2
// makes layer 1 global and layers 0, 2 sliding.
inline ModelConfig TinyConfig(int global_every = 2) {
  ModelConfig c;
  c.layers = 3;
  c.d_model = 64;
  c.q_heads = 4;
  c.kv_heads = 2;
  c.head_dim = 16;
  c.mlp_hidden = 128;
  c.vocab = 97;
  c.window = 8;
  c.global_every = global_every;
  c.seed = 7;
  return c;
}

inline std::vector<int> RandomTokens(std::size_t n, int vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, vocab - 1);
  std::vector<int> out(n);
  for (int& t : out) t = dist(rng);
  return out;
}

// Largest |a - b| between row `row_a` of a and row `row_b` of b ([rows, vocab]).
inline float MaxRowDiff(std::span<const float> a, std::size_t row_a, std::span<const float> b,
                        std::size_t row_b, int vocab) {
  const auto v = static_cast<std::size_t>(vocab);
  float worst = 0;
  for (std::size_t i = 0; i < v; ++i) {
    worst = std::max(worst, std::abs(a[row_a * v + i] - b[row_b * v + i]));
  }
  return worst;
}

}  // namespace ringkv::model::test
