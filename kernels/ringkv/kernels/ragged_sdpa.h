#pragma once
// Scaled-dot-product attention over a ragged batch: query rows that each read
// their own list of key/value runs and, inside that list, their own range of
// visible keys. Nothing here knows what a sequence or a cache is: lib/ turns a
// multi-sequence batch (or a padded dense batch) into these arrays.
//
//   out[h, r] = softmax_t(scale * q[h, r] . k_t) v_t   over the keys t of row r's
//               group with index in [row_lo[r], row_hi[r])
//
// q [1, Hq, N, D] f32 (N rows), out [1, Hq, N, Dv] f32. GQA: query head h reads
// kv head h / (Hq / Hkv). A row whose range is empty (or that belongs to no group)
// yields zeros. No [rows x keys] mask is ever built.
//
// K/V are read in place as stored, float or quantized (dtype.h), as Sdpa reads
// them: a cache's blocks are attended without a dequantised copy, which would
// cost a pass over every key and a buffer as large as the keys. kI4H rows are
// never rotated back: q.k is invariant under the rotation, so each task rotates
// its few query rows into worker scratch instead (the workspace grows with
// RaggedSdpaShape::rotated_keys), and V's rotation, being linear, is undone once
// per output row on the finished state rather than once per key.
//
// Shared prefixes (cascade attention): groups may name one prefix, a list of
// runs that comes first in each of their key lists. The kernel reads a prefix's
// keys once for the rows of every group that names it and merges that partial
// softmax state with each group's own suffix by the online-softmax merge, so a
// prompt shared by 16 sequences is read once per step, not 16 times.

#include <cstddef>
#include <cstdint>
#include <span>

#include "ringkv/kernels/dtype.h"
#include "ringkv/kernels/executor.h"
#include "ringkv/kernels/kernel_table.h"
#include "ringkv/kernels/sdpa.h"

namespace ringkv::kernels {

// `count` consecutive keys. Key j of kv head h is at
//   k + k_byte_offset + (h * k_head_stride + j * k_row_stride) * SizeOf(k_dtype)
// (and the same for v); D and Dv are contiguous (a quantized row is its bytes).
struct RaggedRun {
  const void* k = nullptr;
  const void* v = nullptr;
  std::int64_t count = 0;
  std::int64_t k_head_stride = 0;  // elements, or bytes of quantized rows
  std::int64_t k_row_stride = 0;
  std::int64_t v_head_stride = 0;
  std::int64_t v_row_stride = 0;
};

// Runs [first_run, first_run + run_count) of RaggedSdpaParams::runs, read once
// for every group that names it.
struct RaggedPrefix {
  std::int64_t first_run = 0;
  std::int64_t run_count = 0;
};

// Rows that read the same key list: its prefix's runs (if any), then its own
// runs [first_run, first_run + run_count), concatenated in that order; key index
// 0 is the prefix's first key. The group's rows are the q/out rows
// rows[first_row], ..., rows[first_row + row_count - 1] of RaggedSdpaParams::rows.
struct RaggedGroup {
  std::int64_t first_row = 0;
  std::int64_t row_count = 0;
  std::int64_t prefix = -1;  // index into prefixes, or -1
  std::int64_t first_run = 0;
  std::int64_t run_count = 0;
};

struct RaggedSdpaParams {
  ArrayRef q;  // [1, Hq, N, D] f32, D contiguous
  // f32 / f16 / bf16 (the same for both), or both quantized (dtype.h; they may
  // then differ). Run strides count elements of a float dtype, bytes of quantized rows.
  DType k_dtype = DType::kF32;
  DType v_dtype = DType::kF32;
  std::int64_t kv_heads = 0;   // Hkv; Hq is a multiple
  std::int64_t value_dim = 0;  // Dv (D is q's)
  // Added to every run's k and v pointer (in bytes): lets one list of runs serve
  // several arrays laid out alike at fixed distances (e.g. one per layer).
  std::ptrdiff_t k_byte_offset = 0;
  std::ptrdiff_t v_byte_offset = 0;

  std::span<const RaggedRun> runs;
  std::span<const RaggedPrefix> prefixes;
  std::span<const RaggedGroup> groups;
  std::span<const std::int64_t> rows;  // q/out row indices in [0, N), each at most once
  // Per q/out row r in [0, N): the visible keys [row_lo[r], row_hi[r]) of its group's list,
  // clipped to the list (so either bound may lie outside it); ignored for rows in no group.
  std::span<const std::int64_t> row_lo;
  std::span<const std::int64_t> row_hi;

  float* out = nullptr;                       // [1, Hq, N, Dv] f32
  std::array<std::int64_t, 4> out_strides{};  // in elements
  float scale = 1.0f;
};

// The sizes a call's scratch depends on.
struct RaggedSdpaShape {
  std::int64_t q_heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t rows = 0;  // N
  std::int64_t key_dim = 0;
  std::int64_t value_dim = 0;
  std::int64_t runs = 0;
  std::int64_t prefixes = 0;
  std::int64_t groups = 0;
  std::int64_t keys = 0;      // the sum of every run's count
  bool rotated_keys = false;  // K is kI4H: each worker keeps rotated query rows
  bool quantized = false;     // K and V quantized (prefill tiles dequantize blocks in scratch)
};

// The shape of `params` (reads sizes only, never data).
RaggedSdpaShape ShapeOf(const RaggedSdpaParams& params) noexcept;

// Bytes of scratch one RaggedSdpa call of `shape` needs on an executor whose
// Concurrency() is `concurrency`, aligned to kSdpaWorkspaceAlignment.
std::size_t RaggedSdpaWorkspaceBytes(const RaggedSdpaShape& shape, int concurrency) noexcept;

// Runs on `executor` with the kernels of `table`, scratch carved from
// `workspace` (at least RaggedSdpaWorkspaceBytes(ShapeOf(params), concurrency)
// bytes). Parameters must be consistent (GSL Expects; lib/ validates user input).
// Writes every row of out (zeros for rows without visible keys); allocates nothing.
void RaggedSdpa(const RaggedSdpaParams& params, const KernelTable& table, Executor& executor,
                std::span<std::byte> workspace) noexcept;

}  // namespace ringkv::kernels
