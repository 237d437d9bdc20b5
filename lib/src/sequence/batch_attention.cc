#include "ringkv/batch_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <gsl/assert>
#include <gsl/narrow>
#include <limits>
#include <memory>
#include <mutex>
#include <span>

#include "../cache/attention_checks.h"
#include "../cache/context_access.h"
#include "batch_plan.h"
#include "kernel_args.h"
#include "ringkv/error.h"
#include "ringkv/format.h"

namespace ringkv {
namespace {

using detail::ByteRange;
using detail::Overlap;
using detail::RangeOf;
using detail::RoundUp;

constexpr const char* kAttention = "Attention";
constexpr const char* kPadded = "ScaledDotProductAttention";

struct KvDims {
  std::int64_t heads, k_dim, v_dim;
};

void CheckRank(const char* function, const char* name, const Tensor& t, const char* layout) {
  if (t.Rank() != 4) {
    throw ShapeError(fmt::format("[{}] {} has rank {} (shape {}), expected 4 {}", function, name,
                                 t.Rank(), t.GetShape(), layout));
  }
}

// The history's plan, checked current and holding keys.
const detail::BatchPlan& CheckHistory(const BatchHistory& history) {
  const detail::BatchPlan* plan = detail::BatchAccess::Current(history, kAttention);
  if (plan == nullptr || plan->rows < 1) {
    throw ShapeError(
        fmt::format("[{}] the history has no rows (an empty BatchHistory)", kAttention));
  }
  if (plan->heads < 1) {
    throw ShapeError(fmt::format(
        "[{}] the history's cache holds no keys for any of its {} rows (no K/V layout yet)",
        kAttention, plan->rows));
  }
  return *plan;
}

void CheckBatchQuery(const Tensor& q, const detail::BatchPlan& plan) {
  CheckRank(kAttention, "q", q, "[1, Hq, N, D]");
  if (q.Dim(0) != 1) {
    throw ShapeError(fmt::format(
        "[{}] q dim 0 is {}, expected 1: a multi-sequence batch is q [1, Hq, N, D], one row per "
        "batch token",
        kAttention, q.Dim(0)));
  }
  if (q.Dim(2) != plan.rows) {
    throw ShapeError(fmt::format("[{}] q dim 2 (rows) is {}, but the history has {} rows",
                                 kAttention, q.Dim(2), plan.rows));
  }
  detail::CheckQueryHeads(kAttention, q, plan.heads, plan.key_dim);
}

// The bytes one run's keys (or values) span, with the layer's byte offset.
ByteRange RunRange(const void* base, std::ptrdiff_t offset, DType dtype, std::int64_t heads,
                   std::int64_t count, std::int64_t dim, std::int64_t head_stride,
                   std::int64_t row_stride) {
  const std::array<std::int64_t, 3> shape{heads, count, dim};
  const std::array<std::int64_t, 3> strides{head_stride, row_stride, 1};
  return RangeOf(static_cast<const std::byte*>(base) + offset, dtype, shape, strides);
}

void CheckOutAgainstRuns(const Tensor& out, const detail::BatchPlan& plan,
                         const BatchHistory& history) {
  const ByteRange out_range = RangeOf(out);
  const std::ptrdiff_t k_offset = detail::BatchAccess::KeyOffset(history);
  const std::ptrdiff_t v_offset = detail::BatchAccess::ValueOffset(history);
  for (const kernels::RaggedRun& run : plan.runs) {
    if (run.count < 1) continue;
    if (Overlap(out_range, RunRange(run.k, k_offset, plan.key_dtype, plan.heads, run.count,
                                    plan.key_dim, run.k_head_stride, run.k_row_stride)) ||
        Overlap(out_range, RunRange(run.v, v_offset, plan.value_dtype, plan.heads, run.count,
                                    plan.value_dim, run.v_head_stride, run.v_row_stride))) {
      throw ShapeError(
          fmt::format("[{}] out (shape {}) overlaps the cached keys or values in memory",
                      kAttention, out.GetShape()));
    }
  }
}

// ---------------------------------------------------------------------------
// The padded dense batch.

struct PaddedDims {
  std::int64_t batch, q_heads, length, keys;  // B, Hq, L, T
  KvDims kv;
};

PaddedDims CheckPaddedShapes(const Tensor& q, const Tensor& k, const Tensor& v) {
  CheckRank(kPadded, "q", q, "[B, Hq, L, D]");
  CheckRank(kPadded, "k", k, "[B, Hkv, T, D]");
  CheckRank(kPadded, "v", v, "[B, Hkv, T, Dv]");
  if (k.Dtype() != v.Dtype()) {
    throw ShapeError(fmt::format("[{}] k dtype {} != v dtype {}", kPadded, k.Dtype(), v.Dtype()));
  }
  if (k.Dim(0) != q.Dim(0) || v.Dim(0) != q.Dim(0) || k.Dim(1) != v.Dim(1) ||
      k.Dim(2) != v.Dim(2)) {
    throw ShapeError(fmt::format(
        "[{}] q shape {}, k shape {} and v shape {} must be [B, Hq, L, D], [B, Hkv, T, D] and "
        "[B, Hkv, T, Dv]",
        kPadded, q.GetShape(), k.GetShape(), v.GetShape()));
  }
  if (q.Dim(0) < 1 || q.Dim(2) < 1 || k.Dim(1) < 1 || k.Dim(2) < 1 || k.Dim(3) < 1 ||
      v.Dim(3) < 1) {
    throw ShapeError(fmt::format("[{}] q shape {}, k shape {} or v shape {} has an empty axis",
                                 kPadded, q.GetShape(), k.GetShape(), v.GetShape()));
  }
  const PaddedDims dims{q.Dim(0), q.Dim(1), q.Dim(2), k.Dim(2), {k.Dim(1), k.Dim(3), v.Dim(3)}};
  detail::CheckQueryHeads(kPadded, q, dims.kv.heads, dims.kv.k_dim);
  return dims;
}

void CheckSpanSize(const char* name, std::size_t size, std::int64_t batch) {
  if (gsl::narrow_cast<std::int64_t>(size) != batch) {
    throw Error(
        fmt::format("[{}] batch.{} has {} entries, expected B = {}", kPadded, name, size, batch));
  }
}

void CheckPaddedBatch(const PaddedBatch& batch, const PaddedDims& dims) {
  CheckSpanSize("query_lengths", batch.query_lengths.size(), dims.batch);
  CheckSpanSize("key_lengths", batch.key_lengths.size(), dims.batch);
  if (!batch.offsets.empty()) CheckSpanSize("offsets", batch.offsets.size(), dims.batch);
  if (batch.window < 0) {
    throw Error(fmt::format("[{}] batch.window is {}, expected >= 0 (0: no window)", kPadded,
                            batch.window));
  }
  const bool positional = batch.causal || batch.window > 0;
  for (std::size_t b = 0; b < batch.query_lengths.size(); ++b) {
    const std::int64_t q_len = batch.query_lengths[b], k_len = batch.key_lengths[b];
    if (q_len < 0 || q_len > dims.length) {
      throw Error(fmt::format("[{}] batch.query_lengths[{}] is {}, outside [0, L = {}]", kPadded, b,
                              q_len, dims.length));
    }
    if (k_len < 0 || k_len > dims.keys) {
      throw Error(fmt::format("[{}] batch.key_lengths[{}] is {}, outside [0, T = {}]", kPadded, b,
                              k_len, dims.keys));
    }
    if (!batch.offsets.empty() && batch.offsets[b] < 0) {
      throw Error(
          fmt::format("[{}] batch.offsets[{}] is {}, expected >= 0", kPadded, b, batch.offsets[b]));
    }
    if (batch.offsets.empty() && positional && q_len > k_len) {
      throw Error(fmt::format(
          "[{}] batch.query_lengths[{}] is {} > batch.key_lengths[{}] = {}: without offsets the "
          "queries are the last real keys, so there must be at least as many keys",
          kPadded, b, q_len, b, k_len));
    }
  }
}

// The keys [lo, hi) a query at `position` of an entry with `keys` real keys sees.
std::array<std::int64_t, 2> VisibleRange(const PaddedBatch& batch, std::int64_t position,
                                         std::int64_t keys) {
  std::int64_t lo = 0, hi = keys;
  if (batch.causal && position < keys) hi = position + 1;
  // position - window cannot overflow: both are >= 0.
  if (batch.window > 0) lo = std::max<std::int64_t>(0, position - batch.window + 1);
  if (lo >= hi) return {0, 0};
  return {lo, hi};
}

// The arena of one padded call, in order: [runs | groups | rows | row_lo | row_hi
// | q as f32 [1, Hq, N, D], when gathered | out as [1, Hq, N, Dv], when staged |
// RaggedSdpa's workspace].
struct PaddedArena {
  std::size_t runs = 0, groups = 0, rows = 0, row_lo = 0, row_hi = 0, q = 0, out = 0, work = 0;
};

// A [B, Hq, L, *] array that the kernel can read as [1, Hq, B * L, *] in place.
bool FoldsBatch(const Tensor& t) { return t.Dim(0) == 1 || t.Stride(0) == t.Dim(2) * t.Stride(2); }

}  // namespace

void Attention(const Tensor& q, const BatchHistory& history, float scale, Context& ctx,
               Tensor& out) {
  const detail::BatchPlan& plan = CheckHistory(history);
  CheckBatchQuery(q, plan);
  detail::CheckOut(kAttention, out, q, plan.value_dim);
  CheckOutAgainstRuns(out, plan, history);

  const kernels::KernelTable& table = detail::ContextAccess::Kernels(ctx);
  kernels::Executor& executor = detail::ContextAccess::Executor(ctx);
  kernels::RaggedSdpaParams params;
  params.q = ToArrayRef(q);
  params.k_dtype = plan.key_dtype;
  params.v_dtype = plan.value_dtype;
  params.kv_heads = plan.heads;
  params.value_dim = plan.value_dim;
  params.k_byte_offset = detail::BatchAccess::KeyOffset(history);
  params.v_byte_offset = detail::BatchAccess::ValueOffset(history);
  params.runs = plan.runs;
  params.prefixes = plan.prefixes;
  params.groups = plan.groups;
  params.rows = plan.group_rows;
  params.row_lo = plan.row_lo;
  params.row_hi = plan.row_hi;
  params.scale = scale;

  // The arena: [q as f32, when converted | RaggedSdpa's workspace].
  const std::int64_t heads = q.Dim(1), rows = plan.rows, dim = plan.key_dim;
  const bool convert_q = !detail::QueryInPlace(q);
  const std::size_t q_bytes =
      convert_q ? RoundUp(static_cast<std::size_t>(q.NumElements()) * sizeof(float)) : 0;
  const std::size_t work_bytes =
      kernels::RaggedSdpaWorkspaceBytes(kernels::ShapeOf(params), executor.Concurrency());
  const std::unique_lock<std::mutex> arena_lock = detail::ContextAccess::Exclusive(ctx);
  const std::span<std::byte> arena =
      detail::ContextAccess::Arena(kAttention, ctx, q_bytes + work_bytes);
  if (convert_q) {
    auto* const q_data = reinterpret_cast<float*>(arena.data());
    detail::ConvertQuery(q, q_data, table);
    params.q.data = q_data;
    params.q.dtype = DType::kF32;
    params.q.strides = {heads * rows * dim, rows * dim, dim, 1};
  }
  params.out = static_cast<float*>(out.MutableData());
  for (int axis = 0; axis < 4; ++axis) {
    params.out_strides[static_cast<std::size_t>(axis)] = out.Stride(axis);
  }
  // RaggedSdpa writes every element in view (zeros for a row that sees no key).
  kernels::RaggedSdpa(params, table, executor, arena.subspan(q_bytes));
}

Tensor Attention(const Tensor& q, const BatchHistory& history, float scale, Context& ctx) {
  const detail::BatchPlan& plan = CheckHistory(history);
  CheckBatchQuery(q, plan);
  Tensor out = Tensor::Uninitialized(DType::kF32, {1, q.Dim(1), plan.rows, plan.value_dim});
  Attention(q, history, scale, ctx, out);
  return out;
}

void ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                               const PaddedBatch& batch, float scale, Context& ctx, Tensor& out) {
  const PaddedDims dims = CheckPaddedShapes(q, k, v);
  CheckPaddedBatch(batch, dims);
  detail::CheckOut(kPadded, out, q, dims.kv.v_dim);
  const ByteRange out_range = RangeOf(out);
  if (Overlap(out_range, RangeOf(k)) || Overlap(out_range, RangeOf(v))) {
    throw ShapeError(
        fmt::format("[{}] out (shape {}) overlaps k (shape {}) or v (shape {}) in "
                    "memory",
                    kPadded, out.GetShape(), k.GetShape(), v.GetShape()));
  }
  // The kernel walks the head dim contiguously (copies only for an unusual layout).
  const Tensor keys = k.Stride(3) == 1 || k.Dim(3) == 1 ? k : k.Contiguous();
  const Tensor values = v.Stride(3) == 1 || v.Dim(3) == 1 ? v : v.Contiguous();

  const std::int64_t batch_size = dims.batch, length = dims.length, heads = dims.q_heads;
  const std::int64_t rows = batch_size * length;  // N: entry b's query i is row b * L + i
  std::int64_t real_rows = 0;
  for (const std::int64_t n : batch.query_lengths) real_rows += n;
  const bool gather_q = !detail::QueryInPlace(q) || !FoldsBatch(q);
  const bool stage_out = !FoldsBatch(out);

  const auto count = [](std::int64_t n) { return static_cast<std::size_t>(n); };
  PaddedArena layout;
  std::size_t at = 0;
  layout.runs = at;
  at += RoundUp(count(batch_size) * sizeof(kernels::RaggedRun));
  layout.groups = at;
  at += RoundUp(count(batch_size) * sizeof(kernels::RaggedGroup));
  layout.rows = at;
  at += RoundUp(count(real_rows) * sizeof(std::int64_t));
  layout.row_lo = at;
  at += RoundUp(count(rows) * sizeof(std::int64_t));
  layout.row_hi = at;
  at += RoundUp(count(rows) * sizeof(std::int64_t));
  layout.q = at;
  if (gather_q) at += RoundUp(count(heads * rows * dims.kv.k_dim) * sizeof(float));
  layout.out = at;
  if (stage_out) at += RoundUp(count(heads * rows * dims.kv.v_dim) * sizeof(float));
  layout.work = at;

  // The shape is known before the arrays are filled: one run and one group per
  // entry with queries and keys.
  std::int64_t groups = 0, total_keys = 0;
  for (std::size_t b = 0; b < count(batch_size); ++b) {
    if (batch.query_lengths[b] > 0 && batch.key_lengths[b] > 0) {
      ++groups;
      total_keys += batch.key_lengths[b];
    }
  }
  kernels::RaggedSdpaShape shape;
  shape.q_heads = heads;
  shape.kv_heads = dims.kv.heads;
  shape.rows = rows;
  shape.key_dim = dims.kv.k_dim;
  shape.value_dim = dims.kv.v_dim;
  shape.runs = groups;
  shape.groups = groups;
  shape.keys = total_keys;

  const kernels::KernelTable& table = detail::ContextAccess::Kernels(ctx);
  kernels::Executor& executor = detail::ContextAccess::Executor(ctx);
  const std::size_t work_bytes = kernels::RaggedSdpaWorkspaceBytes(shape, executor.Concurrency());
  const std::unique_lock<std::mutex> arena_lock = detail::ContextAccess::Exclusive(ctx);
  const std::span<std::byte> arena =
      detail::ContextAccess::Arena(kPadded, ctx, layout.work + work_bytes);
  std::byte* const base = arena.data();

  const std::span<kernels::RaggedRun> runs(
      reinterpret_cast<kernels::RaggedRun*>(base + layout.runs), count(groups));
  const std::span<kernels::RaggedGroup> group_list(
      reinterpret_cast<kernels::RaggedGroup*>(base + layout.groups), count(groups));
  const std::span<std::int64_t> group_rows(reinterpret_cast<std::int64_t*>(base + layout.rows),
                                           count(real_rows));
  const std::span<std::int64_t> row_lo(reinterpret_cast<std::int64_t*>(base + layout.row_lo),
                                       count(rows));
  const std::span<std::int64_t> row_hi(reinterpret_cast<std::int64_t*>(base + layout.row_hi),
                                       count(rows));
  std::uninitialized_default_construct(runs.begin(), runs.end());
  std::uninitialized_default_construct(group_list.begin(), group_list.end());
  std::fill(row_lo.begin(), row_lo.end(), 0);
  std::fill(row_hi.begin(), row_hi.end(), 0);

  const auto k_elem = static_cast<std::int64_t>(SizeOf(keys.Dtype()));
  std::size_t next_group = 0, next_row = 0;
  for (std::int64_t b = 0; b < batch_size; ++b) {
    const std::int64_t q_len = batch.query_lengths[count(b)];
    const std::int64_t k_len = batch.key_lengths[count(b)];
    if (q_len == 0 || k_len == 0) continue;  // its rows belong to no group: zeros
    kernels::RaggedRun& run = runs[next_group];
    run.k = static_cast<const std::byte*>(keys.Data()) + b * keys.Stride(0) * k_elem;
    run.v = static_cast<const std::byte*>(values.Data()) + b * values.Stride(0) * k_elem;
    run.count = k_len;
    run.k_head_stride = keys.Stride(1);
    run.k_row_stride = keys.Stride(2);
    run.v_head_stride = values.Stride(1);
    run.v_row_stride = values.Stride(2);
    kernels::RaggedGroup& group = group_list[next_group];
    group.first_row = gsl::narrow_cast<std::int64_t>(next_row);
    group.row_count = q_len;
    group.first_run = gsl::narrow_cast<std::int64_t>(next_group);
    group.run_count = 1;
    ++next_group;
    const std::int64_t offset = batch.offsets.empty() ? k_len - q_len : batch.offsets[count(b)];
    for (std::int64_t i = 0; i < q_len; ++i) {
      const std::int64_t row = b * length + i;
      group_rows[next_row++] = row;
      // A saturated position only matters beyond every key, where it hides them all.
      const std::int64_t position =
          offset > std::numeric_limits<std::int64_t>::max() - i ? offset : offset + i;
      const std::array<std::int64_t, 2> range = VisibleRange(batch, position, k_len);
      row_lo[count(row)] = range[0];
      row_hi[count(row)] = range[1];
    }
  }
  Ensures(next_group == count(groups));

  kernels::RaggedSdpaParams params;
  params.q = ToArrayRef(q);
  params.q.shape = {1, heads, rows, dims.kv.k_dim};
  if (gather_q) {
    auto* const q_data = reinterpret_cast<float*>(base + layout.q);
    const std::int64_t d = dims.kv.k_dim;
    detail::ConvertQuery(q, q_data, {length * d, rows * d, d}, table);
    params.q.data = q_data;
    params.q.dtype = DType::kF32;
    params.q.strides = {heads * rows * d, rows * d, d, 1};
  }
  params.k_dtype = keys.Dtype();
  params.v_dtype = keys.Dtype();
  params.kv_heads = dims.kv.heads;
  params.value_dim = dims.kv.v_dim;
  params.runs = runs;
  params.groups = group_list;
  params.rows = group_rows;
  params.row_lo = row_lo;
  params.row_hi = row_hi;
  params.scale = scale;
  float* const out_data = static_cast<float*>(out.MutableData());
  const std::int64_t dv = dims.kv.v_dim;
  if (stage_out) {
    params.out = reinterpret_cast<float*>(base + layout.out);
    params.out_strides = {heads * rows * dv, rows * dv, dv, 1};
  } else {
    params.out = out_data;
    params.out_strides = {out.Stride(0), out.Stride(1), out.Stride(2), out.Stride(3)};
  }
  kernels::RaggedSdpa(params, table, executor, arena.subspan(layout.work));

  if (stage_out) {
    const float* staged = params.out;
    for (std::int64_t b = 0; b < batch_size; ++b) {
      for (std::int64_t h = 0; h < heads; ++h) {
        for (std::int64_t i = 0; i < length; ++i) {
          const float* src = staged + h * rows * dv + (b * length + i) * dv;
          float* dst = out_data + b * out.Stride(0) + h * out.Stride(1) + i * out.Stride(2);
          for (std::int64_t c = 0; c < dv; ++c) dst[c * out.Stride(3)] = src[c];
        }
      }
    }
  }
}

Tensor ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const PaddedBatch& batch, float scale, Context& ctx) {
  const PaddedDims dims = CheckPaddedShapes(q, k, v);
  CheckPaddedBatch(batch, dims);
  Tensor out =
      Tensor::Uninitialized(DType::kF32, {dims.batch, dims.q_heads, dims.length, dims.kv.v_dim});
  ScaledDotProductAttention(q, k, v, batch, scale, ctx, out);
  return out;
}

}  // namespace ringkv
