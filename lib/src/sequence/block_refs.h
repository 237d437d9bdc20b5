#pragma once
// Reference bookkeeping for owners of extent lists. An owner (a sequence, a
// snapshot, a saved state) holds one reference on each distinct block its
// extents use. A change of one or more owners' extents is applied as a net
// difference: Add the new lists with +1 and the old ones with -1, then Apply
// retains and releases only what changed (retains first, so a block moving
// between owners is never freed on the way). Scratch sized once per pool:
// nothing allocates after construction.

#include <cstdint>
#include <span>
#include <vector>

#include "block_pool.h"
#include "extents.h"

namespace ringkv::detail {

class BlockRefDelta {
 public:
  explicit BlockRefDelta(std::int64_t capacity_blocks);

  // Counts each distinct block of `extents` once, with `sign` (+1 or -1).
  void Add(std::span<const Extent> extents, int sign) noexcept;
  // Blocks the net change would free (their count would reach 0).
  std::int64_t WouldFree(const BlockPool& pool) const;
  // Retains and releases the net change, then clears it.
  void Apply(BlockPool& pool) noexcept;
  // Forgets the pending change.
  void Clear() noexcept;

 private:
  std::vector<std::uint32_t> seen_;  // per block: the Add call that last counted it
  std::uint32_t stamp_ = 0;
  std::vector<std::int32_t> delta_;  // per block
  std::vector<BlockId> touched_;     // blocks with a delta entry, capacity reserved
  std::vector<bool> listed_;         // per block: in touched_
};

// The distinct blocks of `extents`, appended to `out` (via a scratch mark).
void DistinctBlocks(std::span<const Extent> extents, std::vector<BlockId>& out);

}  // namespace ringkv::detail
