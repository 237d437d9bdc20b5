#pragma once
// The SequenceCache::State a CausalCache saves: every sequence's extents and
// tail, sharing the blocks (O(blocks) to save, no K/V copy). It pins those blocks
// and names its pool, so it restores only into the cache that owns that pool.

#include <memory>
#include <vector>

#include "pinned_blocks.h"
#include "sequence_table.h"

namespace ringkv::detail {

class CausalState final : public SequenceCache::State {
 public:
  CausalState(std::shared_ptr<BlockPool> pool, std::vector<SequenceSlot> sequences,
              std::span<const Extent> all_extents)
      : sequences_(std::move(sequences)), pins_(std::move(pool), all_extents) {}

  const std::vector<SequenceSlot>& Sequences() const noexcept { return sequences_; }
  const BlockPool* Pool() const noexcept { return pins_.Pool().get(); }

 private:
  std::vector<SequenceSlot> sequences_;  // the live ones only
  PinnedBlocks pins_;
};

}  // namespace ringkv::detail
