#pragma once
// A sequence's tokens as extents: runs of consecutive positions stored in
// consecutive rows of one block. A sequence's extent list is sorted by position
// and its extents never overlap in position; rows in a block belong to at most
// one extent of a given owner.

#include <cstdint>
#include <span>
#include <vector>

#include "block_pool.h"
#include "ringkv/sequence_cache.h"

namespace ringkv::detail {

// Rows [row, row + count) of `block` hold positions [pos, pos + count).
struct Extent {
  BlockId block = kNoBlock;
  std::int32_t row = 0;
  std::int32_t count = 0;
  Position pos = 0;
  Position End() const noexcept { return pos + count; }
  friend bool operator==(const Extent&, const Extent&) = default;
};

using ExtentList = std::vector<Extent>;

std::int64_t TokenCount(std::span<const Extent> extents) noexcept;
bool ContainsPosition(std::span<const Extent> extents, Position pos) noexcept;
// Positions in ascending order, appended to `out`.
void AppendPositions(std::span<const Extent> extents, std::vector<Position>& out);

// Tokens with positions < pos (or >= pos) dropped, in place (no allocation).
void DropBelow(ExtentList& extents, Position pos) noexcept;
void KeepBelow(ExtentList& extents, Position pos) noexcept;
// How many tokens DropBelow / KeepBelow would leave.
std::int64_t CountAtOrAbove(std::span<const Extent> extents, Position pos) noexcept;

// The tokens at [begin, end) removed and those at end or later moved down by
// end - begin, written to `out` (cleared first; at most one more extent than
// `in`). The moved tokens are exactly the extents of `out` at positions >= begin.
void RemoveRange(std::span<const Extent> in, Position begin, Position end, ExtentList& out);

// Inserts one token (block, row, pos) in position order, merged with its
// neighbours when rows and positions both continue. Needs capacity for one more
// extent to be allocation-free. pos must not be held yet.
void InsertToken(ExtentList& extents, BlockId block, std::int32_t row, Position pos);

// One past the highest row the extents use in `block` (0 when they use none).
std::int32_t RowsUsedIn(std::span<const Extent> extents, BlockId block) noexcept;
bool UsesBlock(std::span<const Extent> extents, BlockId block) noexcept;

}  // namespace ringkv::detail
