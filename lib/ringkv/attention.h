#pragma once
// The library's attention entry points. They validate every input with
// ringkv::Error and run kernels::Sdpa on the context's executor and kernel tier,
// with its scratch in the context's arena. Output: [1, Hq, L, Dv] f32.
//
// Each comes in two forms: one returns a fresh output tensor; the other writes
// into the caller's `out` and, once the context's arena has grown to the call's
// size (the first call of that size), allocates nothing on the heap for the
// structural masks (none, causal, window, sliding window). A mask array or
// relaxed cells are materialised per call.
//
// q may have any strides; an f32 q with a unit inner stride is read in place,
// any other is converted into the context's arena first.
//
// The caller's out: f32, shape [1, Hq, L, Dv], any strides whose elements do not
// overlap one another, and memory that overlaps neither q, k, v, the mask nor the
// cache's blocks (checked, by byte range). Every element in view is written; the
// elements between them (gaps in the strides) are not touched. Invalid input
// throws ringkv::Error before anything is written, so out keeps its values.

#include "ringkv/attention_mask.h"
#include "ringkv/context.h"
#include "ringkv/kv_history.h"
#include "ringkv/tensor.h"

namespace ringkv {

// softmax(scale * q K^T + mask) V over a cache's history. The history knows how
// its storage order relates to the logical order and turns `logical_mask` (keys
// in logical order) into the mask over the stored order; the stored blocks go
// to the kernel in place, without a copy. q: [1, Hq, L, D], any float dtype, Hq
// a multiple of Hkv.
Tensor Attention(const Tensor& q, const KVHistory& history, const AttentionMask& logical_mask,
                 float scale, Context& ctx);
void Attention(const Tensor& q, const KVHistory& history, const AttentionMask& logical_mask,
               float scale, Context& ctx, Tensor& out);

// The same over plain tensors: q [1, Hq, L, D], k [1, Hkv, T, D], v [1, Hkv, T, Dv]
// (k and v of one dtype; strided views are fine; a k or v without a unit inner
// stride is copied per call).
Tensor ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const AttentionMask& mask, float scale, Context& ctx);
void ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                               const AttentionMask& mask, float scale, Context& ctx, Tensor& out);

}  // namespace ringkv
