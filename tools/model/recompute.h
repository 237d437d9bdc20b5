#pragma once
// The no-cache reference: the whole token sequence in one pass from position 0,
// full causal attention on global layers and causal + SlidingWindow(window) on
// sliding layers, with no cache at all. K and V are rounded through the model's
// K/V dtype, exactly as the caches store them, so cached and recomputed logits
// differ only by summation order (and a rare one-ulp flip of a rounded K/V value
// fed by such a difference), not by the f16 rounding itself.

#include <span>
#include <vector>

#include "forward_stats.h"
#include "ringkv/context.h"
#include "tiny_transformer.h"

namespace ringkv::model {

// Logits [tokens.size(), vocab] row-major: row i is what the model predicts after
// tokens[0..i].
std::vector<float> RecomputeLogits(const TinyTransformer& model, std::span<const int> tokens,
                                   Context& ctx, ForwardStats* stats = nullptr);

}  // namespace ringkv::model
