#pragma once
// The two ways the model attends: through a cache's history (the decode loop) and
// over the whole uncached sequence (the recompute the tests compare against).
// Both are the library's entry points (ringkv/attention.h); the logical mask of a
// decode step is causal, and the history's mask applier adapts it to the cache's
// storage order (none at all for a rotating cache at L == 1).

#include "ringkv/attention.h"
#include "ringkv/attention_mask.h"
#include "ringkv/context.h"
#include "ringkv/kv_history.h"
#include "ringkv/tensor.h"

namespace ringkv::model {

// q [1, Hq, L, D]; out [1, Hq, L, Dv] f32, written in place.
inline void AttendCached(const Tensor& q, const KVHistory& history, float scale, Context& ctx,
                         Tensor& out) {
  Attention(q, history, AttentionMask::Causal(), scale, ctx, out);
}

// q [1, Hq, L, D], k [1, Hkv, T, D], v [1, Hkv, T, Dv] in one dtype; out as above.
inline void AttendFull(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                       float scale, Context& ctx, Tensor& out) {
  ScaledDotProductAttention(q, k, v, mask, scale, ctx, out);
}

}  // namespace ringkv::model
