#pragma once
// One forward pass of the tiny transformer over a batch of several sequences
// served from ServingCaches: any mix of sequences and token counts, each token
// rotated (RoPE) at its own position, every layer's K/V stored in its pool and
// attention through ringkv's batched entry point (each row sees only its own
// sequence, causally, within the sliding window on sliding layers).

#include <span>
#include <vector>

#include "forward_stats.h"
#include "ringkv/context.h"
#include "ringkv/sequence_cache.h"
#include "serving_caches.h"
#include "tiny_transformer.h"

namespace ringkv::model {

// Token i is `tokens[i]` of sequence batch.sequences[i] at batch.positions[i].
// Returns the logits row-major: [N, vocab] with LogitRows::kAll (row i for token
// i), [1, vocab] for the batch's last token with kLast. Throws ringkv::Error,
// before any cache changes, when the three spans differ in length or a token is
// outside [0, vocab); and as ServingCaches::StartForward does (e.g. cache full).
std::vector<float> ForwardBatch(const TinyTransformer& model, std::span<const int> tokens,
                                const Batch& batch, ServingCaches& caches, Context& ctx,
                                LogitRows rows = LogitRows::kAll, ForwardStats* stats = nullptr);

}  // namespace ringkv::model
