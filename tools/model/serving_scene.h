#pragma once
// The demo's serving scene: several conversations that share a system prompt,
// served the way a server's slots are. The system prompt is prefilled once into
// sequence 0 and CopyPrefix'ed to the others (blocks shared, no K/V copied);
// every conversation's own user turn is prefilled in one batch; then all are
// decoded together, one token per conversation per step, each step one batched
// forward (batch_forward.h). Optionally every conversation's logit rows are
// checked against a no-cache recompute of its whole token list.

#include <span>
#include <vector>

#include "demo_report.h"
#include "ringkv/context.h"
#include "sampling.h"
#include "tiny_transformer.h"

namespace ringkv::model {

struct ServingScene {
  std::span<const int> system_prompt;
  std::span<const std::vector<int>> user_turns;  // one per conversation, all the same length
  int steps = 0;
  bool check = true;
};

// Throws ringkv::Error for an empty scene or user turns of different lengths,
// and whatever the caches or the model throw.
ServingReport RunServingScene(const TinyTransformer& model, const ServingScene& scene,
                              Sampler& sampler, Context& ctx);

}  // namespace ringkv::model
