#pragma once
// The unit of work the SDPA driver (sdpa.cc) hands to a tier's `attend` kernel:
// one (batch, kv head), the G = Hq / Hkv query heads that share that kv head times
// a run of query rows, against the keys [t0, t1) of the global T axis. The kernel
// writes the unnormalised online-softmax state of each query row over those keys:
//   m = max_t s_t,  l = sum_t exp(s_t - m),  acc = sum_t exp(s_t - m) v_t
// with s_t = scale * q.k_t (+ mask), m = -inf and l = 0, acc = 0 when every key is
// masked. The driver merges states of several key ranges and writes acc / l.
//
// Plain data only: this header is included by the per-ISA units, so it must not
// define functions (they would be weak symbols shared across ISA flags).

#include <cstddef>
#include <cstdint>

#include "ringkv/kernels/dtype.h"
#include "ringkv/kernels/sdpa.h"

namespace ringkv::kernels {

// One K/V segment, already offset to the tile's (batch, kv head).
struct KvRun {
  // Strides in SizeOf units of the tile's dtypes (bytes for quantized rows).
  const void* k = nullptr;  // [count, D], rows k_stride apart, D contiguous
  const void* v = nullptr;  // [count, Dv], rows v_stride apart, Dv contiguous
  std::int64_t k_stride = 0;
  std::int64_t v_stride = 0;
  std::int64_t begin = 0;  // global key index of the first row
  std::int64_t count = 0;
};

// Tiles of at least this many state rows (prefill) convert each block's K into
// scratch once, key-major as f32 (key_major-inl.h), and its V rows to f32 unless
// they are f32 already, then attend them with the f32 kernel's register tiles:
// the widening, the conversion and the scales are then paid once per block, not
// once per register tile of rows, and the scores need no horizontal sums.
// Decode tiles (G rows) read the rows in place: each widened vector serves all
// their rows anyway.
inline constexpr std::int64_t kDequantTileRows = 32;

// The scratch floats that converted block takes past the float part: V rows,
// then K key-major (d columns of the block rounded up to 16).
constexpr std::int64_t DequantScratchFloats(std::int64_t block, std::int64_t d,
                                            std::int64_t dv) noexcept {
  return block * ((dv + 15) / 16 * 16) + d * ((block + 15) / 16 * 16);
}

// A decode tile's int16 value weights for int4 V: one per row, key and group of
// kI4Group values, each group's keys this many apart (the block rounded up to
// 32, so that the kernel may store 32 keys at a time).
constexpr std::int64_t DecodeWeightKeys(std::int64_t block) noexcept {
  return (block + 31) / 32 * 32;
}

// The scratch floats a tile of `rows` state rows takes past the float part: the
// converted block of a prefill-sized tile, whatever the dtype (f32 rows use only
// its key-major K; the drivers do not know the dtype from the shape alone), or a
// quantized decode tile's int16 value weights (DecodeWeightKeys per group, two to
// a float).
constexpr std::int64_t BlockScratchFloats(std::int64_t rows, std::int64_t block, std::int64_t d,
                                          std::int64_t dv, bool quantized) noexcept {
  if (rows >= kDequantTileRows) return DequantScratchFloats(block, d, dv);
  return quantized ? rows * DecodeWeightKeys(block) * ((dv + 63) / 64) : 0;
}

// Rows the driver reads or writes right after a tile (the next tile's queries,
// this tile's output): heads x rows runs of `bytes`. Out of the cache they cost
// the driver a stall per line after the tile, because its loops over them do
// too little work to overlap the misses; the kernel requests them a few lines
// per block while it computes instead. A hint: a kernel may ignore it.
struct WarmRows {
  const void* first = nullptr;   // nullptr: nothing to request
  std::int64_t head_stride = 0;  // bytes
  std::int64_t row_stride = 0;   // bytes
  std::int64_t heads = 0;
  std::int64_t rows = 0;
  std::int64_t bytes = 0;  // of each row
  bool write = false;      // requested for writing
};

struct AttendTile {
  // Equal for f32 / f16 / bf16; both quantized (possibly different) otherwise.
  // Never kI4H: the driver rotates q and the output and hands such rows over as kI4.
  DType k_dtype = DType::kF32;
  DType v_dtype = DType::kF32;
  std::int64_t d = 0;   // head dim of q and k
  std::int64_t dv = 0;  // head dim of v
  float scale = 1.0f;

  // Query row (g, i), g < heads, i < rows, is q + g * q_head_stride + i' * q_row_stride
  // with D contiguous, i' = q_rows[i] when q_rows is set (the ragged driver gathers
  // rows that are not evenly spaced), else i; it is state row g * rows + i.
  const float* q = nullptr;
  std::int64_t q_head_stride = 0;
  std::int64_t q_row_stride = 0;
  std::int64_t heads = 0;
  std::int64_t rows = 0;
  const std::int64_t* q_rows = nullptr;  // [rows] or nullptr

  // The segments in key order; only keys in [t0, t1) are attended.
  const KvRun* runs = nullptr;
  std::int64_t run_count = 0;
  std::int64_t t0 = 0;
  std::int64_t t1 = 0;

  // Masking. Row i sits at absolute position pos0 + i (pos0 = T - L + first row).
  MaskKind mask_kind = MaskKind::kNone;
  std::int64_t pos0 = 0;
  std::int64_t window = 0;
  // kAdditive (f32) / kBoolean (uint8): entry (g, i, t) is
  // mask + g * mask_head_stride + i * mask_row_stride + t * mask_key_stride.
  const void* mask = nullptr;
  std::int64_t mask_head_stride = 0;
  std::int64_t mask_row_stride = 0;
  std::int64_t mask_key_stride = 0;

  // Row ranges (the ragged driver; mask_kind is then kNone): when row_lo is set,
  // row i of every head sees only the keys [row_lo[i], row_hi[i]) (empty when
  // row_lo[i] >= row_hi[i]). Tiles of the single-sequence driver leave it unset.
  const std::int64_t* row_lo = nullptr;  // [rows] or nullptr
  const std::int64_t* row_hi = nullptr;  // [rows]

  // Keys per inner block, a multiple of 16 (SdpaTuning::key_block).
  std::int64_t block = 64;
  // 64-byte aligned work space of at least heads * rows * (RoundUp(d, 16) + block + 16)
  // floats: the scaled queries, the scores of one block, per-row factors; with
  // BlockScratchFloats(heads * rows, block, d, dv, quantized) more after them.
  float* scratch = nullptr;

  // Memory to request over the blocks (WarmRows).
  WarmRows warm[2];

  // Outputs, heads * rows each: m[r], l[r] and acc[r * acc_stride + c], c < dv.
  float* m = nullptr;
  float* l = nullptr;
  float* acc = nullptr;
  std::int64_t acc_stride = 0;
};

}  // namespace ringkv::kernels
