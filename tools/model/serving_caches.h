#pragma once
// The model's caches for serving several sequences at once (the demo's serving
// scene): one ringkv::CausalCache for all global layers and one with a sliding
// window for all sliding layers, each a pool of copy-on-write blocks shared by
// every sequence. Sequence operations go to both pools, all or nothing.
//
// Window conventions: a sliding layer sees the query and window - 1 earlier
// tokens (RotatingKVCache(window), SlidingWindow(window) in the recompute), while
// a CausalCache of window w shows p >= q - w, i.e. w + 1 tokens. The sliding pool
// therefore gets window - 1, so both paths compute the same attention; a model
// window of 1 (only the query itself) has no CausalCache equivalent (its window
// 0 means "no window") and is refused.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "model_config.h"
#include "ringkv/causal_cache.h"

namespace ringkv::model {

// The dtype the pools store for a model K/V dtype: the same one (a CausalCache
// stores every storage dtype, quantized ones included). Kept as the one place
// the report and the memory estimate ask.
DType PoolDtype(DType kv_dtype) noexcept;

struct ServingCachesOptions {
  int max_sequences = 1;
  std::int64_t capacity_tokens = 0;  // per pool
  std::int64_t max_batch = 512;      // tokens per forward pass
  std::int64_t block_tokens = 64;
};

class ServingCaches {
 public:
  // Throws ringkv::Error for a model window of 1 with sliding layers, or
  // options the CausalCache refuses.
  ServingCaches(const ModelConfig& config, const ServingCachesOptions& options);

  // The pool of `kind`'s layers, or null when the model has none.
  CausalCache* Pool(LayerKind kind) const noexcept;
  // The pool a model layer reads and writes, and the layer's index in it.
  CausalCache& PoolOf(int layer) const;
  int IndexInPool(int layer) const;

  // Both pools or neither (the first is put back when the second refuses).
  void StartForward(const Batch& batch);
  void CopyPrefix(SequenceId src, SequenceId dst, Position len);

  // K/V bytes the pools hold: their used blocks (a block shared by several
  // sequences counted once).
  std::size_t UsedBytes() const;
  // What the same tokens would take with no sharing: every sequence's held
  // tokens in blocks of its own.
  std::size_t SeparateBytes() const;

 private:
  ModelConfig config_;
  std::unique_ptr<CausalCache> global_;
  std::unique_ptr<CausalCache> sliding_;
};

}  // namespace ringkv::model
