#pragma once
// Random weights from a seed (no downloads). Scaled so activations stay O(1):
// projections draw from a variance of 1/in, the two residual branch outputs are
// further scaled by 1/sqrt(2 * layers) so the residual stream does not grow with
// depth, and the output head gives logits with a standard deviation near 2 (a
// peaked but not degenerate distribution).

#include <vector>

#include "matmul.h"
#include "model_config.h"
#include "ringkv/kernels/executor.h"

namespace ringkv::model {

struct LayerWeights {
  std::vector<float> attn_norm;  // [d_model]
  Matrix wq;                     // [q_heads * head_dim, d_model]
  Matrix wk;                     // [kv_heads * head_dim, d_model]
  Matrix wv;                     // [kv_heads * head_dim, d_model]
  Matrix wo;                     // [d_model, q_heads * head_dim]
  std::vector<float> mlp_norm;   // [d_model]
  Matrix w_gate;                 // [mlp_hidden, d_model]
  Matrix w_up;                   // [mlp_hidden, d_model]
  Matrix w_down;                 // [d_model, mlp_hidden]
};

struct Weights {
  Matrix embedding;  // [vocab, d_model]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [d_model]
  Matrix lm_head;                 // [vocab, d_model]
};

// Deterministic in config.seed; every matrix has its own stream, so they are
// drawn in parallel on `pool` with the same result for any thread count.
Weights RandomWeights(const ModelConfig& config, kernels::Executor& pool);

}  // namespace ringkv::model
