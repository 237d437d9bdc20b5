#pragma once
// Rotary position embedding (NeoX layout: dimension i pairs with i + D/2).
// Applied to q and k before k enters the cache, at absolute positions: the
// cache's offset + i. The angle table is built once per forward and shared by all
// layers, so cached decode and the no-cache recompute rotate with identical values.
// A batch of several sequences rotates each token at its own position.

#include <cstdint>
#include <span>
#include <vector>

namespace ringkv::model {

class RopeTable {
 public:
  // cos/sin of position * theta^(-2i/D) for positions [start, start + count).
  RopeTable(std::int64_t start, std::int64_t count, int head_dim, float theta);
  // cos/sin for each of `positions` (any order, repeats allowed): row i rotates
  // token i of a batch whose tokens sit at unrelated positions.
  RopeTable(std::span<const std::int64_t> positions, int head_dim, float theta);

  // x [count, heads, head_dim] row-major, rotated in place.
  void Apply(std::span<float> x, int heads) const;

 private:
  std::int64_t count_;
  int half_;
  std::vector<float> cos_;  // [count, head_dim / 2]
  std::vector<float> sin_;  // [count, head_dim / 2]
};

}  // namespace ringkv::model
