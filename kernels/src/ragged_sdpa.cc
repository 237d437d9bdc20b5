// The ragged SDPA driver: builds the plan (ragged_plan.h), then runs on the
// executor, in the caller's workspace,
//   phase 0: the prefix passes' tasks; each (row, q head) keeps its normalised
//            output in out and its (m, l) in the workspace;
//   phase 1: the groups' own tasks; each row merges its prefix state (if any)
//            with its own by the online-softmax merge and writes out;
// each phase followed by the merge of its key chunks when it split any.
// kI4H rows are attended as kI4: tasks rotate their query rows (K), and Finish
// rotates each finished state's acc back (V), once, before it is written or
// merged; the chunk merge is linear and runs on unrotated states.
#include "ringkv/kernels/ragged_sdpa.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <gsl/assert>
#include <limits>
#include <new>

#include "attend_tile.h"
#include "hadamard.h"
#include "ragged_plan.h"
#include "sdpa_tuning.h"

namespace ringkv::kernels {
namespace {

using ragged::Dims;
using ragged::Layout;
using ragged::Plan;
using ragged::Tile;

constexpr std::int64_t kPad = 16;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::int64_t RoundUp(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }

// kI4H rows as the attend kernels read them: kI4 (the driver does the rotations).
DType Unrotated(DType dtype) { return dtype == DType::kI4H ? DType::kI4 : dtype; }

Dims Validate(const RaggedSdpaParams& p, const KernelTable& table) {
  Expects(table.attend != nullptr);
  const Dims dims = ragged::DimsOf(ShapeOf(p));
  Expects(p.q.data != nullptr && p.q.dtype == DType::kF32 && p.out != nullptr);
  Expects(p.q.shape[0] == 1);
  // Float K/V share one dtype; quantized ones are rows of bytes (dtype.h).
  Expects(IsQuantized(p.k_dtype) ? IsQuantized(p.v_dtype)
                                 : p.v_dtype == p.k_dtype && IsKnownDType(p.k_dtype));
  Expects(!IsInt4(p.k_dtype) || dims.d % kI4Group == 0);
  Expects(!IsInt4(p.v_dtype) || dims.dv % kI4Group == 0);
  Expects(dims.rotate_q == (p.k_dtype == DType::kI4H));
  Expects(p.q.strides[3] == 1 || dims.d == 1);
  Expects(static_cast<std::int64_t>(p.row_lo.size()) == dims.n &&
          static_cast<std::int64_t>(p.row_hi.size()) == dims.n);
  for (const RaggedRun& run : p.runs) {
    Expects(run.count >= 0);
    Expects(run.count == 0 || (run.k != nullptr && run.v != nullptr));
  }
  for (const RaggedPrefix& prefix : p.prefixes) {
    Expects(prefix.first_run >= 0 && prefix.run_count >= 0 &&
            prefix.first_run + prefix.run_count <= dims.runs);
  }
  for (const RaggedGroup& group : p.groups) {
    Expects(group.first_row >= 0 && group.row_count >= 0 &&
            group.first_row + group.row_count <= static_cast<std::int64_t>(p.rows.size()));
    Expects(group.prefix >= -1 && group.prefix < dims.prefixes);
    Expects(group.first_run >= 0 && group.run_count >= 0 &&
            group.first_run + group.run_count <= dims.runs);
  }
  return dims;
}

// The online-softmax state of one task: G x rows state rows, row g * rows + i.
struct StateView {
  float* m;
  float* l;
  float* acc;  // [rows, acc_stride]
};

StateView ViewState(float* base, std::int64_t state_rows) {
  const std::int64_t rows_pad = RoundUp(state_rows, kPad);
  return {base, base + rows_pad, base + 2 * rows_pad};
}

// Everything the tasks of one call share.
struct Call {
  const RaggedSdpaParams& params;
  const KernelTable& table;
  const SdpaTuning& tuning;
  const Dims& dims;
  const Layout& layout;
  const Plan& plan;
  std::byte* workspace;
  float* prefix_m;  // [N, Hq]
  float* prefix_l;  // [N, Hq]
  bool rotate_out;  // V is kI4H: every finished acc row is rotated back

  float* Out(std::int64_t h, std::int64_t r) const {
    return params.out + h * params.out_strides[1] + r * params.out_strides[2];
  }
  float* Partial(const Tile& tile, std::int64_t kvh, std::int64_t chunk) const {
    return reinterpret_cast<float*>(workspace + layout.partials_at) +
           (tile.first_partial + kvh * tile.chunks + chunk) * layout.state_floats;
  }
};

// Attention of one tile's rows over one chunk of its keys for one kv head.
void RunTask(const Call& c, const Tile& tile, std::int64_t kvh, std::int64_t chunk, int worker,
             const StateView& state) {
  const RaggedSdpaParams& p = c.params;
  std::byte* const base = c.workspace + c.layout.workers_at + c.layout.worker_bytes * worker;
  auto* const runs = reinterpret_cast<KvRun*>(base);
  float* const scratch = reinterpret_cast<float*>(base + c.layout.scratch_at);
  const std::int64_t span = tile.t1 - tile.t0;
  const std::int64_t t0 = tile.t0 + span * chunk / tile.chunks;
  const std::int64_t t1 = tile.t0 + span * (chunk + 1) / tile.chunks;

  // The runs of the pass's list that hold keys of [t0, t1), offset to the kv head.
  const auto k_elem = static_cast<std::int64_t>(SizeOf(p.k_dtype));
  const auto v_elem = static_cast<std::int64_t>(SizeOf(p.v_dtype));
  std::int64_t run_count = 0;
  std::int64_t begin = 0;
  for (std::int64_t j = tile.first_run; j < tile.first_run + tile.run_count && begin < t1; ++j) {
    const RaggedRun& src = p.runs[static_cast<std::size_t>(j)];
    if (begin + src.count > t0 && src.count > 0) {
      KvRun& run = *new (runs + run_count++) KvRun;
      run.k =
          static_cast<const std::byte*>(src.k) + p.k_byte_offset + kvh * src.k_head_stride * k_elem;
      run.v =
          static_cast<const std::byte*>(src.v) + p.v_byte_offset + kvh * src.v_head_stride * v_elem;
      run.k_stride = src.k_row_stride;
      run.v_stride = src.v_row_stride;
      run.begin = begin;
      run.count = src.count;
    }
    begin += src.count;
  }

  AttendTile t;
  t.k_dtype = Unrotated(p.k_dtype);
  t.v_dtype = Unrotated(p.v_dtype);
  t.d = c.dims.d;
  t.dv = c.dims.dv;
  t.scale = p.scale;
  t.q = static_cast<const float*>(p.q.data) + kvh * c.dims.group * p.q.strides[1];
  t.q_head_stride = p.q.strides[1];
  t.q_row_stride = p.q.strides[2];
  t.heads = c.dims.group;
  t.rows = tile.rows;
  t.q_rows = c.plan.q_row.data() + tile.first_entry;
  if (c.dims.rotate_q) {
    // State row (g, i) of the tile, gathered and rotated: [G, rows, RoundUp(D, 16)].
    float* const q_rot = reinterpret_cast<float*>(base + c.layout.q_at);
    const std::int64_t d_pad = RoundUp(c.dims.d, kPad);
    for (std::int64_t g = 0; g < c.dims.group; ++g) {
      for (std::int64_t i = 0; i < tile.rows; ++i) {
        float* const row = q_rot + (g * tile.rows + i) * d_pad;
        std::copy_n(t.q + g * t.q_head_stride + t.q_rows[i] * t.q_row_stride, c.dims.d, row);
        RotateRow(row, static_cast<std::size_t>(c.dims.d));
      }
    }
    t.q = q_rot;
    t.q_head_stride = tile.rows * d_pad;
    t.q_row_stride = d_pad;
    t.q_rows = nullptr;
  }
  t.runs = runs;
  t.run_count = run_count;
  t.t0 = t0;
  t.t1 = t1;
  t.row_lo = c.plan.lo.data() + tile.first_entry;
  t.row_hi = c.plan.hi.data() + tile.first_entry;
  t.block = c.tuning.key_block;
  t.scratch = scratch;
  t.m = state.m;
  t.l = state.l;
  t.acc = state.acc;
  t.acc_stride = c.layout.acc_stride;
  c.table.attend(t);
}

// Writes a finished state: a prefix tile keeps acc / l in out and (m, l) for the
// own pass; an own tile merges the row's prefix state, if it has one, and writes
// out. A row with no visible key gets 0 (l == 0 exactly then; a NaN l, from a NaN
// score, gives NaN). When V is kI4H, acc is rotated back in place first (its last
// use): the merge below is linear in acc and o_p is already rotated back, so each
// state is rotated exactly once, whether it is stored or merged.
void Finish(const Call& c, const Tile& tile, std::int64_t kvh, const StateView& state) {
  const std::int64_t hq = c.dims.hq;
  const std::int64_t os = c.params.out_strides[3];
  for (std::int64_t g = 0; g < c.dims.group; ++g) {
    const std::int64_t h = kvh * c.dims.group + g;
    for (std::int64_t i = 0; i < tile.rows; ++i) {
      const std::int64_t sr = g * tile.rows + i;
      const std::int64_t r = c.plan.q_row[static_cast<std::size_t>(tile.first_entry + i)];
      float* const o = c.Out(h, r);
      float* const acc = state.acc + sr * c.layout.acc_stride;
      const float m = state.m[sr];
      const float l = state.l[sr];
      // m == -inf: no visible key, acc is 0 or unused.
      if (c.rotate_out && m != kNegInf) RotateRow(acc, static_cast<std::size_t>(c.dims.dv));
      if (tile.pass_prefix >= 0) {
        c.prefix_m[r * hq + h] = m;
        c.prefix_l[r * hq + h] = l;
      } else if (c.plan.kinds[static_cast<std::size_t>(r)] == ragged::kWithPrefix) {
        if (m == kNegInf) continue;  // no own key: out already holds the prefix's result
        // o = (l_p o_p e^(m_p - m*) + acc e^(m - m*)) / (l_p e^(m_p - m*) + l e^(m - m*));
        // a NaN on either side wins.
        const float mp = c.prefix_m[r * hq + h];
        const float lp = c.prefix_l[r * hq + h];
        const float mx = (mp > m || mp != mp) ? mp : m;
        const float wp = lp * std::exp(mp - mx);
        const float wo = std::exp(m - mx);
        const float total = wp + l * wo;
        const float inv = total != 0.0f ? 1.0f / total : 0.0f;
        for (std::int64_t e = 0; e < c.dims.dv; ++e) {
          const float prior = wp != 0.0f ? wp * o[e * os] : 0.0f;
          o[e * os] = (prior + acc[e] * wo) * inv;
        }
        continue;
      }
      const float inv = l != 0.0f ? 1.0f / l : 0.0f;
      for (std::int64_t e = 0; e < c.dims.dv; ++e) o[e * os] = acc[e] * inv;
    }
  }
}

// Flash-decoding merge of a split (tile, kv head): every chunk's state rescaled
// to the common max, summed into chunk 0's. The states stay unrotated (kI4H V):
// Finish rotates the merged one.
void MergeChunks(const Call& c, const Tile& tile, std::int64_t kvh) {
  const std::int64_t state_rows = c.dims.group * tile.rows;
  const StateView into = ViewState(c.Partial(tile, kvh, 0), state_rows);
  for (std::int64_t r = 0; r < state_rows; ++r) {
    // A NaN max (a NaN score in that chunk) wins, so the row is NaN however the
    // keys were split.
    float m = kNegInf;
    for (std::int64_t k = 0; k < tile.chunks && m == m; ++k) {
      const float km = ViewState(c.Partial(tile, kvh, k), state_rows).m[r];
      if (km > m || km != km) m = km;
    }
    float* acc = into.acc + r * c.layout.acc_stride;
    if (m == kNegInf) {
      into.l[r] = 0.0f;
      continue;
    }
    const float w0 = std::exp(into.m[r] - m);
    float l = into.l[r] * w0;
    for (std::int64_t e = 0; e < c.dims.dv; ++e) acc[e] *= w0;
    for (std::int64_t k = 1; k < tile.chunks; ++k) {
      const StateView from = ViewState(c.Partial(tile, kvh, k), state_rows);
      const float w = std::exp(from.m[r] - m);
      l += from.l[r] * w;
      const float* src = from.acc + r * c.layout.acc_stride;
      for (std::int64_t e = 0; e < c.dims.dv; ++e) acc[e] += src[e] * w;
    }
    into.m[r] = m;
    into.l[r] = l;
  }
}

// The tile of a phase that holds task `task` (tiles are in task order).
const Tile& TileOfTask(std::span<const Tile> tiles, std::int64_t task) {
  const auto it = std::upper_bound(
      tiles.begin(), tiles.end(), task,
      [](std::int64_t value, const Tile& tile) { return value < tile.first_task; });
  return *(it - 1);
}

void RunPhase(const Call& c, Executor& executor, int phase) {
  const std::size_t first = phase == 0 ? 0 : static_cast<std::size_t>(c.plan.phase_tiles[0]);
  const std::span<const Tile> tiles =
      c.plan.tiles.subspan(first, static_cast<std::size_t>(c.plan.phase_tiles[phase]));
  if (tiles.empty()) return;
  const int threads = executor.Concurrency();
  const auto run_task = [&](std::size_t task_index, int worker) {
    Expects(worker >= 0 && worker < threads);
    const auto task = static_cast<std::int64_t>(task_index);
    const Tile& tile = TileOfTask(tiles, task);
    const std::int64_t local = task - tile.first_task;
    const std::int64_t kvh = local / tile.chunks;
    const std::int64_t chunk = local % tile.chunks;
    const std::int64_t state_rows = c.dims.group * tile.rows;
    if (tile.chunks > 1) {
      RunTask(c, tile, kvh, chunk, worker, ViewState(c.Partial(tile, kvh, chunk), state_rows));
      return;
    }
    const StateView state =
        ViewState(reinterpret_cast<float*>(c.workspace + c.layout.workers_at +
                                           c.layout.worker_bytes * worker + c.layout.state_at),
                  state_rows);
    RunTask(c, tile, kvh, chunk, worker, state);
    Finish(c, tile, kvh, state);
  };
  executor.Run(static_cast<std::size_t>(c.plan.phase_tasks[phase]), run_task);
  if (!c.plan.phase_split[phase]) return;

  const auto merge_task = [&](std::size_t unit, int /*worker*/) {
    const Tile& tile = tiles[unit / static_cast<std::size_t>(c.dims.hkv)];
    if (tile.chunks == 1) return;
    const auto kvh = static_cast<std::int64_t>(unit % static_cast<std::size_t>(c.dims.hkv));
    MergeChunks(c, tile, kvh);
    Finish(c, tile, kvh, ViewState(c.Partial(tile, kvh, 0), c.dims.group * tile.rows));
  };
  executor.Run(tiles.size() * static_cast<std::size_t>(c.dims.hkv), merge_task);
}

}  // namespace

RaggedSdpaShape ShapeOf(const RaggedSdpaParams& params) noexcept {
  RaggedSdpaShape shape;
  shape.q_heads = params.q.shape[1];
  shape.kv_heads = params.kv_heads;
  shape.rows = params.q.shape[2];
  shape.key_dim = params.q.shape[3];
  shape.value_dim = params.value_dim;
  shape.runs = static_cast<std::int64_t>(params.runs.size());
  shape.prefixes = static_cast<std::int64_t>(params.prefixes.size());
  shape.groups = static_cast<std::int64_t>(params.groups.size());
  for (const RaggedRun& run : params.runs) shape.keys += run.count;
  shape.rotated_keys = params.k_dtype == DType::kI4H;
  shape.quantized = IsQuantized(params.k_dtype);
  return shape;
}

std::size_t RaggedSdpaWorkspaceBytes(const RaggedSdpaShape& shape, int concurrency) noexcept {
  return static_cast<std::size_t>(
      ragged::MakeLayout(ragged::DimsOf(shape), SdpaTuning{}, concurrency).total_bytes);
}

void RaggedSdpa(const RaggedSdpaParams& params, const KernelTable& table, Executor& executor,
                std::span<std::byte> workspace) noexcept {
  const SdpaTuning tuning;
  const Dims dims = Validate(params, table);
  const int threads = executor.Concurrency();
  const Layout layout = ragged::MakeLayout(dims, tuning, threads);
  Expects(workspace.size() >= static_cast<std::size_t>(layout.total_bytes));
  Expects(reinterpret_cast<std::uintptr_t>(workspace.data()) % kSdpaWorkspaceAlignment == 0);
  const Plan plan = ragged::BuildPlan(params, dims, tuning, threads, layout, workspace);

  // Rows in no group are zeros; every other row is written by its own pass.
  for (std::int64_t r = 0; r < dims.n; ++r) {
    if (plan.kinds[static_cast<std::size_t>(r)] != ragged::kNoGroup) continue;
    for (std::int64_t h = 0; h < dims.hq; ++h) {
      float* o = params.out + h * params.out_strides[1] + r * params.out_strides[2];
      for (std::int64_t e = 0; e < dims.dv; ++e) o[e * params.out_strides[3]] = 0.0f;
    }
  }
  auto* const prefix_state = reinterpret_cast<float*>(workspace.data() + layout.prefix_state_at);
  const Call call{params,
                  table,
                  tuning,
                  dims,
                  layout,
                  plan,
                  workspace.data(),
                  prefix_state,
                  prefix_state + dims.n * dims.hq,
                  params.v_dtype == DType::kI4H};
  RunPhase(call, executor, 0);
  RunPhase(call, executor, 1);
}

}  // namespace ringkv::kernels
