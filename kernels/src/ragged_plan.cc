// See ragged_plan.h.
#include "ragged_plan.h"

#include <algorithm>
#include <gsl/assert>
#include <new>

#include "attend_tile.h"

namespace ringkv::kernels::ragged {
namespace {

constexpr std::int64_t kPad = 16;  // floats: 64 bytes
constexpr auto kAlign = static_cast<std::int64_t>(kSdpaWorkspaceAlignment);

std::int64_t RoundUp(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }
std::int64_t CeilDiv(std::int64_t x, std::int64_t y) { return (x + y - 1) / y; }

template <class T>
T* At(std::span<std::byte> workspace, std::int64_t offset) {
  return reinterpret_cast<T*>(workspace.data() + offset);
}

std::int64_t KeysOf(const RaggedSdpaParams& p, std::int64_t first_run, std::int64_t run_count) {
  std::int64_t keys = 0;
  for (std::int64_t j = first_run; j < first_run + run_count; ++j) {
    keys += p.runs[static_cast<std::size_t>(j)].count;
  }
  return keys;
}

// Cuts the entries [first, first + count) of one pass into row tiles.
void AddTiles(std::int64_t pass_group, std::int64_t pass_prefix, std::int64_t first_run,
              std::int64_t run_count, std::int64_t first, std::int64_t count, const Layout& layout,
              const std::int64_t* lo, const std::int64_t* hi, Tile* tiles,
              std::int64_t& tile_count) {
  for (std::int64_t e0 = first; e0 < first + count; e0 += layout.rows_per_tile) {
    Expects(tile_count < layout.max_tiles);
    Tile& tile = *new (tiles + tile_count++) Tile;
    tile.pass_group = pass_group;
    tile.pass_prefix = pass_prefix;
    tile.first_run = first_run;
    tile.run_count = run_count;
    tile.first_entry = e0;
    tile.rows = std::min(layout.rows_per_tile, first + count - e0);
    std::int64_t t0 = 0;
    std::int64_t t1 = 0;
    bool any = false;
    for (std::int64_t e = e0; e < e0 + tile.rows; ++e) {
      if (lo[e] >= hi[e]) continue;
      t0 = any ? std::min(t0, lo[e]) : lo[e];
      t1 = any ? std::max(t1, hi[e]) : hi[e];
      any = true;
    }
    tile.t0 = t0;
    tile.t1 = t1;
  }
}

// Chunks of one phase's tiles: a chunk is at most `limit` keys, limit being the
// larger of min_chunk_keys and the phase's keys x kv heads over the tasks
// wanted. So the phase has at most tiles x hkv + wanted tasks, the split tiles
// at most 2 x wanted partial states (a tile split into c >= 2 chunks has more
// than (c - 1) x limit keys), and a short phase on many threads, or one long
// tile among short ones, is split while a phase that already has enough equal
// tasks is not.
void Split(Tile* tiles, std::int64_t count, const Dims& dims, const SdpaTuning& tuning, int threads,
           const Layout& layout, std::int64_t& tasks, bool& split) {
  std::int64_t total = 0;
  for (std::int64_t i = 0; i < count; ++i) total += (tiles[i].t1 - tiles[i].t0) * dims.hkv;
  const std::int64_t wanted = tuning.tasks_per_thread * threads;
  const std::int64_t limit = std::max(tuning.min_chunk_keys, CeilDiv(total, wanted));
  tasks = 0;
  split = false;
  std::int64_t partials = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    Tile& tile = tiles[i];
    tile.chunks = threads > 1 ? std::max<std::int64_t>(1, CeilDiv(tile.t1 - tile.t0, limit)) : 1;
    tile.first_task = tasks;
    tasks += tile.chunks * dims.hkv;
    if (tile.chunks > 1) {
      tile.first_partial = partials;
      partials += tile.chunks * dims.hkv;
      split = true;
    }
  }
  Expects(partials <= layout.max_partials);
}

}  // namespace

Dims DimsOf(const RaggedSdpaShape& s) noexcept {
  Expects(s.q_heads >= 1 && s.kv_heads >= 1 && s.q_heads % s.kv_heads == 0);
  Expects(s.rows >= 0 && s.key_dim >= 1 && s.value_dim >= 1);
  Expects(s.runs >= 0 && s.prefixes >= 0 && s.groups >= 0 && s.keys >= 0);
  return {
      s.q_heads,  s.kv_heads, s.q_heads / s.kv_heads, s.rows,     s.key_dim, s.value_dim, s.runs,
      s.prefixes, s.groups,   s.rotated_keys,         s.quantized};
}

Layout MakeLayout(const Dims& dims, const SdpaTuning& tuning, int threads) noexcept {
  Expects(threads >= 1);
  Layout l{};
  l.rows_per_tile =
      std::clamp<std::int64_t>(tuning.tile_rows / dims.group, 1, std::max<std::int64_t>(dims.n, 1));
  l.tile_rows = dims.group * l.rows_per_tile;
  l.acc_stride = RoundUp(dims.dv, kPad);
  l.scratch_floats = l.tile_rows * (RoundUp(dims.d, kPad) + tuning.key_block + kPad);
  l.scratch_floats +=
      BlockScratchFloats(l.tile_rows, tuning.key_block, dims.d, dims.dv, dims.quantized);
  l.q_floats = dims.rotate_q ? l.tile_rows * RoundUp(dims.d, kPad) : 0;
  l.state_floats = RoundUp(l.tile_rows, kPad) * 2 + l.tile_rows * l.acc_stride;
  // Each row is in at most one group, so in one own pass and at most one prefix pass.
  const std::int64_t prefix_rows = dims.prefixes > 0 ? dims.n : 0;
  l.max_entries = dims.n + prefix_rows;
  // A pass of r rows has ceil(r / Lt) <= r / Lt + 1 tiles, and only passes with rows count.
  l.max_tiles = std::min(l.max_entries, CeilDiv(dims.n, l.rows_per_tile) +
                                            CeilDiv(prefix_rows, l.rows_per_tile) + dims.groups +
                                            dims.prefixes);
  l.max_partials = threads > 1 ? 2 * tuning.tasks_per_thread * threads : 0;

  const auto f32 = static_cast<std::int64_t>(sizeof(float));
  std::int64_t at = 0;
  const auto take = [&at](std::int64_t bytes) {
    const std::int64_t here = at;
    at += RoundUp(bytes, kAlign);
    return here;
  };
  l.kinds_at = take(dims.n);
  l.prefix_keys_at = take(2 * dims.prefixes * 8);
  l.entries_at = take(3 * l.max_entries * 8);
  l.tiles_at = take(l.max_tiles * static_cast<std::int64_t>(sizeof(Tile)));
  l.prefix_state_at = take(2 * prefix_rows * dims.hq * f32);
  l.scratch_at = RoundUp(dims.runs * static_cast<std::int64_t>(sizeof(KvRun)), kAlign);
  l.q_at = l.scratch_at + l.scratch_floats * f32;
  l.state_at = l.q_at + l.q_floats * f32;
  l.worker_bytes = l.state_at + l.state_floats * f32;
  l.workers_at = take(l.worker_bytes * threads);
  l.partials_at = take(l.max_partials * l.state_floats * f32);
  l.total_bytes = at;
  return l;
}

Plan BuildPlan(const RaggedSdpaParams& p, const Dims& dims, const SdpaTuning& tuning, int threads,
               const Layout& layout, std::span<std::byte> workspace) noexcept {
  Expects(workspace.size() >= static_cast<std::size_t>(layout.total_bytes));
  auto* const kinds = At<unsigned char>(workspace, layout.kinds_at);
  std::int64_t* const prefix_keys = At<std::int64_t>(workspace, layout.prefix_keys_at);
  std::int64_t* const cursor = prefix_keys + dims.prefixes;
  std::int64_t* const q_row = At<std::int64_t>(workspace, layout.entries_at);
  std::int64_t* const lo = q_row + layout.max_entries;
  std::int64_t* const hi = lo + layout.max_entries;
  Tile* const tiles = At<Tile>(workspace, layout.tiles_at);

  std::fill_n(kinds, dims.n, kNoGroup);
  for (std::int64_t i = 0; i < dims.prefixes; ++i) {
    const RaggedPrefix& prefix = p.prefixes[static_cast<std::size_t>(i)];
    prefix_keys[i] = KeysOf(p, prefix.first_run, prefix.run_count);
    cursor[i] = 0;
  }
  // Which rows see some key of their prefix, and how many per prefix.
  for (const RaggedGroup& group : p.groups) {
    for (std::int64_t j = group.first_row; j < group.first_row + group.row_count; ++j) {
      const std::int64_t r = p.rows[static_cast<std::size_t>(j)];
      Expects(r >= 0 && r < dims.n && kinds[r] == kNoGroup);  // each row at most once
      kinds[r] = kOwnOnly;
      if (group.prefix < 0) continue;
      const std::int64_t keys = prefix_keys[group.prefix];
      const auto ri = static_cast<std::size_t>(r);
      if (std::max<std::int64_t>(p.row_lo[ri], 0) < std::min(p.row_hi[ri], keys)) {
        kinds[r] = kWithPrefix;
        ++cursor[group.prefix];
      }
    }
  }
  std::int64_t prefix_entries = 0;
  for (std::int64_t i = 0; i < dims.prefixes; ++i) {
    const std::int64_t count = cursor[i];
    cursor[i] = prefix_entries;
    prefix_entries += count;
  }
  // Entries: each prefix's rows, prefix after prefix, then each group's own rows.
  std::int64_t own_entry = prefix_entries;
  for (const RaggedGroup& group : p.groups) {
    const std::int64_t before = group.prefix >= 0 ? prefix_keys[group.prefix] : 0;
    const std::int64_t own = KeysOf(p, group.first_run, group.run_count);
    for (std::int64_t j = group.first_row; j < group.first_row + group.row_count; ++j) {
      const std::int64_t r = p.rows[static_cast<std::size_t>(j)];
      const std::int64_t row_lo = p.row_lo[static_cast<std::size_t>(r)];
      const std::int64_t row_hi = p.row_hi[static_cast<std::size_t>(r)];
      if (kinds[r] == kWithPrefix) {
        const std::int64_t e = cursor[group.prefix]++;
        q_row[e] = r;
        lo[e] = std::max<std::int64_t>(row_lo, 0);
        hi[e] = std::min(row_hi, before);
      }
      const std::int64_t e = own_entry++;
      q_row[e] = r;
      lo[e] = std::max(row_lo, before) - before;
      hi[e] = std::min(row_hi, before + own) - before;
      if (lo[e] >= hi[e]) lo[e] = hi[e] = 0;
    }
  }
  Expects(own_entry <= layout.max_entries);

  Plan plan;
  std::int64_t tile_count = 0;
  std::int64_t first = 0;
  for (std::int64_t i = 0; i < dims.prefixes; ++i) {
    const RaggedPrefix& prefix = p.prefixes[static_cast<std::size_t>(i)];
    AddTiles(-1, i, prefix.first_run, prefix.run_count, first, cursor[i] - first, layout, lo, hi,
             tiles, tile_count);
    first = cursor[i];
  }
  plan.phase_tiles[0] = tile_count;
  first = prefix_entries;
  for (std::int64_t gi = 0; gi < dims.groups; ++gi) {
    const RaggedGroup& group = p.groups[static_cast<std::size_t>(gi)];
    AddTiles(gi, -1, group.first_run, group.run_count, first, group.row_count, layout, lo, hi,
             tiles, tile_count);
    first += group.row_count;
  }
  plan.phase_tiles[1] = tile_count - plan.phase_tiles[0];
  Split(tiles, plan.phase_tiles[0], dims, tuning, threads, layout, plan.phase_tasks[0],
        plan.phase_split[0]);
  Split(tiles + plan.phase_tiles[0], plan.phase_tiles[1], dims, tuning, threads, layout,
        plan.phase_tasks[1], plan.phase_split[1]);

  plan.kinds = {kinds, static_cast<std::size_t>(dims.n)};
  plan.prefix_keys = {prefix_keys, static_cast<std::size_t>(dims.prefixes)};
  plan.q_row = {q_row, static_cast<std::size_t>(own_entry)};
  plan.lo = {lo, static_cast<std::size_t>(own_entry)};
  plan.hi = {hi, static_cast<std::size_t>(own_entry)};
  plan.tiles = {tiles, static_cast<std::size_t>(tile_count)};
  return plan;
}

}  // namespace ringkv::kernels::ragged
