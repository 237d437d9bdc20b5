#pragma once
// The work plan of one RaggedSdpa call, built serially before any attention runs
// and kept in the call's workspace (nothing is allocated). Kept apart from the
// driver so tests can check the plan itself: which key runs each task reads.
//
// Passes. Every group's own runs form one pass over the group's rows (their
// ranges shifted past the prefix and clipped to the own keys). Every prefix
// forms one pass too, whose rows are the union of the rows of every group that
// names it and sees some of its keys (each clipped to the prefix's keys): the
// prefix's K/V is read once per kv head and row tile for all those groups, not
// once per group. Key index 0 of a pass is the first key of its list.
//
// Tiles and tasks. A pass's rows are cut into row tiles of at most
// Layout::rows_per_tile rows (G x rows state rows); a tile only reads the keys
// [t0, t1) that some row of it sees. Each (tile, kv head) is one task, or, when
// the phase has few tasks for the threads or the tile's keys are long, `chunks`
// tasks over consecutive chunks of [t0, t1) whose partial states are merged
// afterwards (flash-decoding). Prefix tiles run first (phase 0), own tiles second
// (phase 1): an own row merges the prefix pass's state into its own.

#include <cstddef>
#include <cstdint>
#include <span>

#include "ringkv/kernels/ragged_sdpa.h"
#include "sdpa_tuning.h"

namespace ringkv::kernels::ragged {

struct Dims {
  std::int64_t hq, hkv, group, n, d, dv, runs, prefixes, groups;
  bool rotate_q;   // K is kI4H: each task rotates its query rows into worker scratch
  bool quantized;  // K and V quantized: prefill tiles dequantize blocks into scratch
};

Dims DimsOf(const RaggedSdpaShape& shape) noexcept;

// Per q row: what the plan found.
enum RowKind : unsigned char {
  kNoGroup = 0,     // out is zero
  kOwnOnly = 1,     // its own pass writes out
  kWithPrefix = 2,  // its prefix pass stores a state first, its own pass merges it
};

// One row tile of one pass.
struct Tile {
  std::int64_t pass_group = -1;   // own pass: the group; prefix pass: -1
  std::int64_t pass_prefix = -1;  // prefix pass: the prefix; own pass: -1
  std::int64_t first_run = 0;     // the pass's key list: runs [first_run, first_run + run_count)
  std::int64_t run_count = 0;
  std::int64_t first_entry = 0;  // its rows: entries [first_entry, first_entry + rows)
  std::int64_t rows = 0;
  std::int64_t t0 = 0;  // keys some row sees, in the pass's list
  std::int64_t t1 = 0;
  std::int64_t chunks = 1;          // tasks per kv head
  std::int64_t first_task = 0;      // in its phase: [first_task, first_task + hkv * chunks)
  std::int64_t first_partial = -1;  // chunks > 1: partial states [first_partial, + hkv * chunks)
};

// Where everything lives in the workspace (bytes, each part 64-byte aligned):
// [row kinds | prefix keys | entries | tiles | prefix states | workers | partials].
struct Layout {
  std::int64_t rows_per_tile;  // Lt
  std::int64_t tile_rows;      // G * Lt: state rows per task
  std::int64_t acc_stride;     // Dv rounded up to 16
  std::int64_t scratch_floats;
  std::int64_t q_floats;      // rotated query rows (kI4H keys), else 0
  std::int64_t state_floats;  // m, l, acc of one task
  std::int64_t max_entries;   // own rows + prefix rows
  std::int64_t max_tiles;
  std::int64_t max_partials;     // partial states of one phase
  std::int64_t kinds_at;         // [N] RowKind
  std::int64_t prefix_keys_at;   // [prefixes] int64
  std::int64_t entries_at;       // [3, max_entries] int64: q row, lo, hi
  std::int64_t tiles_at;         // [max_tiles] Tile
  std::int64_t prefix_state_at;  // [2, N, Hq] f32: m, l of each row's prefix pass
  std::int64_t workers_at;       // [threads] worker blocks of worker_bytes:
  std::int64_t worker_bytes;     //   [runs] KvRun (a task's list, offset to its kv head),
  std::int64_t scratch_at;       //   then the attend scratch [scratch_floats] f32,
  std::int64_t q_at;             //   then the rotated q rows [G, Lt, RoundUp(D, 16)] f32,
  std::int64_t state_at;         //   then the state of an unsplit task [state_floats] f32
  std::int64_t partials_at;      // [max_partials, state_floats] f32
  std::int64_t total_bytes;
};

Layout MakeLayout(const Dims& dims, const SdpaTuning& tuning, int threads) noexcept;

struct Plan {
  std::span<const unsigned char> kinds;  // [N] RowKind
  std::span<const std::int64_t> prefix_keys;
  std::span<const std::int64_t> q_row, lo, hi;  // entries
  std::span<const Tile> tiles;                  // phase 0 (prefix tiles), then phase 1
  std::int64_t phase_tiles[2] = {0, 0};
  std::int64_t phase_tasks[2] = {0, 0};
  bool phase_split[2] = {false, false};  // some tile of the phase has chunks > 1
};

// Builds the plan of `params` into the plan part of `workspace` (laid out by
// `layout`, from MakeLayout(DimsOf(ShapeOf(params)), tuning, threads)).
// Reads sizes, runs, groups, rows and ranges, never K/V/q data.
Plan BuildPlan(const RaggedSdpaParams& params, const Dims& dims, const SdpaTuning& tuning,
               int threads, const Layout& layout, std::span<std::byte> workspace) noexcept;

}  // namespace ringkv::kernels::ragged
