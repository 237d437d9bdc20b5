#pragma once
// Attention over a batch of several sequences, without a dense mask: each row's
// visible keys are a range the kernel applies (kernels::RaggedSdpa). Same
// conventions as attention.h: f32 output, any q strides, the caller's `out` of
// any non-overlapping strides; invalid input throws ringkv::Error before
// anything is written; with `out` and a warm context nothing is allocated.

#include <cstdint>
#include <span>

#include "ringkv/batch_history.h"
#include "ringkv/context.h"
#include "ringkv/tensor.h"

namespace ringkv {

// A multi-sequence forward pass: q [1, Hq, N, D] (row i = batch token i), out
// [1, Hq, N, Dv]. Each row attends to exactly the tokens the history lets it see.
Tensor Attention(const Tensor& q, const BatchHistory& history, float scale, Context& ctx);
void Attention(const Tensor& q, const BatchHistory& history, float scale, Context& ctx,
               Tensor& out);

// A padded dense batch without a cache: q [B, Hq, L, D], k [B, Hkv, T, D],
// v [B, Hkv, T, Dv], out [B, Hq, L, Dv]. Batch entry b has query_lengths[b] real
// queries (rows past it are padding: their output is zero) and key_lengths[b] real
// keys (keys past it are never read); its query i sits at position offsets[b] + i
// and key t at position t (no offsets: offsets[b] = key_lengths[b] - query_lengths[b],
// the queries are the last real tokens, so a causal or windowed batch needs
// query_lengths[b] <= key_lengths[b]). A query at p sees keys at t <= p when
// causal and, with a window w >= 1, only t > p - w (the window counts the query
// itself, as the rotating cache's does; docs/batched_attention.md compares it
// with the multi-sequence cache's). Each span has B entries (offsets may be empty).
struct PaddedBatch {
  std::span<const std::int64_t> query_lengths;
  std::span<const std::int64_t> key_lengths;
  std::span<const std::int64_t> offsets;
  bool causal = true;
  std::int64_t window = 0;  // 0: no window
};
Tensor ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const PaddedBatch& batch, float scale, Context& ctx);
void ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                               const PaddedBatch& batch, float scale, Context& ctx, Tensor& out);

}  // namespace ringkv
