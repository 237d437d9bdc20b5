#pragma once
// The no-cache reference: the whole token sequence in one pass from position 0,
// full causal attention on global layers and causal + SlidingWindow(window) on
// sliding layers, with no cache at all. By default K and V are rounded through
// the model's K/V dtype exactly as the caches store them (ringkv::AsStored: f16
// rounding, or int8 / int4 quantization of each row), so cached and recomputed
// logits differ only by summation order (and a rare flip of a rounded K/V value
// fed by such a difference), not by the storage rounding itself.

#include <span>
#include <vector>

#include "forward_stats.h"
#include "ringkv/context.h"
#include "ringkv/dtype.h"
#include "tiny_transformer.h"

namespace ringkv::model {

// Logits [tokens.size(), vocab] row-major: row i is what the model predicts after
// tokens[0..i]. K/V rounded through model.Config().kv_dtype.
std::vector<float> RecomputeLogits(const TinyTransformer& model, std::span<const int> tokens,
                                   Context& ctx, ForwardStats* stats = nullptr);

// The same with K/V rounded through `kv_rounding` instead: DType::kF32 leaves
// them unrounded (the model's own f32 K/V, the cost-free reference of a storage
// dtype); the serving scene's f16 pools pass DType::kF16.
std::vector<float> RecomputeLogits(const TinyTransformer& model, std::span<const int> tokens,
                                   Context& ctx, DType kv_rounding, ForwardStats* stats = nullptr);

}  // namespace ringkv::model
