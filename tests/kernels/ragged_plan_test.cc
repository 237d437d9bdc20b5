// The RaggedSdpa work plan (kernels/src/ragged_plan.h), checked directly: a
// shared prefix's runs are read only by prefix tasks, once per kv head and row
// tile, for exactly the rows that see some of its keys (computed here from the
// ranges alone); every other task reads its group's own runs; chunks partition
// their tile's keys. And the workspace: ShapeOf by hand, and a size that depends
// on the row, run and group counts, never on the key count.
#include "ragged_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <vector>

#include "attend_tile.h"
#include "ragged_problem.h"
#include "ringkv/kernels/ragged_sdpa.h"
#include "sdpa_run.h"

namespace ringkv::kernels {
namespace {

using test::GroupSpec;
using test::I64;
using test::RaggedCase;
using test::RaggedProblem;
using test::Ranges;

// Decode of `groups` groups, one row each, all naming prefix 0 (three runs) but
// every fourth naming prefix 1; windows that cover prefix 0 fully, partly or
// not at all.
RaggedCase DecodeCase(I64 groups, I64 hq, I64 hkv) {
  RaggedCase c{
      .name = "plan", .hq = hq, .hkv = hkv, .d = 16, .dv = 16, .prefixes = {{256, 256, 88}, {40}}};
  for (I64 g = 0; g < groups; ++g) {
    GroupSpec spec{.prefix = g % 4 == 3 ? 1 : 0, .own = {g + 3, 5}, .rows = 1};
    if (g % 3 == 1) {
      spec.ranges = Ranges::kWindow;
      spec.window = 100 + g * 7;  // starts inside prefix 0
    } else if (g % 3 == 2) {
      spec.ranges = Ranges::kWindow;
      spec.window = g + 8;  // the own keys only
    }
    c.groups.push_back(spec);
  }
  c.loose_rows = 2;
  return c;
}

struct Built {
  RaggedProblem p;
  ragged::Dims dims{};
  ragged::Layout layout{};
  std::unique_ptr<test::AlignedBytes> workspace;
  ragged::Plan plan;
};

void Build(const RaggedCase& c, int threads, Built& b) {
  test::MakeRaggedProblem(c, 7, b.p);
  b.dims = ragged::DimsOf(ShapeOf(b.p.params));
  b.layout = ragged::MakeLayout(b.dims, SdpaTuning{}, threads);
  ASSERT_EQ(static_cast<std::size_t>(b.layout.total_bytes),
            RaggedSdpaWorkspaceBytes(ShapeOf(b.p.params), threads));
  b.workspace =
      std::make_unique<test::AlignedBytes>(static_cast<std::size_t>(b.layout.total_bytes));
  b.plan =
      ragged::BuildPlan(b.p.params, b.dims, SdpaTuning{}, threads, b.layout, b.workspace->Span());
}

void CheckPrefixReadOncePerRowTile(const RaggedCase& c, int threads, I64 want_prefix0_tiles) {
  Built b;
  Build(c, threads, b);
  const RaggedProblem& p = b.p;
  const ragged::Plan& plan = b.plan;

  // From the ranges alone: the rows that see some key of each prefix.
  std::vector<std::set<I64>> want_rows(p.prefixes.size());
  for (const RaggedGroup& g : p.groups) {
    if (g.prefix < 0) continue;
    const kernels::RaggedPrefix& pre = p.prefixes[static_cast<std::size_t>(g.prefix)];
    const I64 keys = test::KeysOf(p, [&] {
      std::vector<I64> list;
      for (I64 j = 0; j < pre.run_count; ++j) list.push_back(pre.first_run + j);
      return list;
    }());
    for (I64 j = g.first_row; j < g.first_row + g.row_count; ++j) {
      const I64 r = p.rows[static_cast<std::size_t>(j)];
      if (std::max<I64>(p.row_lo[static_cast<std::size_t>(r)], 0) <
          std::min(p.row_hi[static_cast<std::size_t>(r)], keys)) {
        want_rows[static_cast<std::size_t>(g.prefix)].insert(r);
      }
    }
  }

  std::vector<std::set<I64>> got_rows(p.prefixes.size());
  std::vector<I64> prefix_tiles(p.prefixes.size(), 0);
  // reads[prefix][kv head][key]: how many tasks read that prefix key.
  std::vector<std::vector<std::vector<int>>> reads(p.prefixes.size());
  for (std::size_t i = 0; i < p.prefixes.size(); ++i) {
    reads[i].assign(static_cast<std::size_t>(c.hkv),
                    std::vector<int>(static_cast<std::size_t>(plan.prefix_keys[i]), 0));
  }
  for (std::size_t ti = 0; ti < plan.tiles.size(); ++ti) {
    const ragged::Tile& tile = plan.tiles[ti];
    const bool phase0 = static_cast<I64>(ti) < plan.phase_tiles[0];
    EXPECT_EQ(phase0, tile.pass_prefix >= 0);
    // A task reads the runs [first_run, first_run + run_count) of params.runs.
    for (std::size_t i = 0; i < p.prefixes.size(); ++i) {
      const kernels::RaggedPrefix& pre = p.prefixes[i];
      const bool overlaps = tile.first_run < pre.first_run + pre.run_count &&
                            pre.first_run < tile.first_run + tile.run_count;
      if (static_cast<I64>(i) == tile.pass_prefix) {
        EXPECT_EQ(tile.first_run, pre.first_run);
        EXPECT_EQ(tile.run_count, pre.run_count);
      } else if (pre.run_count > 0) {
        EXPECT_FALSE(overlaps) << "tile " << ti << " reads runs of prefix " << i;
      }
    }
    if (tile.pass_group >= 0) {
      const RaggedGroup& g = p.groups[static_cast<std::size_t>(tile.pass_group)];
      EXPECT_EQ(tile.first_run, g.first_run);
      EXPECT_EQ(tile.run_count, g.run_count);
      continue;
    }
    const auto pi = static_cast<std::size_t>(tile.pass_prefix);
    ++prefix_tiles[pi];
    for (I64 e = tile.first_entry; e < tile.first_entry + tile.rows; ++e) {
      EXPECT_TRUE(got_rows[pi].insert(plan.q_row[static_cast<std::size_t>(e)]).second);
    }
    for (I64 h = 0; h < c.hkv; ++h) {
      for (I64 k = 0; k < tile.chunks; ++k) {
        const I64 span = tile.t1 - tile.t0;
        for (I64 t = tile.t0 + span * k / tile.chunks; t < tile.t0 + span * (k + 1) / tile.chunks;
             ++t) {
          ++reads[pi][static_cast<std::size_t>(h)][static_cast<std::size_t>(t)];
        }
      }
    }
  }
  for (std::size_t i = 0; i < p.prefixes.size(); ++i) {
    EXPECT_EQ(got_rows[i], want_rows[i]) << "prefix " << i;
    for (const auto& per_head : reads[i]) {
      for (int n : per_head) EXPECT_LE(n, prefix_tiles[i]);
    }
  }
  EXPECT_EQ(prefix_tiles[0], want_prefix0_tiles);
  // One row tile: every prefix key some row sees is read exactly once per kv head.
  if (want_prefix0_tiles == 1) {
    I64 lo = plan.prefix_keys[0];
    for (I64 r : want_rows[0])
      lo = std::min(lo, std::max<I64>(p.row_lo[static_cast<std::size_t>(r)], 0));
    for (const auto& per_head : reads[0]) {
      for (I64 t = 0; t < plan.prefix_keys[0]; ++t) {
        EXPECT_EQ(per_head[static_cast<std::size_t>(t)], t >= lo ? 1 : 0) << t;
      }
    }
  }
}

// 16 decode rows x G 4 = 64 state rows: one tile, as in BM_RaggedDecode's shared-prefix case.
TEST(RaggedPlanTest, SharedPrefixIsReadOncePerKvHead) {
  CheckPrefixReadOncePerRowTile(DecodeCase(16, 32, 8), 1, 1);
  CheckPrefixReadOncePerRowTile(DecodeCase(16, 32, 8), 2, 1);
}

// 2 kv heads of G 2 on 2 threads: 2 prefix tasks split into chunks, still each key once.
TEST(RaggedPlanTest, SplitPrefixChunksPartitionItsKeys) {
  CheckPrefixReadOncePerRowTile(DecodeCase(9, 4, 2), 2, 1);
  Built b;
  Build(DecodeCase(9, 4, 2), 2, b);
  ASSERT_GE(b.plan.phase_tiles[0], 1);
  EXPECT_EQ(b.plan.tiles[0].pass_prefix, 0);
  EXPECT_GT(b.plan.tiles[0].chunks, 1);  // 600 keys x 2 heads for 8 wanted tasks
  EXPECT_TRUE(b.plan.phase_split[0]);
}

// More rows than a tile holds: one read per row tile, never per group.
TEST(RaggedPlanTest, ManyRowsReadThePrefixOncePerRowTile) {
  // G 8: 8 rows per tile; 10 of the 20 rows name prefix 0 and see some of it -> 2 tiles.
  CheckPrefixReadOncePerRowTile(DecodeCase(20, 8, 1), 2, 2);
}

TEST(RaggedWorkspaceTest, ShapeOfByHand) {
  RaggedProblem p;
  test::MakeRaggedProblem(DecodeCase(5, 8, 2), 1, p);
  const RaggedSdpaShape s = ShapeOf(p.params);
  EXPECT_EQ(s.q_heads, 8);
  EXPECT_EQ(s.kv_heads, 2);
  EXPECT_EQ(s.rows, 7);  // 5 groups of one row + 2 loose
  EXPECT_EQ(s.key_dim, 16);
  EXPECT_EQ(s.value_dim, 16);
  EXPECT_EQ(s.runs, 4 + 5 * 2);
  EXPECT_EQ(s.prefixes, 2);
  EXPECT_EQ(s.groups, 5);
  EXPECT_EQ(s.keys, 256 + 256 + 88 + 40 + (3 + 4 + 5 + 6 + 7) + 5 * 5);
  EXPECT_FALSE(s.rotated_keys);
}

// kI4H keys (and only they) add the rotated query rows of one tile per worker,
// G x Lt x RoundUp(D, 16) floats (here 4 x 7 x 32: Lt is clamped to the 7 rows), so lib/'s arena,
// sized by RaggedSdpaWorkspaceBytes (ShapeOf(params)), follows without knowing why.
TEST(RaggedWorkspaceTest, RotatedKeysAddTheRotatedQueryRowsPerWorker) {
  for (DType v : {DType::kI8, DType::kI4H}) {
    RaggedCase c = DecodeCase(5, 8, 2);
    c.d = c.dv = 32;
    c.dtype = DType::kI4H;
    c.v_dtype = v;
    RaggedProblem p;
    test::MakeRaggedProblem(c, 1, p);
    RaggedSdpaShape s = ShapeOf(p.params);
    EXPECT_TRUE(s.rotated_keys);
    for (int threads : {1, 2}) {
      const std::size_t rotated = RaggedSdpaWorkspaceBytes(s, threads);
      s.rotated_keys = false;
      EXPECT_EQ(rotated - RaggedSdpaWorkspaceBytes(s, threads),
                static_cast<std::size_t>(threads) * 4 * 7 * 32 * sizeof(float));
      s.rotated_keys = true;
    }
  }
  RaggedCase c = DecodeCase(5, 8, 2);
  c.d = c.dv = 32;
  c.dtype = DType::kI4;
  c.v_dtype = DType::kI4H;  // rotating out needs no scratch
  RaggedProblem p;
  test::MakeRaggedProblem(c, 1, p);
  EXPECT_FALSE(ShapeOf(p.params).rotated_keys);
}

// Prefill-sized tiles convert each block of quantized, f16 or bf16 K/V into
// f32 scratch (attend_tile.h, BlockScratchFloats): a float shape reserves that
// block too, so quantizing adds nothing there; decode tiles of quantized K/V
// take room for their int4 value weights: their rows x the key block rounded to
// 32 x one float per 64 values of Dv.
TEST(RaggedWorkspaceTest, PrefillReservesAConvertedBlockForEveryDtypeDecodeQuantizedAddsWeights) {
  RaggedSdpaShape s{.q_heads = 8,
                    .kv_heads = 2,
                    .rows = 64,
                    .key_dim = 64,
                    .value_dim = 32,
                    .runs = 3,
                    .prefixes = 0,
                    .groups = 2,
                    .keys = 900};
  for (int threads : {1, 2}) {
    const std::size_t floats = RaggedSdpaWorkspaceBytes(s, threads);
    s.quantized = true;
    EXPECT_EQ(RaggedSdpaWorkspaceBytes(s, threads), floats);
    s.quantized = false;
  }
  s.rows = 2;  // G x 2 = 8 state rows: read in place
  const std::size_t decode = RaggedSdpaWorkspaceBytes(s, 2);
  s.quantized = true;
  const std::int64_t block = (SdpaTuning{}.key_block + 31) / 32 * 32;
  EXPECT_EQ(RaggedSdpaWorkspaceBytes(s, 2) - decode,
            static_cast<std::size_t>(2 * 8 * block * 1) * sizeof(float));
}

// BM_RaggedDecode's shape: 32 groups x 16 runs of 256 keys, Hq 32 / Hkv 8 / D 128.
RaggedSdpaShape DecodeShape(I64 keys) {
  return {.q_heads = 32,
          .kv_heads = 8,
          .rows = 32,
          .key_dim = 128,
          .value_dim = 128,
          .runs = 32 * 16,
          .prefixes = 0,
          .groups = 32,
          .keys = keys};
}

TEST(RaggedWorkspaceTest, SizeDoesNotDependOnTheKeys) {
  for (int threads : {1, 2, 8}) {
    EXPECT_EQ(RaggedSdpaWorkspaceBytes(DecodeShape(32 * 4096), threads),
              RaggedSdpaWorkspaceBytes(DecodeShape(32), threads));
  }
}

// Exact enough: per worker the attend scratch of one 64-row tile (64 x (128 +
// 64 + 16) floats), the converted block such a tile takes (64 keys x 128 floats
// of V and 128 x 64 of K key-major: the shape alone cannot rule out 16 rows of
// one sequence in a tile), its state (64 x (2 + 128) floats) and the run list
// (512 x 48 bytes) = 173 KiB; on 2 threads the flash-decoding partial states,
// 2 x 4 x 2 tasks' states = 520 KiB; the plan is a few KiB. Nothing may scale
// with keys.
TEST(RaggedWorkspaceTest, DecodeSizeIsWhatTheTasksNeed) {
  const std::size_t worker =
      512 * sizeof(KvRun) + (64 * (128 + 64 + 16) + 64 * 128 + 128 * 64 + 64 * 130) * 4;
  const std::size_t partials = 16 * static_cast<std::size_t>(64 * 130) * 4;
  const std::size_t one = RaggedSdpaWorkspaceBytes(DecodeShape(32 * 4096), 1);
  const std::size_t two = RaggedSdpaWorkspaceBytes(DecodeShape(32 * 4096), 2);
  EXPECT_GE(one, worker);
  EXPECT_LE(one, worker + 16 * 1024);
  EXPECT_GE(two, 2 * worker + partials);
  EXPECT_LE(two, 2 * worker + partials + 16 * 1024);
}

// Prefill with a shared prefix: the prefix states are 2 floats per (row, q
// head); the whole workspace stays well under the size of out itself.
TEST(RaggedWorkspaceTest, PrefillWithPrefixStaysBelowTheOutput) {
  const RaggedSdpaShape shape{.q_heads = 32,
                              .kv_heads = 8,
                              .rows = 4096,
                              .key_dim = 128,
                              .value_dim = 128,
                              .runs = 32,
                              .prefixes = 1,
                              .groups = 2,
                              .keys = 8192};
  const std::size_t out_bytes = 4096 * 32 * 128 * 4;
  EXPECT_LT(RaggedSdpaWorkspaceBytes(shape, 2), out_bytes / 8);
}

}  // namespace
}  // namespace ringkv::kernels
