#pragma once
// The library's attention entry points. Both validate every input with
// ringkv::Error and run kernels::Sdpa on the context's pool and kernel table.
// Output: [1, Hq, L, Dv] f32.

#include "ringkv/attention_mask.h"
#include "ringkv/context.h"
#include "ringkv/kv_history.h"
#include "ringkv/tensor.h"

namespace ringkv {

// softmax(scale * q K^T + mask) V over a cache's history. The history's mask
// applier turns `logical_mask` (keys in logical order) into the mask over the
// stored order, and the stored blocks go to the kernel in place, one KvSegment
// per block, without a copy. q: [1, Hq, L, D], any float dtype, Hq a multiple of Hkv.
Tensor Attention(const Tensor& q, const KVHistory& history, const AttentionMask& logical_mask,
                 float scale, Context& ctx);

// The same over plain tensors: q [1, Hq, L, D], k [1, Hkv, T, D], v [1, Hkv, T, Dv]
// (k and v of one dtype; strided views are fine).
Tensor ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const AttentionMask& mask, float scale, Context& ctx);

}  // namespace ringkv
