#pragma once
// A small decoder-only transformer in the shape of today's models, running on
// ringkv's caches: token embedding, RMSNorm, rotary positions (applied to q and k
// before k enters the cache, at the cache's offset + i), grouped-query attention
// through the layer's cache and the SDPA kernel, SwiGLU MLP, final norm, logits.
// The weights are random (weights.h); the point is the cache, not the text.

#include <cstdint>
#include <span>
#include <vector>

#include "attention_backend.h"
#include "forward_stats.h"
#include "model_config.h"
#include "ringkv/cache.h"
#include "ringkv/context.h"
#include "rope.h"
#include "weights.h"

namespace ringkv::model {

enum class LogitRows : std::uint8_t {
  kLast,  // [1, vocab]: what a decode loop samples from
  kAll,   // [L, vocab]: one row per input token (verification, tests)
};

class TinyTransformer {
 public:
  // Validates the config (ringkv::Error) and draws the weights on ctx's pool.
  TinyTransformer(const ModelConfig& config, Context& ctx);

  const ModelConfig& Config() const noexcept { return config_; }
  const Weights& GetWeights() const noexcept { return weights_; }

  // Runs `tokens` at positions caches[0]->Offset() + i, appending their K/V to
  // caches[layer] (one per layer, all at the same offset). Returns the logits
  // row-major. Throws ringkv::Error for an empty input, a token outside
  // [0, vocab), a wrong number of caches or caches at different offsets.
  std::vector<float> Forward(std::span<const int> tokens, std::span<AttentionCache* const> caches,
                             Context& ctx, LogitRows rows = LogitRows::kLast,
                             ForwardStats* stats = nullptr) const;

  // The same pass with any attention backend (recompute.h uses it without caches).
  std::vector<float> Run(std::span<const int> tokens, AttentionBackend& backend, Context& ctx,
                         LogitRows rows, ForwardStats* stats) const;
  // The same pass with token i rotated at positions[i] instead of at
  // backend.StartPosition() + i: the tokens of a batch of several sequences
  // (batch_forward.h). Throws ringkv::Error when the two spans differ in length
  // or a position is negative.
  std::vector<float> RunAt(std::span<const int> tokens, std::span<const std::int64_t> positions,
                           AttentionBackend& backend, Context& ctx, LogitRows rows,
                           ForwardStats* stats) const;

 private:
  void CheckTokens(const char* function, std::span<const int> tokens) const;
  std::vector<float> Pass(std::span<const int> tokens, const RopeTable& rope,
                          AttentionBackend& backend, Context& ctx, LogitRows rows,
                          ForwardStats* stats) const;

  ModelConfig config_;
  Weights weights_;
};

}  // namespace ringkv::model
