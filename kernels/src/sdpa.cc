// The SDPA driver: validates the parameters (GSL Expects: lib/ has already checked
// user input), splits the work into tiles, runs the tier's attend kernel on the
// executor, in the caller's workspace, and writes acc / l. When (batch, kv head, row tile) gives
// too few tasks for the threads, the key axis is split into chunks as well (flash-decoding) and the
// chunks' partial states are merged afterwards.
#include "ringkv/kernels/sdpa.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <gsl/assert>
#include <limits>
#include <new>

#include "attend_tile.h"
#include "hadamard.h"
#include "sdpa_tuning.h"

namespace ringkv::kernels {
namespace {

constexpr std::int64_t kPad = 16;  // floats: 64 bytes
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::int64_t RoundUp(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }
std::int64_t CeilDiv(std::int64_t x, std::int64_t y) { return (x + y - 1) / y; }

// The shapes every part of the call agrees on.
struct Dims {
  std::int64_t batch, hq, hkv, group, seq_l, seq_t, d, dv, segments;
  bool rotate_q;    // K is kI4H: each tile's query rows are rotated into scratch
  bool rotate_out;  // V is kI4H: each output row is rotated back (set by Validate)
  bool quantized;   // K and V quantized
};

Dims DimsOf(const SdpaShape& shape) {
  Expects(shape.batch >= 1 && shape.q_heads >= 1 && shape.queries >= 1 && shape.key_dim >= 1 &&
          shape.value_dim >= 1 && shape.segments >= 1 && shape.keys >= 0);
  Expects(shape.kv_heads >= 1 && shape.q_heads % shape.kv_heads == 0);
  return Dims{shape.batch,    shape.q_heads,      shape.kv_heads, shape.q_heads / shape.kv_heads,
              shape.queries,  shape.keys,         shape.key_dim,  shape.value_dim,
              shape.segments, shape.rotated_keys, false,          shape.quantized};
}

Dims Validate(const SdpaParams& p, const KernelTable& table) {
  Expects(table.attend != nullptr);
  Expects(p.q.data != nullptr && p.q.dtype == DType::kF32 && p.out != nullptr);
  Expects(!p.kv.empty());
  const KvSegment& first = p.kv.front();
  Dims dims = DimsOf(ShapeOf(p));
  // The kernels walk q's innermost axis contiguously; out is written with its strides.
  Expects(p.q.strides[3] == 1 || dims.d == 1);
  for (const KvSegment& seg : p.kv) {
    Expects(seg.k.data != nullptr && seg.v.data != nullptr);
    Expects(seg.k.dtype == first.k.dtype && seg.v.dtype == first.v.dtype);
    Expects(seg.k.shape[0] == dims.batch && seg.v.shape[0] == dims.batch);
    Expects(seg.k.shape[1] == dims.hkv && seg.v.shape[1] == dims.hkv);
    Expects(seg.k.shape[2] == seg.v.shape[2] && seg.k.shape[2] >= 0);
    Expects(seg.k.shape[3] == dims.d && seg.v.shape[3] == dims.dv);
    Expects(seg.k.strides[3] == 1 || dims.d == 1);
    Expects(seg.v.strides[3] == 1 || dims.dv == 1);
  }
  // Float K/V share one dtype; quantized ones are rows of bytes (dtype.h).
  const DType kd = first.k.dtype;
  const DType vd = first.v.dtype;
  Expects(IsQuantized(kd) ? IsQuantized(vd) : kd == vd && IsKnownDType(kd));
  Expects(!IsInt4(kd) || dims.d % kI4Group == 0);
  Expects(!IsInt4(vd) || dims.dv % kI4Group == 0);
  Expects(dims.rotate_q == (kd == DType::kI4H));
  Expects(dims.quantized == IsQuantized(kd));
  dims.rotate_out = vd == DType::kI4H;
  if (IsQuantized(kd)) {
    for (const KvSegment& seg : p.kv) Expects(seg.k.strides[3] == 1 && seg.v.strides[3] == 1);
  }
  switch (p.mask.kind) {
    case MaskKind::kNone:
    case MaskKind::kCausal:
      break;
    case MaskKind::kWindow:
    case MaskKind::kSlidingWindow:
      Expects(p.mask.window >= 1);
      break;
    case MaskKind::kAdditive:
    case MaskKind::kBoolean:
      Expects(p.mask.data != nullptr);
      break;
  }
  return dims;
}

// One task: a row tile of one (batch, kv head) against one chunk of its keys.
struct Plan {
  std::int64_t rows_per_tile;   // Lt
  std::int64_t row_tiles;       // ceil(L / Lt)
  std::int64_t base_tasks;      // batch * hkv * row_tiles
  std::int64_t chunks;          // key chunks per base task
  std::int64_t tile_rows;       // G * Lt: state rows per task
  std::int64_t key_block;       // keys per inner block of the attend kernel
  std::int64_t acc_stride;      // Dv rounded up to 16
  std::int64_t scratch_floats;  // the attend kernel's
  std::int64_t q_floats;        // rotated query rows (kI4H keys), else 0
  std::int64_t state_floats;    // m, l, acc of one task
  // The workspace: [runs | per-worker scratch | partial states], each part 64-byte aligned.
  std::int64_t run_bytes;     // batch * hkv * segments KvRuns, rounded up to 64
  std::int64_t per_worker;    // floats: scratch, rotated q (+ state when nothing is merged)
  std::int64_t total_floats;  // per_worker * threads (+ every task's state when split)
};

Plan MakePlan(const Dims& dims, const SdpaTuning& tuning, int threads) {
  Plan plan{};
  plan.rows_per_tile = std::clamp<std::int64_t>(tuning.tile_rows / dims.group, 1, dims.seq_l);
  plan.row_tiles = CeilDiv(dims.seq_l, plan.rows_per_tile);
  plan.base_tasks = dims.batch * dims.hkv * plan.row_tiles;
  plan.chunks = 1;
  const std::int64_t wanted = tuning.tasks_per_thread * threads;
  if (threads > 1 && plan.base_tasks < wanted) {
    const std::int64_t by_length = std::max<std::int64_t>(1, dims.seq_t / tuning.min_chunk_keys);
    plan.chunks = std::min(CeilDiv(wanted, plan.base_tasks), by_length);
  }
  plan.tile_rows = dims.group * plan.rows_per_tile;
  plan.key_block =
      plan.tile_rows <= tuning.decode_tile_rows ? tuning.decode_key_block : tuning.key_block;
  plan.acc_stride = RoundUp(dims.dv, kPad);
  plan.scratch_floats = plan.tile_rows * (RoundUp(dims.d, kPad) + plan.key_block + kPad);
  plan.scratch_floats +=
      BlockScratchFloats(plan.tile_rows, plan.key_block, dims.d, dims.dv, dims.quantized);
  plan.q_floats = dims.rotate_q ? plan.tile_rows * RoundUp(dims.d, kPad) : 0;
  plan.state_floats = RoundUp(plan.tile_rows, kPad) * 2 + plan.tile_rows * plan.acc_stride;
  const bool split = plan.chunks > 1;
  plan.run_bytes =
      RoundUp(dims.batch * dims.hkv * dims.segments * static_cast<std::int64_t>(sizeof(KvRun)),
              static_cast<std::int64_t>(kSdpaWorkspaceAlignment));
  plan.per_worker = plan.scratch_floats + plan.q_floats + (split ? 0 : plan.state_floats);
  plan.total_floats =
      plan.per_worker * threads + (split ? plan.state_floats * plan.base_tasks * plan.chunks : 0);
  return plan;
}

// Where the state of one task lives inside a block of state_floats.
struct StateView {
  float* m;    // [tile_rows]
  float* l;    // [tile_rows]
  float* acc;  // [tile_rows, acc_stride]
};

// kI4H rows as the attend kernels read them: kI4 (the driver does the rotations).
DType Unrotated(DType dtype) { return dtype == DType::kI4H ? DType::kI4 : dtype; }

StateView ViewState(float* base, const Plan& plan) {
  const std::int64_t rows_pad = RoundUp(plan.tile_rows, kPad);
  return {base, base + rows_pad, base + 2 * rows_pad};
}

constexpr auto kFloatBytes = static_cast<std::int64_t>(sizeof(float));

// Which rows a base task (a task without its key chunk) covers: query rows
// [l0, l0 + rows) of kv head kvh's group, batch b.
struct TaskRows {
  std::int64_t b;
  std::int64_t kvh;
  std::int64_t l0;
  std::int64_t rows;
};
TaskRows RowsOf(const Dims& dims, const Plan& plan, std::int64_t base) {
  const std::int64_t l0 = base % plan.row_tiles * plan.rows_per_tile;
  return {base / (plan.row_tiles * dims.hkv), base / plan.row_tiles % dims.hkv, l0,
          std::min(plan.rows_per_tile, dims.seq_l - l0)};
}

// The first query row of a task's tile (head 0 of its group, row l0).
const float* FirstQueryRow(const SdpaParams& p, const Dims& dims, const TaskRows& at) {
  return static_cast<const float*>(p.q.data) + at.b * p.q.strides[0] +
         at.kvh * dims.group * p.q.strides[1] + at.l0 * p.q.strides[2];
}

// Output row l of query head g of kv head kvh's group, batch b.
float* OutputRow(const SdpaParams& p, const Dims& dims, std::int64_t b, std::int64_t kvh,
                 std::int64_t g, std::int64_t l) {
  return p.out + b * p.out_strides[0] + (kvh * dims.group + g) * p.out_strides[1] +
         l * p.out_strides[2];
}

// out row (g, i) of the tile = acc / l, or 0 for a row with no visible key
// (l == 0 exactly then; a NaN l, from a NaN score, gives NaN). acc is rotated
// back in place first when V is kI4H (its last use).
void WriteRows(const SdpaParams& p, const Dims& dims, std::int64_t b, std::int64_t kvh,
               std::int64_t l0, std::int64_t rows, const Plan& plan, const StateView& state) {
  for (std::int64_t g = 0; g < dims.group; ++g) {
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::int64_t r = g * rows + i;  // the kernel's state row order
      float* o = OutputRow(p, dims, b, kvh, g, l0 + i);
      float* acc = state.acc + r * plan.acc_stride;
      if (dims.rotate_out) RotateRow(acc, static_cast<std::size_t>(dims.dv));
      const float l = state.l[r];
      const float inv = l != 0.0f ? 1.0f / l : 0.0f;
      std::int64_t c = 0;
      if (p.out_strides[3] == 1) {
        // Four values a store: one scalar store per value left prefill's output
        // writes waiting on the store buffer (docs/attention_tuning.md, prefill).
        using Float4 = float __attribute__((vector_size(16)));
        for (; c + 4 <= dims.dv; c += 4) {
          Float4 x;
          std::memcpy(&x, acc + c, sizeof x);
          x *= inv;
          std::memcpy(o + c, &x, sizeof x);
        }
      }
      for (; c < dims.dv; ++c) o[c * p.out_strides[3]] = acc[c] * inv;
    }
  }
}

}  // namespace

bool RoundsQuantizedToInt16(Isa isa) noexcept { return isa != Isa::kScalar; }

bool RoundsBf16Queries(Isa isa) noexcept {
  const KernelTable* table = KernelsFor(isa);
  return table != nullptr && table->attend_rounds_bf16_queries;
}

bool RoundsBf16Weights(Isa isa) noexcept {
  const KernelTable* table = KernelsFor(isa);
  return table != nullptr && table->attend_rounds_bf16_weights;
}

SdpaShape ShapeOf(const SdpaParams& params) noexcept {
  SdpaShape shape;
  shape.batch = params.q.shape[0];
  shape.q_heads = params.q.shape[1];
  shape.queries = params.q.shape[2];
  shape.key_dim = params.q.shape[3];
  shape.segments = static_cast<std::int64_t>(params.kv.size());
  if (!params.kv.empty()) {
    shape.kv_heads = params.kv.front().k.shape[1];
    shape.value_dim = params.kv.front().v.shape[3];
  }
  for (const KvSegment& seg : params.kv) shape.keys += seg.k.shape[2];
  shape.rotated_keys = !params.kv.empty() && params.kv.front().k.dtype == DType::kI4H;
  shape.quantized = !params.kv.empty() && IsQuantized(params.kv.front().k.dtype);
  return shape;
}

std::size_t SdpaWorkspaceBytes(const SdpaShape& shape, int concurrency) noexcept {
  Expects(concurrency >= 1);
  const Plan plan = MakePlan(DimsOf(shape), SdpaTuning{}, concurrency);
  return static_cast<std::size_t>(plan.run_bytes) +
         static_cast<std::size_t>(plan.total_floats) * sizeof(float);
}

void Sdpa(const SdpaParams& params, const KernelTable& table, Executor& executor,
          std::span<std::byte> workspace) noexcept {
  const SdpaTuning tuning;
  const Dims dims = Validate(params, table);
  const int threads = executor.Concurrency();
  Expects(threads >= 1);
  const Plan plan = MakePlan(dims, tuning, threads);
  Expects(workspace.size() >= static_cast<std::size_t>(plan.run_bytes) +
                                  static_cast<std::size_t>(plan.total_floats) * sizeof(float));
  Expects(reinterpret_cast<std::uintptr_t>(workspace.data()) % kSdpaWorkspaceAlignment == 0);

  // [batch, hkv, segments]: every segment offset to its (batch, kv head).
  const std::int64_t segments = dims.segments;
  auto* const runs = reinterpret_cast<KvRun*>(workspace.data());
  for (std::int64_t b = 0; b < dims.batch; ++b) {
    for (std::int64_t h = 0; h < dims.hkv; ++h) {
      std::int64_t begin = 0;
      for (std::int64_t j = 0; j < segments; ++j) {
        const KvSegment& seg = params.kv[static_cast<std::size_t>(j)];
        const auto k_elem = static_cast<std::int64_t>(SizeOf(seg.k.dtype));
        const auto v_elem = static_cast<std::int64_t>(SizeOf(seg.v.dtype));
        KvRun& run = *new (runs + (b * dims.hkv + h) * segments + j) KvRun;
        run.k = static_cast<const std::byte*>(seg.k.data) +
                (b * seg.k.strides[0] + h * seg.k.strides[1]) * k_elem;
        run.v = static_cast<const std::byte*>(seg.v.data) +
                (b * seg.v.strides[0] + h * seg.v.strides[1]) * v_elem;
        run.k_stride = seg.k.strides[2];
        run.v_stride = seg.v.strides[2];
        run.begin = begin;
        run.count = seg.k.shape[2];
        begin += run.count;
      }
    }
  }

  // Per-worker scratch (+ state when nothing is merged), then the partial states
  // of every task when the keys are split into chunks.
  const bool split = plan.chunks > 1;
  const std::int64_t per_worker = plan.per_worker;
  const std::int64_t total_tasks = plan.base_tasks * plan.chunks;
  float* const floats = reinterpret_cast<float*>(workspace.data() + plan.run_bytes);
  float* const partials = floats + per_worker * threads;

  const auto run_task = [&](std::size_t task_index, int worker) {
    const auto task = static_cast<std::int64_t>(task_index);
    const std::int64_t chunk = task % plan.chunks;
    const std::int64_t base = task / plan.chunks;
    const TaskRows here = RowsOf(dims, plan, base);
    const auto [b, kvh, l0, rows] = here;
    const std::int64_t pos0 = dims.seq_t - dims.seq_l + l0;

    // Keys any row of the tile can see; the rest are never touched.
    std::int64_t lo = 0;
    std::int64_t hi = dims.seq_t;
    if (params.mask.kind == MaskKind::kCausal || params.mask.kind == MaskKind::kSlidingWindow) {
      hi = std::clamp<std::int64_t>(pos0 + rows, 0, dims.seq_t);
    }
    if (params.mask.kind == MaskKind::kWindow || params.mask.kind == MaskKind::kSlidingWindow) {
      lo = std::clamp<std::int64_t>(pos0 - params.mask.window + 1, 0, dims.seq_t);
    }
    hi = std::max(hi, lo);

    Expects(worker >= 0 && worker < threads);
    float* worker_base = floats + per_worker * worker;
    const StateView state = ViewState(split ? partials + task * plan.state_floats
                                            : worker_base + plan.scratch_floats + plan.q_floats,
                                      plan);

    AttendTile tile;
    tile.k_dtype = Unrotated(params.kv.front().k.dtype);
    tile.v_dtype = Unrotated(params.kv.front().v.dtype);
    tile.d = dims.d;
    tile.dv = dims.dv;
    tile.scale = params.scale;
    tile.q = FirstQueryRow(params, dims, here);
    tile.q_head_stride = params.q.strides[1];
    tile.q_row_stride = params.q.strides[2];
    if (dims.rotate_q) {
      float* q_rot = worker_base + plan.scratch_floats;
      const std::int64_t d_pad = RoundUp(dims.d, kPad);
      for (std::int64_t g = 0; g < dims.group; ++g) {
        for (std::int64_t i = 0; i < rows; ++i) {
          float* row = q_rot + (g * rows + i) * d_pad;
          std::copy_n(tile.q + g * tile.q_head_stride + i * tile.q_row_stride, dims.d, row);
          RotateRow(row, static_cast<std::size_t>(dims.d));
        }
      }
      tile.q = q_rot;
      tile.q_head_stride = rows * d_pad;
      tile.q_row_stride = d_pad;
    }
    tile.heads = dims.group;
    tile.rows = rows;
    tile.runs = runs + (b * dims.hkv + kvh) * segments;
    tile.run_count = segments;
    tile.t0 = lo + (hi - lo) * chunk / plan.chunks;
    tile.t1 = lo + (hi - lo) * (chunk + 1) / plan.chunks;
    tile.mask_kind = params.mask.kind;
    tile.pos0 = pos0;
    tile.window = params.mask.window;
    if (params.mask.kind == MaskKind::kAdditive || params.mask.kind == MaskKind::kBoolean) {
      const std::array<std::int64_t, 4>& ms = params.mask.strides;
      const std::int64_t off = b * ms[0] + kvh * dims.group * ms[1] + l0 * ms[2];
      const auto elem = params.mask.kind == MaskKind::kAdditive ? std::int64_t{4} : 1;
      tile.mask = static_cast<const std::byte*>(params.mask.data) + off * elem;
      tile.mask_head_stride = ms[1];
      tile.mask_row_stride = ms[2];
      tile.mask_key_stride = ms[3];
    }
    if (!split && dims.group * rows >= kDequantTileRows) {
      // A prefill tile: the next tile this worker is likely to take (the pool
      // hands tasks out in order, one per worker at a time) reads its queries,
      // and WriteRows below writes this tile's output.
      const std::int64_t next = base + threads;  // unsplit: tasks are base tasks
      if (next < plan.base_tasks) {
        const TaskRows at = RowsOf(dims, plan, next);
        tile.warm[0] = WarmRows{.first = FirstQueryRow(params, dims, at),
                                .head_stride = params.q.strides[1] * kFloatBytes,
                                .row_stride = params.q.strides[2] * kFloatBytes,
                                .heads = dims.group,
                                .rows = at.rows,
                                .bytes = dims.d * kFloatBytes};
      }
      if (params.out_strides[3] == 1) {
        tile.warm[1] = WarmRows{.first = OutputRow(params, dims, b, kvh, 0, l0),
                                .head_stride = params.out_strides[1] * kFloatBytes,
                                .row_stride = params.out_strides[2] * kFloatBytes,
                                .heads = dims.group,
                                .rows = rows,
                                .bytes = dims.dv * kFloatBytes,
                                .write = true};
      }
    }
    tile.block = plan.key_block;
    tile.scratch = worker_base;
    tile.m = state.m;
    tile.l = state.l;
    tile.acc = state.acc;
    tile.acc_stride = plan.acc_stride;
    table.attend(tile);
    if (!split) WriteRows(params, dims, b, kvh, l0, rows, plan, state);
  };
  executor.Run(static_cast<std::size_t>(total_tasks), run_task);
  if (!split) return;

  // Flash-decoding merge: rescale each chunk's state to the common max.
  const auto merge_task = [&](std::size_t base_index, int /*worker*/) {
    const auto base = static_cast<std::int64_t>(base_index);
    const auto [b, kvh, l0, rows] = RowsOf(dims, plan, base);
    const StateView into = ViewState(partials + base * plan.chunks * plan.state_floats, plan);
    for (std::int64_t r = 0; r < dims.group * rows; ++r) {
      // The max over the chunks; a NaN max (a NaN score in that chunk) wins, so
      // the row is NaN however the keys were split.
      float m = kNegInf;
      for (std::int64_t c = 0; c < plan.chunks; ++c) {
        const float cm =
            ViewState(partials + (base * plan.chunks + c) * plan.state_floats, plan).m[r];
        if (cm > m || cm != cm) m = cm;
        if (m != m) break;
      }
      float* acc = into.acc + r * plan.acc_stride;
      if (m == kNegInf) {
        into.l[r] = 0.0f;
        continue;
      }
      const float w0 = std::exp(into.m[r] - m);
      float l = into.l[r] * w0;
      for (std::int64_t e = 0; e < dims.dv; ++e) acc[e] *= w0;
      for (std::int64_t c = 1; c < plan.chunks; ++c) {
        const StateView from =
            ViewState(partials + (base * plan.chunks + c) * plan.state_floats, plan);
        const float w = std::exp(from.m[r] - m);
        l += from.l[r] * w;
        const float* src = from.acc + r * plan.acc_stride;
        for (std::int64_t e = 0; e < dims.dv; ++e) acc[e] += src[e] * w;
      }
      into.l[r] = l;
    }
    WriteRows(params, dims, b, kvh, l0, rows, plan, into);
  };
  executor.Run(static_cast<std::size_t>(plan.base_tasks), merge_task);
}

}  // namespace ringkv::kernels
