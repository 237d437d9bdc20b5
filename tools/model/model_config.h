#pragma once
// The shape of the tiny decoder-only transformer the demo and the end-to-end tests
// run: dimensions, the Gemma-style layer pattern (every k-th layer global, the
// rest sliding-window) and how K/V are stored in the caches.

#include <cstdint>
#include <string>

#include "ringkv/dtype.h"

namespace ringkv::model {

enum class LayerKind : std::uint8_t {
  kGlobal,   // full history: ringkv::KVCache, causal mask
  kSliding,  // last `window` tokens: ringkv::RotatingKVCache(window), causal + sliding window
};

struct ModelConfig {
  // Upper bounds far above any model the demo or the tests run; they keep the
  // parameter count and every buffer size well inside 64-bit arithmetic.
  static constexpr int kMaxLayers = 1024;
  static constexpr int kMaxDModel = 65536;
  static constexpr int kMaxHeads = 1024;  // q_heads and kv_heads
  static constexpr int kMaxHeadDim = 1024;
  static constexpr int kMaxMlpHidden = 1 << 20;
  static constexpr int kMaxVocab = 1 << 24;
  static constexpr int kMaxWindow = 1 << 24;

  int layers = 8;
  int d_model = 512;
  int q_heads = 8;
  int kv_heads = 2;
  int head_dim = 64;
  int mlp_hidden = 1536;  // SwiGLU inner width
  int vocab = 4096;
  // Tokens a sliding layer sees: the query itself and window - 1 earlier ones
  // (the RotatingKVCache max_size, and SlidingWindow(window) in the recompute).
  int window = 128;
  // Layer i is global when (i + 1) % global_every == 0 (4: layers 3, 7, ...);
  // 1 makes every layer global, 0 none.
  int global_every = 4;
  // What the caches store: f32, f16, bf16, int8, int4 or int4h (int4, int4h: head_dim % 32 == 0).
  DType kv_dtype = DType::kF16;
  float rope_theta = 10000.0f;
  float norm_eps = 1e-6f;
  std::uint64_t seed = 1;  // weights

  // Throws ringkv::Error naming the first field out of range.
  void Validate() const;
  LayerKind KindOf(int layer) const;
  int GlobalLayers() const;
  std::int64_t ParameterCount() const;
  // The f32 weights' bytes: 4 * ParameterCount().
  std::int64_t WeightBytes() const { return 4 * ParameterCount(); }
  // Bytes one token's K + V take in one layer's storage: kv_heads rows of each,
  // scales included (RowBytes).
  std::int64_t KvBytesPerToken() const;
  // "8 layers (2 global, 6 sliding w=128), d_model 512, ..." for reports.
  std::string Describe() const;
};

}  // namespace ringkv::model
