#pragma once
// A model's projection buffers as an engine holds them (row-major [L, H, D]
// floats), and the zero-copy [1, H, L, D] view the caches take.

#include <cstdint>
#include <random>
#include <vector>

#include "ringkv/tensor.h"

namespace ringkv::test {

struct Projection {
  std::vector<float> data;  // [length, heads, dim]
  std::int64_t length = 0;
  std::int64_t heads = 0;
  std::int64_t dim = 0;

  // [1, H, L, D] over `data`, no copy (read-only: Update and Attention only read).
  Tensor View() const {
    const float* p = data.data();
    return Tensor::Borrow(p, DType::kF32, {length, heads, dim}).Permute({1, 0, 2}).Unsqueeze(0);
  }
};

// Uniform in [-2, 2): values that f16 and bf16 must round.
inline Projection RandomProjection(std::mt19937& rng, std::int64_t length, std::int64_t heads,
                                   std::int64_t dim) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  Projection p{{}, length, heads, dim};
  p.data.resize(static_cast<std::size_t>(length * heads * dim));
  for (float& x : p.data) x = dist(rng);
  return p;
}

}  // namespace ringkv::test
