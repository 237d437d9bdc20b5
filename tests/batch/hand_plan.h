#pragma once
// A BatchPlan built by hand over blocks the test owns, with the keys each row
// may see written out by hand (not derived from the plan), and the float64
// oracle per row. Shared by the batched attention tests and the allocation test.
//
// Six blocks of 4 tokens, each holding two layers, in two layouts:
//   head-major  [layer, Hkv, 4, D]   (blocks 0, 1, 3, 5)
//   token-major [layer, 4, Hkv, D]   (blocks 2, 4)
// so the layer byte offset is the same for every block.
//
// Runs (block, first row, count): r0 (0,0,4) r1 (1,0,2) | r2 (2,1,3) | r3 (3,0,4)
// r4 (5,2,2) | r5 (4,0,3) r6 (5,0,1). Prefix P = {r0, r1}: 6 keys.
//   group A: P + r2       (9 keys)   rows 3, 0
//   group B: P + r3, r4   (12 keys)  rows 1, 6, 2
//   group C: r5, r6       (4 keys)   row 5
//   rows 4 and 7 belong to no group.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "batch_plan.h"
#include "block_store.h"
#include "ringkv/batch_history.h"
#include "ringkv/format.h"
#include "ringkv/tensor.h"
#include "support/sdpa_reference.h"

namespace ringkv::test {

inline Tensor RandomTensor(std::mt19937& rng, const Shape& shape, DType dtype = DType::kF32) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(static_cast<std::size_t>(shape.NumElements()));
  for (float& x : values) x = dist(rng);
  return Tensor::FromVector(values, shape, dtype);
}

inline std::string DtypeName(DType dtype) { return fmt::format("{}", dtype); }

// A key the test names: (block, row inside the block).
using KeyRef = std::pair<int, std::int64_t>;

class HandPlan {
 public:
  static constexpr std::int64_t kHkv = 2, kD = 16, kDv = 8, kRows = 8, kBlockTokens = 4;
  static constexpr int kBlocks = 6, kLayers = 2;

  explicit HandPlan(DType dtype, std::uint32_t seed = 1) : dtype_(dtype) {
    std::mt19937 rng(seed);
    for (int b = 0; b < kBlocks; ++b) {
      const bool token_major = b == 2 || b == 4;
      const Shape k_shape = token_major ? Shape{kLayers, kBlockTokens, kHkv, kD}
                                        : Shape{kLayers, kHkv, kBlockTokens, kD};
      const Shape v_shape = token_major ? Shape{kLayers, kBlockTokens, kHkv, kDv}
                                        : Shape{kLayers, kHkv, kBlockTokens, kDv};
      keys_.push_back(RandomTensor(rng, k_shape, dtype));
      values_.push_back(RandomTensor(rng, v_shape, dtype));
      token_major_.push_back(token_major);
      key_values_.push_back(keys_.back().ToVector());
      value_values_.push_back(values_.back().ToVector());
    }
    auto plan = std::make_shared<detail::BatchPlan>();
    plan->key_dtype = dtype;
    plan->value_dtype = dtype;
    plan->rows = kRows;
    plan->heads = kHkv;
    plan->key_dim = kD;
    plan->value_dim = kDv;
    const std::array<std::array<std::int64_t, 3>, 7> runs{
        {{0, 0, 4}, {1, 0, 2}, {2, 1, 3}, {3, 0, 4}, {5, 2, 2}, {4, 0, 3}, {5, 0, 1}}};
    for (const auto& [block, row, count] : runs) plan->runs.push_back(Run(block, row, count));
    plan->prefixes = {{0, 2}};
    plan->groups = {{0, 2, 0, 2, 1}, {2, 3, 0, 3, 2}, {5, 1, -1, 5, 2}};
    plan->group_rows = {3, 0, 1, 6, 2, 5};
    //                 row:  0  1  2  3  4  5  6  7
    plan->row_lo = std::vector<std::int64_t>{2, 0, 5, 0, 0, 1, 7, 0};
    plan->row_hi = std::vector<std::int64_t>{8, 12, 10, 9, 0, 4, 7, 0};
    plan->epoch = epoch_;
    plan->generation = epoch_->generation;
    plan_ = plan;
  }

  // The history of `layer`.
  BatchHistory History(int layer) const {
    return detail::BatchAccess::Make(plan_, layer * LayerBytes(kD), layer * LayerBytes(kDv));
  }
  std::shared_ptr<detail::ViewEpoch> Epoch() const { return epoch_; }
  const Tensor& BlockKeys(int block) const { return keys_[static_cast<std::size_t>(block)]; }

  // The keys row r sees, in order, written out from the layout in the comment above.
  static std::vector<KeyRef> Visible(std::int64_t row) {
    const std::vector<KeyRef> prefix{{0, 0}, {0, 1}, {0, 2}, {0, 3}, {1, 0}, {1, 1}};
    std::vector<KeyRef> a = prefix, b = prefix;
    a.insert(a.end(), {{2, 1}, {2, 2}, {2, 3}});
    b.insert(b.end(), {{3, 0}, {3, 1}, {3, 2}, {3, 3}, {5, 2}, {5, 3}});
    const std::vector<KeyRef> c{{4, 0}, {4, 1}, {4, 2}, {5, 0}};
    const auto range = [](const std::vector<KeyRef>& list, int lo, int hi) {
      return std::vector<KeyRef>(list.begin() + lo, list.begin() + hi);
    };
    switch (row) {
      case 0:
        return range(a, 2, 8);
      case 1:
        return range(b, 0, 12);
      case 2:
        return range(b, 5, 10);
      case 3:
        return range(a, 0, 9);
      case 5:
        return range(c, 1, 4);
      default:
        return {};  // row 6: an empty range; rows 4 and 7: no group
    }
  }

  DType KeyDtype() const { return dtype_; }

  // Element (h, d) of a stored key / value of `layer`, as stored.
  float Key(int layer, const KeyRef& key, std::int64_t h, std::int64_t d) const {
    return Element(key_values_, layer, key, h, d, kD);
  }
  float Value(int layer, const KeyRef& key, std::int64_t h, std::int64_t d) const {
    return Element(value_values_, layer, key, h, d, kDv);
  }

  // The float64 oracle for row r of q [1, Hq, N, D] (f32 values): [Hq, Dv].
  std::vector<double> Expected(const std::vector<float>& q_values, std::int64_t q_heads,
                               std::int64_t row, int layer, float scale) const {
    const std::vector<KeyRef> visible = Visible(row);
    const auto n = static_cast<std::int64_t>(visible.size());
    if (n == 0) return std::vector<double>(static_cast<std::size_t>(q_heads * kDv), 0.0);
    std::vector<float> q(static_cast<std::size_t>(q_heads * kD));
    for (std::int64_t h = 0; h < q_heads; ++h) {
      for (std::int64_t d = 0; d < kD; ++d) {
        q[static_cast<std::size_t>(h * kD + d)] =
            q_values[static_cast<std::size_t>((h * kRows + row) * kD + d)];
      }
    }
    std::vector<float> k(static_cast<std::size_t>(kHkv * n * kD));
    std::vector<float> v(static_cast<std::size_t>(kHkv * n * kDv));
    for (std::int64_t h = 0; h < kHkv; ++h) {
      for (std::int64_t t = 0; t < n; ++t) {
        const KeyRef& key = visible[static_cast<std::size_t>(t)];
        for (std::int64_t d = 0; d < kD; ++d) {
          k[static_cast<std::size_t>((h * n + t) * kD + d)] = Key(layer, key, h, d);
        }
        for (std::int64_t d = 0; d < kDv; ++d) {
          v[static_cast<std::size_t>((h * n + t) * kDv + d)] = Value(layer, key, h, d);
        }
      }
    }
    kernels::SdpaParams params;
    params.q = {q.data(), DType::kF32, {1, q_heads, 1, kD}, {q_heads * kD, kD, kD, 1}};
    const kernels::KvSegment segment{
        {k.data(), DType::kF32, {1, kHkv, n, kD}, {kHkv * n * kD, n * kD, kD, 1}},
        {v.data(), DType::kF32, {1, kHkv, n, kDv}, {kHkv * n * kDv, n * kDv, kDv, 1}}};
    params.kv = std::span<const kernels::KvSegment>(&segment, 1);
    params.scale = scale;
    return ReferenceSdpa(params);  // [1, Hq, 1, Dv]
  }

 private:
  std::ptrdiff_t LayerBytes(std::int64_t dim) const {
    return static_cast<std::ptrdiff_t>(kHkv * kBlockTokens * dim) *
           static_cast<std::ptrdiff_t>(SizeOf(dtype_));
  }

  kernels::RaggedRun Run(std::int64_t block, std::int64_t row, std::int64_t count) const {
    const auto b = static_cast<std::size_t>(block);
    const Tensor& k = keys_[b];
    const Tensor& v = values_[b];
    const auto elem = static_cast<std::int64_t>(SizeOf(dtype_));
    kernels::RaggedRun run;
    // Layer 0; heads and rows by the block's own strides.
    const int head_axis = token_major_[b] ? 2 : 1, row_axis = token_major_[b] ? 1 : 2;
    run.k = static_cast<const std::byte*>(k.Data()) + row * k.Stride(row_axis) * elem;
    run.v = static_cast<const std::byte*>(v.Data()) + row * v.Stride(row_axis) * elem;
    run.count = count;
    run.k_head_stride = k.Stride(head_axis);
    run.k_row_stride = k.Stride(row_axis);
    run.v_head_stride = v.Stride(head_axis);
    run.v_row_stride = v.Stride(row_axis);
    return run;
  }

  float Element(const std::vector<std::vector<float>>& blocks, int layer, const KeyRef& key,
                std::int64_t h, std::int64_t d, std::int64_t dim) const {
    const auto b = static_cast<std::size_t>(key.first);
    const std::vector<float>& all = blocks[b];  // row-major over the block's own layout
    const std::int64_t index = token_major_[b]
                                   ? ((layer * kBlockTokens + key.second) * kHkv + h) * dim + d
                                   : ((layer * kHkv + h) * kBlockTokens + key.second) * dim + d;
    return all[static_cast<std::size_t>(index)];
  }

  DType dtype_;
  std::vector<Tensor> keys_, values_;
  std::vector<std::vector<float>> key_values_, value_values_;  // as stored, converted
  std::vector<bool> token_major_;
  std::shared_ptr<detail::ViewEpoch> epoch_ = std::make_shared<detail::ViewEpoch>();
  std::shared_ptr<const detail::BatchPlan> plan_;
};

}  // namespace ringkv::test
