#pragma once
// How the attend kernels (attend-inl.h, attend_quant-inl.h) cover a tile's query
// rows with register tiles, and a block's keys with key tiles. Both steps, the
// scores and the V accumulation, walk the rows the same way: a few fixed shapes, each a template
// instance whose accumulators stay in registers, chosen once per block. Internal linkage, see
// simd_compat-inl.h.
#include <cstdint>

namespace ringkv::kernels {
namespace {

// Calls tile.template operator()<Rows, Cols>(first_row) for each register tile
// over `rows` rows: tiles of kWideRows rows while rows >= wide_from (kWideRows 0:
// none), then tiles of 4 rows and kFourCols columns (keys or V vectors), then
// one last tile of 3, 2 or 1 rows whose columns grow as its rows shrink (unit x 1,
// 2, 4), so that it keeps about as many independent accumulators as a full one.
template <int kWideRows, int kWideCols, int kFourCols, int kTailUnit, class Tile>
void ForEachRowTile(std::int64_t rows, std::int64_t wide_from, const Tile& tile) {
  std::int64_t r = 0;
  if constexpr (kWideRows > 0) {
    if (rows >= wide_from) {
      for (; r + kWideRows <= rows; r += kWideRows) {
        tile.template operator()<kWideRows, kWideCols>(r);
      }
    }
  }
  for (; r + 4 <= rows; r += 4) tile.template operator()<4, kFourCols>(r);
  switch (rows - r) {
    case 3:
      tile.template operator()<3, kTailUnit>(r);
      break;
    case 2:
      tile.template operator()<2, 2 * kTailUnit>(r);
      break;
    case 1:
      tile.template operator()<1, 4 * kTailUnit>(r);
      break;
    default:
      break;
  }
}

// Calls tile.template operator()<Keys>(j) over the kb keys of a block: tiles of
// kKeys keys from j = 0, then one of 2 keys when kKeys > 2, then single keys;
// before(j, keys) runs ahead of each (the kernels' prefetch).
template <int kKeys, class Before, class Tile>
__attribute__((always_inline)) inline void ForEachKeyTile(std::int64_t kb, const Before& before,
                                                          const Tile& tile) {
  std::int64_t j = 0;
  for (; j + kKeys <= kb; j += kKeys) {
    before(j, kKeys);
    tile.template operator()<kKeys>(j);
  }
  if constexpr (kKeys > 2) {
    if (j + 2 <= kb) {
      before(j, 2);
      tile.template operator()<2>(j);
      j += 2;
    }
  }
  for (; j < kb; ++j) {
    before(j, 1);
    tile.template operator()<1>(j);
  }
}

}  // namespace
}  // namespace ringkv::kernels
