#pragma once
// Where one forward pass's attention reads and writes K/V: the layer caches (the
// decode loop) or nothing at all (the no-cache recompute). Everything else in the
// forward pass is shared, so a difference between the two isolates the cache
// stack: positions, ring index, masks, snapshots, speculation.

#include <cstdint>

#include "forward_stats.h"
#include "ringkv/context.h"
#include "ringkv/tensor.h"

namespace ringkv::model {

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  AttentionBackend(const AttentionBackend&) = delete;
  AttentionBackend& operator=(const AttentionBackend&) = delete;

  // Absolute position of the pass's first token (the RoPE position).
  virtual std::int64_t StartPosition() const = 0;
  // q [1, Hq, L, D] and k [1, Hkv, L, D] rotated, v [1, Hkv, L, Dv], all f32 views
  // of the model's row-major [L, H, D] buffers (not contiguous: head h's rows are
  // H * D apart). Writes softmax(q k^T) v into out, a [1, Hq, L, Dv] f32 view of the
  // model's [L, Hq, Dv] buffer. Adds its time to `stats`.
  virtual void Attend(int layer, const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                      Context& ctx, Tensor& out, ForwardStats& stats) = 0;

 protected:
  AttentionBackend() = default;
};

}  // namespace ringkv::model
